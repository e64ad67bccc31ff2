"""Writer of the Hugging Face dataset repo on disk (``aegisbench/`` in the project root),
through the contract of :mod:`aegisbench.dataset.schema`.

A repo is a set of *configs* (``clean``, ``low_light_s3``, ...). Each config holds
one split per source: ``<source>_val`` (clean validation, ``clean`` only) and
``<source>`` (test). Splits are cut into Parquet shards named
``<config>/<split>-00000-of-00003.parquet``; images are lossless PNG inside the
``image`` column, declared as an HF ``Image`` feature so ``datasets.load_dataset``
decodes them. Every shard is written atomically and described by a
:class:`ShardEntry` (file SHA-256, rows, per-image pixel SHA-256, content hash).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_path, atomic_write_text
from aegisbench.dataset.manifest import rows_sha256
from aegisbench.dataset.schema import SCHEMA, content_key
from aegisbench.hashing import file_sha256, json_sha256, pixel_sha256
from aegisbench.memory import release_arrow_memory
from aegisbench.builders.source_table import SourceRecord, read_source_rows
from aegisbench.dataset.images import encode_png

log = logging.getLogger(__name__)

# image transform of a config: (record, image) -> image; None means "keep the clean bytes"
Transform = Callable[[SourceRecord, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class ShardTask:
    """One unit of build work: rows [start, stop) of one source split into one shard."""

    config: str
    split: str  # repo split name, e.g. "synthetic_sar_val"
    source: str
    source_split: str  # canonical split in the source table ("val" / "test")
    source_table: str
    start: int
    stop: int
    index: int
    n_shards: int

    #: its rows carry boxes (labels a build may withhold)
    labels = True

    @property
    def relpath(self) -> str:
        return f"{self.config}/{self.split}-{self.index:05d}-of-{self.n_shards:05d}.parquet"

    @property
    def inputs(self) -> tuple[str, ...]:
        """The files this shard is made from (they key the build's staging folder)."""
        return (self.source_table,)

    def run(self, root: Path, transform: "Transform | None" = None) -> "ShardEntry":
        """Write this shard (:func:`write_shard`)."""
        return write_shard(self, root, transform)


@dataclass(frozen=True)
class ShardEntry:
    path: str
    sha256: str
    bytes: int
    rows: int
    content_sha256: str  # rows_sha256 of row_hashes
    images: dict[str, str]  # image_id -> pixel sha256
    row_hashes: str = ""  # every row's content hash, hex, in row order (the split hash; not in the manifest)

    @classmethod
    def from_dict(cls, d: dict) -> "ShardEntry | None":
        """The entry a sidecar recorded, or None for one in another format (an older builder)."""
        if not isinstance(d, dict) or set(d) != {f.name for f in fields(cls)}:
            return None
        return cls(**d)


def _row(rec: SourceRecord, condition: str, png: bytes, sha: str) -> dict:
    return {
        "image": {"bytes": png, "path": None},
        "image_id": rec.image_id, "source": rec.source, "condition": condition,
        "width": rec.width, "height": rec.height,
        "objects": {"bbox": rec.boxes.tolist(), "label": list(rec.labels)},
        "group_id": rec.group_id, "frame_index": rec.frame_index, "time_s": rec.time_s,
        "fire_start_frame": rec.fire_start_frame, "sha256": sha,
        "ignore": rec.ignore.tolist(), "meta": [{"name": k, "value": v} for k, v in rec.meta],
    }


def write_shard(task: ShardTask, root: Path, transform: Transform | None) -> ShardEntry:
    """Materialize one image shard atomically and return its manifest entry."""
    rows, images = [], {}
    for rec in read_source_rows(task.source_table, task.source_split, task.start, task.stop):
        if transform is None:
            png, sha = rec.png, rec.sha256
        else:
            out = transform(rec, rec.image())
            png, sha = encode_png(out), pixel_sha256(out)
            del out
            release_arrow_memory()  # the transform's freed frames go back now, not after the shard
        rows.append(_row(rec, task.config, png, sha))
        images[rec.image_id] = sha
    entry = write_rows_shard(root, task.relpath, rows, SCHEMA,
                             content=[content_key(r) for r in rows], images=images)
    atomic_write_text(_sidecar(root, task), json.dumps(asdict(entry), sort_keys=True))
    return entry


def write_rows_shard(root: Path, relpath: str, rows: list[dict], schema: pa.Schema,
                     content: list, images: dict[str, str] | None = None,
                     row_group_size: int = 8) -> ShardEntry:
    """Write any rows as one Parquet shard (atomic); ``content`` is what the content hash
    covers (encoder-independent values), ``images`` optional per-image pixel hashes."""
    table = pa.Table.from_pylist(rows, schema=schema)
    path = root / relpath
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=row_group_size)
    row_hashes = "".join(json_sha256(key) for key in content)
    return ShardEntry(path=relpath, sha256=file_sha256(path), bytes=path.stat().st_size, rows=len(rows),
                      content_sha256=rows_sha256(row_hashes), images=images or {}, row_hashes=row_hashes)


def _sidecar(root: Path, task: ShardTask) -> Path:
    return root / ".shards" / (task.relpath.replace("/", "__") + ".json")


def finished_entry(task: ShardTask, root: Path) -> ShardEntry | None:
    """The entry of a shard completed by an earlier (interrupted) run, if intact."""
    side, shard = _sidecar(root, task), root / task.relpath
    if not (side.exists() and shard.exists()):
        return None
    entry = ShardEntry.from_dict(json.loads(side.read_text()))
    if entry is None or entry.bytes != shard.stat().st_size or entry.sha256 != file_sha256(shard):
        return None
    return entry
