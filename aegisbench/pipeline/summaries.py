"""Small files the DVC pipeline reads instead of large ones (``python -m aegisbench.pipeline.summaries``).

``digest REPO OUT``: the dataset's *content digest* as a tiny, path-free JSON. Stages after
``build`` depend on it instead of the whole dataset folder, so a change that only moves rows
between shards (``build.rows_per_shard``) reruns ``build`` and this stage, and nothing after
them: DVC sees the same digest file. Per image split the hash covers every row's
:func:`~aegisbench.builders.hfrepo.content_key` in order, whatever the shards (the hash the
builder would give the split written as one shard); fire-spread splits keep their shards'
content hashes (their blocks follow ``firespread.realizations_per_shard``, a fire-spread
parameter). It trusts the shards' ``sha256`` column (written by the builder; ``aegisbench
verify`` re-hashes the pixels) and decodes no image.

``ladders REPORT OUT``: the calibration report (``aegisbench calibrate --metrics``) cut to
what ``dvc metrics show`` should print: per corruption ladder, whether it is monotone and its
worst relative miss of the declared target.

>>> ladder_summary({"ok": True, "corruptions": {"fog": {"monotone": True, "severities": {
...     "s1": {"rel_error": 0.05}, "s2": {"rel_error": -0.125}}}}})
{'ladders': {'fog': {'monotone': True, 'worst_miss': 0.125}}, 'ok': True}
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import pyarrow.parquet as pq

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.hashing import json_sha256
from aegisbench.readers import read_json

log = logging.getLogger(__name__)


def _image_split_hash(repo: Path, shards: list[dict]) -> str:
    """Hash of every row's content key of one image split, across its shards, in order."""
    from aegisbench.builders.hfrepo import content_key
    from aegisbench.builders.manifest import repo_file

    keys = []
    for shard in shards:
        path = repo_file(repo, shard["path"])
        columns = [n for n in pq.read_schema(path).names if n != "image"]
        keys += [content_key(row) for row in pq.read_table(path, columns=columns).to_pylist()]
    return json_sha256(keys)


def content_digest(repo: str | Path) -> dict:
    """``{"benchmark_version", "content_digest", "rows"}`` of a dataset repo (no path, no layout)."""
    from aegisbench.builders.manifest import load_manifest
    from aegisbench.builders.shard_content import shard_kind

    repo = Path(repo)
    manifest = load_manifest(repo)
    content, rows = {}, 0
    for cfg, c in sorted(manifest["configs"].items()):
        for split, info in sorted(c["splits"].items()):
            if shard_kind(cfg) == "image":
                h = _image_split_hash(repo, info["shards"])
            else:
                h = json_sha256([s["content_sha256"] for s in info["shards"]])
            content.setdefault(cfg, {})[split] = h
            rows += sum(s["rows"] for s in info["shards"])
    version = manifest["benchmark_version"]
    return {"benchmark_version": version, "content_digest": json_sha256({"version": version, "configs": content}),
            "rows": rows}


def write_content_digest(repo: str | Path, out: str | Path) -> Path:
    """Write :func:`content_digest` of ``repo`` to ``out`` (atomic, sorted keys)."""
    doc = content_digest(repo)
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    log.info("content digest %s -> %s", doc["content_digest"], out)
    return Path(out)


def ladder_summary(report: dict) -> dict:
    """Per corruption ladder of a calibration report: ``monotone`` and ``worst_miss`` (the
    largest |relative error| to the declared target over its severities), plus ``ok``."""
    if not isinstance(report, dict) or not isinstance(report.get("corruptions"), dict):
        raise BadInput("not a calibration report (no 'corruptions' object)", where="calibration report")
    ladders = {}
    for name, c in sorted(report["corruptions"].items()):
        misses = [abs(s["rel_error"]) for s in (c.get("severities") or {}).values()
                  if isinstance(s, dict) and isinstance(s.get("rel_error"), (int, float))]
        ladders[name] = {"monotone": bool(c.get("monotone")), "worst_miss": max(misses) if misses else None}
    return {"ladders": ladders, "ok": bool(report.get("ok"))}


def write_ladder_summary(report: str | Path, out: str | Path) -> Path:
    """Write :func:`ladder_summary` of the report file ``report`` to ``out``."""
    doc = ladder_summary(read_json(Path(report), "calibration report"))
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aegisbench.pipeline.summaries", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    d = sub.add_parser("digest", help="content digest of a dataset repo (path- and layout-free JSON)")
    d.add_argument("repo")
    d.add_argument("out")
    lad = sub.add_parser("ladders", help="per-ladder summary of a calibration report")
    lad.add_argument("report")
    lad.add_argument("out")
    args = parser.parse_args(argv)
    try:
        if args.what == "digest":
            write_content_digest(args.repo, args.out)
        else:
            write_ladder_summary(args.report, args.out)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through dvc repro
    sys.exit(main())
