"""The private label repo of withheld test labels: its format, its reader and its verify.

A build that withholds labels (:mod:`aegisbench.builders.withhold` writes it) publishes the
public repo without the boxes of some splits and writes them to a label repo that only the
scoring side holds:

* ``labels/<config>/<split>.parquet``: ``image_id, objects, ignore``, in the shard order
  (:data:`~aegisbench.dataset.schema.LABEL_SCHEMA`);
* ``manifest.json``: ``kind: aegisbench-labels``, the benchmark version, the public repo's digest
  (``public_digest``), ``full_digest`` (the digest the repo would have with its labels, which the
  evaluator keys its bootstrap with), per split the file's SHA-256 and the SHA-256 of its label
  rows, and ``labels_digest`` over all of it.

>>> label_rows_sha256([{"image_id": "a", "objects": {"bbox": [[1.0, 2.0, 3.0, 4.0]], "label": [0]}, "ignore": []}])[:12]
'279529accbac'
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from aegisbench.dataset.manifest import repo_file
from aegisbench.dataset.verify import VerifyReport
from aegisbench.errors import BadInput
from aegisbench.hashing import file_sha256, json_sha256

LABELS_KIND = "aegisbench-labels"
LABELS_FORMAT = 1
MANIFEST = "manifest.json"


def label_rows_sha256(rows: list[dict]) -> str:
    """SHA-256 over the label rows in order (image id, boxes, labels, ignore regions)."""
    return json_sha256([[r["image_id"], r["objects"]["bbox"], r["objects"]["label"], r["ignore"]] for r in rows])


def labels_digest(manifest: dict) -> str:
    return json_sha256({k: manifest[k] for k in ("benchmark_version", "public_digest", "full_digest")}
                       | {"splits": {c: {s: i["labels_sha256"] for s, i in v.items()}
                                     for c, v in manifest["splits"].items()}})


def is_label_repo(path: str | Path) -> bool:
    """Whether ``path`` holds a private label repo (its manifest says so)."""
    try:
        return json.loads((Path(path) / MANIFEST).read_text(encoding="utf-8")).get("kind") == LABELS_KIND
    except (OSError, ValueError, AttributeError):
        return False


def load_labels(path: str | Path, public: dict | None = None) -> dict:
    """A label repo's manifest, checked (fields, and with ``public`` the public manifest it must
    belong to); BadInput naming the repo otherwise."""
    path = Path(path)
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"not a private label repo ({exc})", where=str(path)) from None
    if not isinstance(m, dict) or m.get("kind") != LABELS_KIND or m.get("format") != LABELS_FORMAT:
        raise BadInput(f"not a private label repo (kind {LABELS_KIND!r}, format {LABELS_FORMAT})", where=str(path))
    for key in ("public_digest", "full_digest", "labels_digest", "splits", "files"):
        if key not in m:
            raise BadInput(f"manifest misses {key!r}", where=str(path / MANIFEST))
    if public is not None and m["public_digest"] != public["dataset_digest"]:
        raise BadInput(f"these labels belong to dataset {m['public_digest'][:12]}, not to "
                       f"{public['dataset_digest'][:12]}", where=str(path))
    return m


def verify_labels(path: str | Path, public: dict | None = None) -> VerifyReport:
    """Re-hash every label file, recompute every split's label rows and the digest; with
    ``public`` (a public manifest), check the labels cover exactly its withheld splits' images."""
    path, report = Path(path), VerifyReport()
    try:
        m = load_labels(path, public)
    except BadInput as exc:
        report.missing.append(exc.message)
        return report
    for config, splits in sorted(m["splits"].items()):
        for split, info in sorted(splits.items()):
            try:
                file = repo_file(path, info["path"])
            except BadInput as exc:
                report.missing.append(exc.message)
                continue
            if not file.is_file() or file_sha256(file) != m["files"].get(info["path"], {}).get("sha256"):
                report.altered.append(info["path"])
                continue
            rows = pq.read_table(file).to_pylist()
            if label_rows_sha256(rows) != info["labels_sha256"]:
                report.content.append(f"{info['path']}: label rows do not hash to the manifest's")
            if public is not None:
                want = public["configs"].get(config, {}).get("splits", {}).get(split)
                ids = [i for s in (want or {}).get("shards", []) for i in s["images"]]
                if [r["image_id"] for r in rows] != ids:
                    report.content.append(f"{info['path']}: images are not those of {config}/{split} in the dataset")
    if labels_digest(m) != m["labels_digest"]:
        report.content.append("labels_digest does not match the manifest's splits")
    if public is not None:
        covered = {s for v in m["splits"].values() for s in v}
        if covered != set(public.get("withheld_labels") or ()):
            report.content.append(f"the dataset withholds {sorted(public.get('withheld_labels') or ())}, these labels "
                                  f"cover {sorted(covered)}")
    return report
