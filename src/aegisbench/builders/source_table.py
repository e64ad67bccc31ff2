"""The canonical source table: one row per image, whatever the original format.

Every adapter (VOC, YOLO, COCO, VisDrone) and every embedded synthetic source
produces :class:`SourceRecord` objects; :func:`write_source_table` stores them as
Parquet with the schema :data:`SOURCE_SCHEMA` declared up front, and
:func:`read_source_table` yields them back.

>>> import numpy as np
>>> rec = SourceRecord.from_image("a", "test", "demo", np.zeros((4, 6, 3), np.uint8),
...                               boxes=[[1, 1, 3, 3]], labels=["person"])
>>> (rec.width, rec.height, rec.boxes.shape)
(6, 4, (1, 4))
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_path
from aegisbench.dataset.images import decode_image, encode_png
from aegisbench.errors import BadInput
from aegisbench.hashing import pixel_sha256
from aegisbench.memory import release_arrow_memory

META_STRUCT = pa.struct([pa.field("name", pa.string()), pa.field("value", pa.string())])
SOURCE_SCHEMA = pa.schema(
    [
        pa.field("image_id", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("image", pa.binary(), nullable=False),  # lossless PNG
        pa.field("width", pa.int32(), nullable=False),
        pa.field("height", pa.int32(), nullable=False),
        pa.field("x1", pa.list_(pa.float32()), nullable=False),
        pa.field("y1", pa.list_(pa.float32()), nullable=False),
        pa.field("x2", pa.list_(pa.float32()), nullable=False),
        pa.field("y2", pa.list_(pa.float32()), nullable=False),
        pa.field("label", pa.list_(pa.string()), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),  # sequence / event / flight
        pa.field("frame_index", pa.int32(), nullable=False),  # -1 for stills
        pa.field("time_s", pa.float64(), nullable=True),  # seconds since sequence start
        pa.field("fire_start_frame", pa.int32(), nullable=True),  # smoke sequences
        pa.field("sha256", pa.string(), nullable=False),  # see aegisbench.hashing.pixel_sha256
        pa.field("ignore", pa.list_(pa.list_(pa.float32(), 4)), nullable=False),  # ignore regions, xyxy
        pa.field("meta", pa.list_(META_STRUCT), nullable=False),  # per-image strata (name, value)
    ]
)

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SourceRecord:
    """One annotated image in canonical form (boxes in full-frame pixels, xyxy)."""

    image_id: str
    split: str
    source: str
    png: bytes
    width: int
    height: int
    boxes: np.ndarray  # float32 (n, 4) x1, y1, x2, y2
    labels: tuple[str, ...]
    sha256: str
    group_id: str = ""
    frame_index: int = -1
    time_s: float | None = None
    fire_start_frame: int | None = None
    ignore: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.float32))  # float32 (k, 4)
    meta: tuple[tuple[str, str], ...] = ()  # per-image metadata (name, value), sorted by name
    _image: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise BadInput(f"split must be one of {SPLITS}, got {self.split!r}", where=self.image_id)
        for name, b, where in (("boxes", self.boxes, self.image_id),
                               ("ignore", self.ignore, f"{self.image_id} (ignore regions)")):
            if not isinstance(b, np.ndarray) or b.ndim != 2 or b.shape[1] != 4 or b.dtype != np.float32:
                raise TypeError(f"{name} must be float32 of shape (n, 4)")
            if name == "boxes" and len(self.labels) != len(b):
                raise ValueError("labels and boxes differ in length")
            validate_boxes(b, self.width, self.height, where=where)
        names = [k for k, _ in self.meta]
        if names != sorted(set(names)) or not all(isinstance(v, str) for _, v in self.meta):
            raise ValueError("meta must be (name, value) string pairs with unique names, sorted")

    @classmethod
    def from_image(cls, image_id: str, split: str, source: str, image: np.ndarray,
                   boxes=(), labels=(), **kw) -> "SourceRecord":
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise BadInput("image must be RGB uint8 (H, W, 3)", where=image_id)
        arr = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
        return cls(image_id=image_id, split=split, source=source, png=encode_png(image),
                   width=int(image.shape[1]), height=int(image.shape[0]), boxes=arr,
                   labels=tuple(labels), sha256=pixel_sha256(image), _image=image, **kw)

    def image(self) -> np.ndarray:
        """Decoded RGB pixels (cached when the record was built from an array)."""
        return self._image if self._image is not None else decode_image(self.png, self.image_id)

    def to_row(self) -> dict:
        b = self.boxes
        return {
            "image_id": self.image_id, "split": self.split, "source": self.source,
            "image": self.png, "width": self.width, "height": self.height,
            "x1": b[:, 0].tolist(), "y1": b[:, 1].tolist(),
            "x2": b[:, 2].tolist(), "y2": b[:, 3].tolist(),
            "label": list(self.labels), "group_id": self.group_id,
            "frame_index": self.frame_index, "time_s": self.time_s,
            "fire_start_frame": self.fire_start_frame, "sha256": self.sha256,
            "ignore": self.ignore.tolist(), "meta": [{"name": k, "value": v} for k, v in self.meta],
        }

    @classmethod
    def from_row(cls, row: dict) -> "SourceRecord":
        boxes = np.stack([np.asarray(row[k], np.float32) for k in ("x1", "y1", "x2", "y2")],
                         axis=1).reshape(-1, 4)
        return cls(image_id=row["image_id"], split=row["split"], source=row["source"],
                   png=row["image"], width=row["width"], height=row["height"], boxes=boxes,
                   labels=tuple(row["label"]), sha256=row["sha256"], group_id=row["group_id"],
                   frame_index=row["frame_index"], time_s=row["time_s"],
                   fire_start_frame=row["fire_start_frame"],
                   ignore=np.asarray(row["ignore"], np.float32).reshape(-1, 4),
                   meta=tuple((m["name"], m["value"]) for m in row["meta"]))


def validate_boxes(boxes: np.ndarray, width: int, height: int, where: str, tol: float = 0.5) -> None:
    """Reject non-finite, zero-area or out-of-frame boxes (``tol`` pixels of slack)."""
    if not len(boxes):
        return
    if not np.isfinite(boxes).all():
        raise BadInput("box coordinate is NaN or infinite", where=where)
    for i, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        if x2 <= x1 or y2 <= y1:
            raise BadInput(f"box {i} has zero or negative area ({x1}, {y1}, {x2}, {y2})", where=where)
        if x1 < -tol or y1 < -tol or x2 > width + tol or y2 > height + tol:
            raise BadInput(f"box {i} ({x1}, {y1}, {x2}, {y2}) lies outside the "
                           f"{width}x{height} image", where=where)


def write_source_table(records: Iterable[SourceRecord], path: str | Path,
                       rows_per_group: int = 16) -> int:
    """Stream records into one Parquet file atomically; returns the row count."""
    n = 0
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, SOURCE_SCHEMA, compression="zstd") as writer:
            batch: list[dict] = []
            for rec in records:
                batch.append(rec.to_row())
                n += 1
                if len(batch) >= rows_per_group:
                    writer.write_table(pa.Table.from_pylist(batch, schema=SOURCE_SCHEMA))
                    batch = []
            if batch:
                writer.write_table(pa.Table.from_pylist(batch, schema=SOURCE_SCHEMA))
    return n


def read_source_table(path: str | Path, splits: Iterable[str] | None = None) -> Iterator[SourceRecord]:
    """Yield records row group by row group (bounded memory)."""
    path = Path(path)
    if not path.exists():
        raise BadInput("source table not found", where=str(path))
    wanted = set(splits) if splits is not None else None
    pf = pq.ParquetFile(path)
    if not pf.schema_arrow.equals(SOURCE_SCHEMA, check_metadata=False):
        raise BadInput("not a canonical source table (schema differs)", where=str(path))
    for i in range(pf.num_row_groups):
        for row in pf.read_row_group(i).to_pylist():
            if wanted is None or row["split"] in wanted:
                yield SourceRecord.from_row(row)


def split_counts(path: str | Path) -> dict[str, int]:
    """Rows per canonical split, reading only the ``split`` column."""
    col = pq.read_table(path, columns=["split"]).column("split").to_pylist()
    return {s: col.count(s) for s in SPLITS if s in col}


def require_eval_splits(tables: Mapping[str, str | Path]) -> None:
    """BadInput, one line naming every source at fault and its counts per split, unless each
    table (name -> path; missing files are skipped) has val images (the threshold is frozen on
    clean val) and test images (the scored split)."""
    faults = []
    for name, path in tables.items():
        if not Path(path).exists():
            continue
        counts = split_counts(path)
        missing = [s for s in ("val", "test") if not counts.get(s)]
        if missing:
            per_split = ", ".join(f"{s} {counts.get(s, 0)}" for s in SPLITS)
            faults.append(f"source {name}: no {' and no '.join(missing)} images ({per_split})")
    if faults:
        raise BadInput("; ".join(faults) + "; every source needs val images (to freeze the threshold) "
                       "and test images: change --fractions, --split-mode or the split lists")


def read_source_rows(path: str | Path, split: str, start: int, stop: int) -> Iterator[SourceRecord]:
    """Records ``start..stop-1`` (in table order) of one split, touching only their row groups."""
    with pq.ParquetFile(path) as pf:
        splits = np.asarray(pf.read(columns=["split"]).column("split").to_pylist(), dtype=object)
        sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
    wanted = np.flatnonzero(splits == split)[start:stop]
    if not len(wanted):
        return
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    groups = np.searchsorted(offsets, wanted, side="right") - 1
    for g in np.unique(groups):
        local = set((wanted[groups == g] - offsets[g]).tolist())
        # one row at a time up to the last wanted one: the group's image column is decoded once
        # (its dictionary page holds every image of the group) but never materialised whole;
        # the Arrow buffers are dropped before the caller works on the records
        last = max(local)
        # (a file of its own, closed before the yield: a reader left open keeps the group's decoded
        # pages resident while the caller transforms the records, 50 MB on a group of 2000x1500 frames)
        records, batch = [], None
        with pq.ParquetFile(path) as group_file:
            for i, batch in enumerate(group_file.iter_batches(batch_size=1, row_groups=[int(g)],
                                                              use_threads=False)):
                if i in local:
                    records.append(SourceRecord.from_row(batch.to_pylist()[0]))
                if i >= last:
                    break
            del batch  # its dictionary array holds the whole page
        release_arrow_memory()
        while records:
            yield records.pop(0)
