"""Small files the DVC pipeline reads instead of large ones (``python -m aegisbench.pipeline.summaries``).

``digest REPO OUT``: the dataset's identity as a tiny, path-free JSON: its ``benchmark_version``
and ``dataset_digest`` (the manifest's, checked; the digest every submission and result names).
Stages after ``build`` depend on it instead of the dataset folder, so a rebuild that changes
bytes but not content (a card edit, an encoder writing other PNG bytes for the same pixels,
re-sharding with another ``build.rows_per_shard``: the digest hashes each split's rows, not its
shards) reruns ``build`` and this stage, and nothing after them.

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

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.readers import read_json

log = logging.getLogger(__name__)


def dataset_identity(repo: str | Path) -> dict:
    """``{"benchmark_version", "dataset_digest"}`` of a dataset repo (its checked manifest)."""
    from aegisbench.builders.manifest import load_manifest

    manifest = load_manifest(repo)
    return {"benchmark_version": manifest["benchmark_version"], "dataset_digest": manifest["dataset_digest"]}


def write_dataset_identity(repo: str | Path, out: str | Path) -> Path:
    """Write :func:`dataset_identity` of ``repo`` to ``out`` (atomic, sorted keys)."""
    doc = dataset_identity(repo)
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    log.info("dataset digest %s -> %s", doc["dataset_digest"], out)
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
    d = sub.add_parser("digest", help="benchmark version and dataset digest of a dataset repo (path-free JSON)")
    d.add_argument("repo")
    d.add_argument("out")
    lad = sub.add_parser("ladders", help="per-ladder summary of a calibration report")
    lad.add_argument("report")
    lad.add_argument("out")
    args = parser.parse_args(argv)
    try:
        if args.what == "digest":
            write_dataset_identity(args.repo, args.out)
        else:
            write_ladder_summary(args.report, args.out)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through dvc repro
    sys.exit(main())
