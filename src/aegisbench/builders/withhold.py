"""Withheld test labels: a public dataset repo without the boxes of some splits, and a private
label repo that only the scoring side holds.

``aegisbench build --withhold-labels SPLIT[,SPLIT] --private-out DIR`` (or ``build.withhold_labels``
and ``paths.private_labels`` in ``params.yaml``) builds as usual, then, before the repo is
published in place, rewrites every shard of those splits with empty ``objects`` and ``ignore``
(images, ids, sizes and metadata stay) and writes the labels into ``DIR``:

* ``labels/<config>/<split>.parquet``: ``image_id, objects, ignore``, in the shard order;
* ``manifest.json``: ``kind: aegisbench-labels``, the benchmark version, the public repo's digest
  (``public_digest``: the repo these labels belong to), ``full_digest`` (the digest the repo would
  have with its labels, which the evaluator keys its bootstrap with, so a withheld build scores
  exactly like an ordinary one), per split the file's SHA-256 and the SHA-256 of its label rows,
  and ``labels_digest`` over all of it.

The public manifest lists ``withheld_labels``. ``aegisbench verify DIR`` checks a label repo:
files, label rows, digest, and, with ``--dataset``, that it belongs to that public repo image for
image. ``publish`` refuses a label repo; the public repo never contains one.

>>> label_rows_sha256([{"image_id": "a", "objects": {"bbox": [[1.0, 2.0, 3.0, 4.0]], "label": [0]}, "ignore": []}])[:12]
'279529accbac'
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_write_text

from aegisbench.staging import staged_dir
from aegisbench.builders.hfrepo import write_rows_shard
from aegisbench.dataset.labels import LABELS_FORMAT, LABELS_KIND, MANIFEST, label_rows_sha256, labels_digest
from aegisbench.dataset.schema import LABEL_SCHEMA, SCHEMA, content_key
from aegisbench.errors import BadInput
from aegisbench.hashing import file_sha256



def check_withhold(splits, manifest_splits: dict[str, str], private_out, out: Path) -> tuple[str, ...]:
    """The split names to withhold, checked: each a split of a detection source of this build,
    and a private output outside the public repo (BadInput naming the flag otherwise)."""
    splits = tuple(sorted(set(splits or ())))
    if not splits:
        return ()
    unknown = [s for s in splits if s not in manifest_splits]
    if unknown:
        raise BadInput(f"{unknown} are not splits of this build (known: {sorted(manifest_splits)})",
                       where="--withhold-labels")
    if private_out is None:
        raise BadInput("withheld labels go to a private label repo: give --private-out DIR (or paths.private_labels)",
                       where="--private-out")
    p, o = Path(private_out).absolute(), out.absolute()
    if p == o or o in p.parents or p in o.parents:
        raise BadInput("the private label repo must lie outside the public dataset repo (and not contain it)",
                       where="--private-out")
    return splits


def strip_labels(staging: Path, tasks: list, entries: list, splits: tuple[str, ...]) -> tuple[list, dict]:
    """Rewrite every image shard of ``splits`` without its labels; returns the new entries
    and ``{(config, split): [label rows in shard order]}``."""
    new, labels = [], {}
    for task, entry in zip(tasks, entries):
        if not task.labels or task.split not in splits:
            new.append(entry)
            continue
        rows = pq.read_table(staging / entry.path, schema=SCHEMA).to_pylist()
        labels.setdefault((task.config, task.split), []).extend(
            {"image_id": r["image_id"], "objects": r["objects"], "ignore": r["ignore"]} for r in rows)
        for r in rows:
            r["objects"], r["ignore"] = {"bbox": [], "label": []}, []
        new.append(write_rows_shard(staging, entry.path, rows, SCHEMA, content=[content_key(r) for r in rows],
                                    images=entry.images))
    return new, labels


def write_label_repo(out: str | Path, labels: dict, version: str, public_digest: str, full_digest: str) -> dict:
    """Write the private label repo at ``out`` (swapped in whole, owner-only); returns its manifest."""
    out = Path(out)
    with staged_dir(out) as stage:
        splits, files = {}, {}
        for (config, split), rows in sorted(labels.items()):
            rel = f"labels/{config}/{split}.parquet"
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pylist(rows, schema=LABEL_SCHEMA), stage / rel, compression="zstd")
            files[rel] = {"sha256": file_sha256(stage / rel), "bytes": (stage / rel).stat().st_size}
            splits.setdefault(config, {})[split] = {"path": rel, "rows": len(rows),
                                                   "labels_sha256": label_rows_sha256(rows)}
        manifest = {"kind": LABELS_KIND, "format": LABELS_FORMAT, "benchmark_version": version,
                    "public_digest": public_digest, "full_digest": full_digest, "splits": splits, "files": files}
        manifest["labels_digest"] = labels_digest(manifest)
        atomic_write_text(stage / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        stage.chmod(0o700)
    return manifest
