"""Validated box predictions and the readers/writer for submission files.

:class:`Detections` holds one image's boxes (``xyxy`` pixels of the full frame,
float32), confidences and optional string labels; it is validated on construction
and immutable. :class:`PredictionTable` maps ``(config, split, image_id)`` to
:class:`Detections`; an image with no row simply has no predictions.

Readers raise :class:`~aegisbench.errors.BadInput` naming ``file:row N field F``
(``row`` is the 0-based row of the Parquet table or the 0-based index in the COCO
results list; YOLO text files use ``file:line N field F`` with 1-based lines).

>>> d = Detections([[0, 0, 10, 10], [5, 5, 8, 9]], [0.9, 0.2])
>>> len(d), d.score.dtype.name, len(d.above(0.5))
(2, 'float32', 1)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_path
from aegisbench.errors import BadInput
from aegisbench.fields import is_finite_number

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (config, split, image_id)
BOX_COLUMNS = ("x1", "y1", "x2", "y2")
PREDICTION_SCHEMA = pa.schema(
    [pa.field("config", pa.string(), nullable=False),
     pa.field("split", pa.string(), nullable=False),
     pa.field("image_id", pa.string(), nullable=False)]
    + [pa.field(c, pa.float32(), nullable=False) for c in (*BOX_COLUMNS, "score")]
    + [pa.field("label", pa.string(), nullable=True)]
)


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class Detections:
    """Boxes of one image: ``xyxy`` float32 (n, 4), ``score`` float32 (n,) in [0, 1],
    optional ``label`` (n,) of str. Raises TypeError/ValueError when invalid."""

    xyxy: np.ndarray
    score: np.ndarray
    label: np.ndarray | None = None

    def __post_init__(self) -> None:
        try:
            xyxy = np.asarray(self.xyxy, dtype=np.float32)
            score = np.asarray(self.score, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"boxes and scores must be numeric: {exc}") from None
        if xyxy.size == 0:
            xyxy = xyxy.reshape(0, 4)
        if xyxy.ndim != 2 or xyxy.shape[1] != 4:
            raise ValueError(f"xyxy must have shape (n, 4), got {xyxy.shape}")
        if score.ndim != 1 or len(score) != len(xyxy):
            raise ValueError(f"score must have shape ({len(xyxy)},), got {score.shape}")
        if not np.isfinite(xyxy).all():
            raise ValueError("boxes must be finite")
        if not (xyxy[:, 2] > xyxy[:, 0]).all():
            raise ValueError("boxes need x2 > x1")
        if not (xyxy[:, 3] > xyxy[:, 1]).all():
            raise ValueError("boxes need y2 > y1")
        if not (np.isfinite(score) & (score >= 0) & (score <= 1)).all():
            raise ValueError("scores must lie in [0, 1]")
        label = self.label
        if label is not None:
            label = np.asarray(label, dtype=object)
            if label.shape != (len(xyxy),):
                raise ValueError(f"label must have shape ({len(xyxy)},), got {label.shape}")
            if not all(isinstance(v, str) for v in label):
                raise TypeError("labels must be str")
            label = _readonly(label)
        object.__setattr__(self, "xyxy", _readonly(xyxy))
        object.__setattr__(self, "score", _readonly(score))
        object.__setattr__(self, "label", label)

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32))

    def __len__(self) -> int:
        return len(self.score)

    def select(self, mask: np.ndarray) -> Detections:
        """The subset selected by a boolean mask or index array."""
        lab = None if self.label is None else self.label[mask]
        return Detections(self.xyxy[mask], self.score[mask], lab)

    def above(self, threshold: float) -> Detections:
        """Predictions kept at ``threshold``: ``float32(score) >= float32(threshold)``."""
        return self.select(self.score >= np.float32(threshold))


class PredictionTable(Mapping):
    """Read-only mapping ``(config, split, image_id) -> Detections``.

    >>> t = PredictionTable({("clean", "sard_val", "a"): Detections([[0, 0, 1, 1]], [0.5])})
    >>> len(t.get_detections("clean", "sard_val", "missing"))
    0
    """

    def __init__(self, entries: Mapping[Key, Detections]):
        data: dict[Key, Detections] = {}
        for key, det in entries.items():
            if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(k, str) for k in key)):
                raise TypeError(f"keys must be (config, split, image_id) str tuples, got {key!r}")
            if not isinstance(det, Detections):
                raise TypeError(f"values must be Detections, got {type(det).__name__}")
            data[key] = det
        self._data = data

    def __getitem__(self, key: Key) -> Detections:
        return self._data[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def get_detections(self, config: str, split: str, image_id: str) -> Detections:
        """Predictions of one image; empty when the submission has none for it."""
        return self._data.get((config, split, image_id)) or Detections.empty()

    def configs(self) -> list[str]:
        return sorted({k[0] for k in self._data})

    def n_boxes(self) -> int:
        return sum(len(d) for d in self._data.values())


# --------------------------------------------------------------------- Parquet


def _first_bad(where: str, checks: list[tuple[str, np.ndarray, str]]) -> None:
    """Raise for the lowest bad row; within it, the first failing field in order."""
    first = [(int(np.argmax(bad)), i) for i, (_, bad, _) in enumerate(checks) if bad.any()]
    if not first:
        return
    row, i = min(first)
    field, _, msg = checks[i]
    raise BadInput(msg, where=f"{where}:row {row} field {field}")


def _table_to_predictions(table: pa.Table, where: str) -> PredictionTable:
    names = set(table.column_names)
    for col in ("config", "split", "image_id", *BOX_COLUMNS, "score"):
        if col not in names:
            raise BadInput(f"missing column {col!r}", where=where)
    cols: dict[str, np.ndarray] = {}
    checks: list[tuple[str, np.ndarray, str]] = []
    for col in ("config", "split", "image_id"):
        arr = table.column(col)
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            raise BadInput(f"column has type {arr.type}, expected string", where=f"{where}:column {col}")
        vals = np.asarray(arr.to_pylist(), dtype=object)
        cols[col] = vals
        checks.append((col, np.array([v is None or v == "" for v in vals], bool), "empty or null"))
    for col in (*BOX_COLUMNS, "score"):
        arr = table.column(col)
        if not (pa.types.is_floating(arr.type) or pa.types.is_integer(arr.type)):
            raise BadInput(f"column has type {arr.type}, expected float", where=f"{where}:column {col}")
        cols[col] = arr.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls -> nan
    with np.errstate(over="ignore", invalid="ignore"):
        x1, y1, x2, y2 = (cols[c].astype(np.float32) for c in BOX_COLUMNS)  # boxes are stored as float32
        s = cols["score"]
        for col, v in zip(BOX_COLUMNS, (x1, y1, x2, y2)):
            checks.append((col, ~np.isfinite(v), "null or not finite"))
        checks.append(("x2", np.isfinite(x1) & np.isfinite(x2) & ~(x2 > x1), "x2 must exceed x1"))
        checks.append(("y2", np.isfinite(y1) & np.isfinite(y2) & ~(y2 > y1), "y2 must exceed y1"))
        checks.append(("score", ~np.isfinite(s), "null or not finite"))
        checks.append(("score", np.isfinite(s) & ((s < 0) | (s > 1)), "score outside [0, 1]"))
    labels = None
    if "label" in names:
        arr = table.column("label")
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or pa.types.is_null(arr.type)):
            raise BadInput(f"column has type {arr.type}, expected string", where=f"{where}:column label")
        labels = np.asarray(arr.to_pylist(), dtype=object)
    _first_bad(where, checks)
    return _group_rows(cols["config"], cols["split"], cols["image_id"],
                       np.stack([cols[c] for c in BOX_COLUMNS], axis=1), s, labels)


def _group_rows(config, split, image_id, xyxy, score, labels) -> PredictionTable:
    keys = np.array([f"{c}\x1f{p}\x1f{i}" for c, p, i in zip(config, split, image_id)], dtype=object)
    if len(keys) == 0:
        return PredictionTable({})
    order = np.argsort(keys, kind="stable")
    uniq, starts = np.unique(keys[order], return_index=True)
    ends = np.append(starts[1:], len(order))
    out: dict[Key, Detections] = {}
    for k, a, b in zip(uniq, starts, ends):
        idx = order[a:b]
        lab = None
        if labels is not None:
            lab = labels[idx]
            lab = None if all(v is None for v in lab) else np.array(["" if v is None else v for v in lab], object)
        out[tuple(k.split("\x1f"))] = Detections(xyxy[idx], score[idx], lab)
    return PredictionTable(out)


def read_parquet_predictions(path: str | Path) -> PredictionTable:
    """Read the contract Parquet (``config, split, image_id, x1..y2, score[, label]``)."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise BadInput(f"cannot read Parquet: {exc}", where=str(path)) from None
    return _table_to_predictions(table, str(path))


def write_parquet_predictions(table: Mapping[Key, Detections], path: str | Path) -> None:
    """Write a prediction table atomically, rows sorted by key (stable within an image)."""
    keys = sorted(table)
    cols: dict[str, list] = {n: [] for n in PREDICTION_SCHEMA.names}
    for key in keys:
        det = table[key]
        n = len(det)
        for name, part in zip(("config", "split", "image_id"), key):
            cols[name].extend([part] * n)
        for j, c in enumerate(BOX_COLUMNS):
            cols[c].append(det.xyxy[:, j])
        cols["score"].append(det.score)
        cols["label"].extend([None] * n if det.label is None else list(det.label))
    arrays = {}
    for name in PREDICTION_SCHEMA.names:
        vals = cols[name]
        if name in (*BOX_COLUMNS, "score"):
            vals = np.concatenate(vals) if vals else np.zeros(0, np.float32)
        arrays[name] = pa.array(vals, type=PREDICTION_SCHEMA.field(name).type)
    out = pa.Table.from_pydict(arrays, schema=PREDICTION_SCHEMA)
    with atomic_path(path) as tmp:
        pq.write_table(out, tmp)


# ------------------------------------------------------------- COCO results JSON


def _load_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read JSON: {exc}", where=str(path)) from None


def read_coco_results(results_path: str | Path, gt_json_path: str | Path, config: str, split: str,
                      *, id_field: str = "file_name") -> PredictionTable:
    """Read one COCO results JSON (``image_id, bbox [x, y, w, h], score``) for a config.

    Integer ``image_id`` values are mapped through the GT ``images`` list; the
    benchmark's string image id is the stem of the GT image's ``id_field``.
    ``category_id`` is ignored (class-agnostic) except to fill ``label`` from the
    GT category names.
    """
    results_path, gt_json_path = Path(results_path), Path(gt_json_path)
    gt = _load_json(gt_json_path)
    if not isinstance(gt, dict) or not isinstance(gt.get("images"), list):
        raise BadInput("GT JSON needs an 'images' list", where=str(gt_json_path))
    id_map = {}
    for i, img in enumerate(gt["images"]):
        if not isinstance(img, dict) or "id" not in img or id_field not in img:
            raise BadInput(f"image needs 'id' and {id_field!r}", where=f"{gt_json_path}:images[{i}]")
        id_map[img["id"]] = Path(str(img[id_field])).stem
    cat_names = {c.get("id"): str(c.get("name", c.get("id"))) for c in gt.get("categories", []) if isinstance(c, dict)}
    res = _load_json(results_path)
    if not isinstance(res, list):
        raise BadInput("results must be a JSON list of detections", where=str(results_path))
    n = len(res)
    img, xyxy, score, label = [], np.zeros((n, 4)), np.zeros(n), []
    for r, det in enumerate(res):
        where = f"{results_path}:row {r}"
        if not isinstance(det, dict):
            raise BadInput("detection must be an object", where=where)
        if det.get("image_id") not in id_map:
            raise BadInput(f"image_id {det.get('image_id')!r} not in GT images", where=f"{where} field image_id")
        bb = det.get("bbox")
        if not (isinstance(bb, list) and len(bb) == 4 and all(is_finite_number(v) for v in bb)):
            raise BadInput("bbox must be 4 finite numbers [x, y, w, h]", where=f"{where} field bbox")
        x, y, w, h = (float(v) for v in bb)
        if not (np.float32(x + w) > np.float32(x) and np.float32(y + h) > np.float32(y)):
            raise BadInput("bbox needs w > 0 and h > 0", where=f"{where} field bbox")
        s = det.get("score")
        if not (is_finite_number(s) and 0 <= s <= 1):
            raise BadInput("score must be a number in [0, 1]", where=f"{where} field score")
        img.append(id_map[det["image_id"]])
        xyxy[r] = (x, y, x + w, y + h)
        score[r] = s
        label.append(cat_names.get(det.get("category_id"), ""))
    labels = np.array(label, dtype=object) if cat_names else None
    return _group_rows([config] * n, [split] * n, img, xyxy, score, labels)


# --------------------------------------------------------------------- YOLO txt


def read_yolo_txt(folder: str | Path, image_sizes: Mapping[str, tuple[int, int]], config: str, split: str,
                  *, class_names: Mapping[int, str] | None = None) -> PredictionTable:
    """Read Ultralytics ``save_txt``/``save_conf`` output: one ``<image_id>.txt`` per
    image with lines ``cls cx cy w h conf`` (normalized). ``image_sizes`` maps
    image_id -> (width, height) in pixels; images without a file have no boxes."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInput("not a folder", where=str(folder))
    out: dict[Key, Detections] = {}
    for path in sorted(folder.glob("*.txt")):
        image_id = path.stem
        if image_id not in image_sizes:
            raise BadInput(f"no image {image_id!r} in this split", where=str(path))
        width, height = image_sizes[image_id]
        rows, scores, labels = [], [], []
        for ln, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            parts = line.split()
            if not parts:
                continue
            where = f"{path}:line {ln}"
            if len(parts) != 6:
                raise BadInput(f"expected 6 fields 'cls cx cy w h conf', got {len(parts)}", where=f"{where} field conf")
            vals = []
            for name, tok in zip(("cls", "cx", "cy", "w", "h", "conf"), parts):
                try:
                    v = float(tok)
                except ValueError:
                    raise BadInput(f"not a number: {tok!r}", where=f"{where} field {name}") from None
                if not np.isfinite(v):
                    raise BadInput("not finite", where=f"{where} field {name}")
                vals.append(v)
            cls, cx, cy, w, h, conf = vals
            if cls < 0 or cls != int(cls):
                raise BadInput("class must be a non-negative integer", where=f"{where} field cls")
            box = np.array([(cx - w / 2) * width, (cy - h / 2) * height,
                            (cx + w / 2) * width, (cy + h / 2) * height], np.float32)
            if not box[2] > box[0]:
                raise BadInput("box has no width", where=f"{where} field w")
            if not box[3] > box[1]:
                raise BadInput("box has no height", where=f"{where} field h")
            if not 0 <= conf <= 1:
                raise BadInput("confidence outside [0, 1]", where=f"{where} field conf")
            rows.append(box)
            scores.append(conf)
            labels.append((class_names or {}).get(int(cls), str(int(cls))))
        if rows:
            out[(config, split, image_id)] = Detections(np.stack(rows), scores, np.array(labels, object))
    return PredictionTable(out)
