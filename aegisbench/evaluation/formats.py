"""Parsers of the three prediction forms into :class:`~aegisbench.evaluation.rows.RawRows`
for validation (every problem collected), and the COCO loading adapter.

The library readers in :mod:`aegisbench.predictions` stop at the first problem; they
are used to load a submission once these parsers and the row checks found nothing.

>>> sorted(YOLO_FIELDS.items())[:2]
[('score', 'conf'), ('x1', 'cx')]
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.evaluation.rows import BOX, Problems, RawRows
from aegisbench.fields import is_int, is_number
from aegisbench.predictions import Detections, read_coco_results
from aegisbench.vocab import THRESHOLD_KEYS

log = logging.getLogger(__name__)

STRING_COLUMNS = ("config", "split", "image_id")
NUMBER_COLUMNS = (*BOX, "score")
OPTIONAL_COLUMNS = ("label",)
THRESHOLD_COLUMNS = THRESHOLD_KEYS  # a submission may not carry thresholds, in its YAML or as a column
COCO_FIELDS = {"x1": "bbox", "y1": "bbox", "x2": "bbox", "y2": "bbox"}
YOLO_FIELDS = {"x1": "cx", "y1": "cy", "x2": "w", "y2": "h", "score": "conf"}
COCO_KEY = "aegisbench_key"


def _empty(path: Path, unit: str = "row", fields: dict | None = None) -> RawRows:
    e = np.zeros(0, object)
    return RawRows(np.full(0, str(path), object), np.zeros(0, np.int64), e, e, e, np.zeros((0, 4)), np.zeros(0),
                   unit, fields or {})


def is_string_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def is_number_type(t: pa.DataType) -> bool:
    return pa.types.is_floating(t) or pa.types.is_integer(t)


def check_schema(path: Path, schema: pa.Schema, strings: tuple, numbers: tuple, optional: tuple,
                 problems: Problems) -> bool:
    """Report missing, unknown, threshold and wrongly typed columns; True when rows can be read."""
    where = str(path)
    ok = True
    names = schema.names
    for col in names:
        if col in THRESHOLD_COLUMNS:
            problems.add(where, None, col, "per-config thresholds are not accepted: the evaluator freezes one "
                         "threshold per source on the clean _val predictions and applies it to every condition; "
                         "drop this column")
        elif col not in (*strings, *numbers, *optional):
            problems.add(where, None, col, f"unknown column (allowed: {', '.join((*strings, *numbers, *optional))})")
    for col in (*strings, *numbers):
        if col not in names:
            problems.add(where, None, col, "missing column")
            ok = False
    for col in names:
        t = schema.field(col).type
        if col in strings and not is_string_type(t):
            problems.add(where, None, col, f"column has type {t}, expected string")
            ok = False
        elif col in numbers and not is_number_type(t):
            problems.add(where, None, col, f"column has type {t}, expected float")
            ok = False
        elif col in optional and not (is_string_type(t) or pa.types.is_null(t)):
            problems.add(where, None, col, f"column has type {t}, expected string")
    return ok


def read_parquet_checked(path: Path, problems: Problems, strings: tuple, numbers: tuple, optional: tuple
                         ) -> pa.Table | None:
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        problems.add(str(path), None, None, f"cannot read Parquet: {exc}")
        return None
    if not check_schema(path, schema, strings, numbers, optional, problems):
        return None
    try:
        return pq.read_table(path, columns=[c for c in (*strings, *numbers)])
    except (OSError, pa.ArrowException) as exc:
        problems.add(str(path), None, None, f"cannot read Parquet: {exc}")
        return None


def number_column(table: pa.Table, col: str) -> np.ndarray:
    return table.column(col).to_numpy(zero_copy_only=False).astype(np.float64)  # nulls -> NaN


def parse_parquet(path: Path, problems: Problems) -> RawRows:
    table = read_parquet_checked(path, problems, STRING_COLUMNS, NUMBER_COLUMNS, OPTIONAL_COLUMNS)
    if table is None:
        return _empty(path)
    n = table.num_rows
    cols = {c: np.asarray(table.column(c).to_pylist(), dtype=object).reshape(n) for c in STRING_COLUMNS}
    xyxy = np.stack([number_column(table, c) for c in BOX], axis=1) if n else np.zeros((0, 4))
    return RawRows(np.full(n, str(path), object), np.arange(n), cols["config"], cols["split"], cols["image_id"],
                   xyxy, number_column(table, "score"))


def parse_coco(path: Path, config: str, ids: dict[int, tuple[str, str]], problems: Problems) -> RawRows:
    """COCO results list -> rows; ``ids`` maps the exported integer ids to (split, image_id)."""
    where = str(path)
    try:
        res = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.add(where, None, None, f"cannot read JSON: {exc}")
        return _empty(path, fields=COCO_FIELDS)
    if not isinstance(res, list):
        problems.add(where, None, None, "results must be a JSON list of detections")
        return _empty(path, fields=COCO_FIELDS)
    n = len(res)
    split, image = np.full(n, "", object), np.full(n, "", object)
    xyxy, score, reported = np.full((n, 4), np.nan), np.full(n, np.nan), np.zeros(n, bool)
    for r, det in enumerate(res):
        if not isinstance(det, dict):
            problems.add(where, r, None, "detection must be a JSON object")
            reported[r] = True
            continue
        iid = det.get("image_id")
        if not is_int(iid):
            problems.add(where, r, "image_id", f"must be an integer id from `aegisbench export-coco`, got {iid!r}")
            reported[r] = True
        elif iid not in ids:
            problems.add(where, r, "image_id", f"image id {iid} is not in the exported GT of config {config!r}")
            reported[r] = True
        else:
            split[r], image[r] = ids[iid]
        bb = det.get("bbox")
        if not (isinstance(bb, list) and len(bb) == 4 and all(is_number(v) for v in bb)):
            problems.add(where, r, "bbox", "bbox must be 4 numbers [x, y, w, h]")
            reported[r] = True
        else:
            x, y, w, h = (float(v) for v in bb)
            xyxy[r] = (x, y, x + w, y + h)
        s = det.get("score")
        if s is not None and not is_number(s):
            problems.add(where, r, "score", f"score must be a number, got {type(s).__name__}")
            reported[r] = True
        elif s is not None:
            score[r] = float(s)
    return RawRows(np.full(n, where, object), np.arange(n), np.full(n, config, object), split, image, xyxy,
                   score, "row", COCO_FIELDS, reported)


def parse_yolo_file(path: Path, config: str, split: str, size: tuple[int, int], problems: Problems) -> RawRows:
    """One ``<image_id>.txt``: ``cls cx cy w h conf`` per line, normalized to the frame."""
    where = str(path)
    width, height = size
    rows, boxes, scores, reported = [], [], [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        problems.add(where, None, None, f"cannot read text: {exc}")
        lines = []
    for ln, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        bad = False
        vals = []
        if len(parts) != 6:
            problems.add(where, ln, "conf", f"expected 6 fields 'cls cx cy w h conf', got {len(parts)}", "line")
            bad = True
        else:
            for name, tok in zip(("cls", "cx", "cy", "w", "h", "conf"), parts):
                try:
                    vals.append(float(tok))
                except ValueError:
                    problems.add(where, ln, name, f"not a number: {tok!r}", "line")
                    bad = True
                    vals.append(np.nan)
            if not bad and not (vals[0] >= 0 and vals[0] == int(vals[0])):
                problems.add(where, ln, "cls", "class must be a non-negative integer", "line")
                bad = True
        if bad or len(vals) != 6:
            vals = [np.nan] * 6
        _, cx, cy, w, h, conf = vals
        rows.append(ln)
        boxes.append(((cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height))
        scores.append(conf)
        reported.append(bad)
    n = len(rows)
    return RawRows(np.full(n, where, object), np.asarray(rows, np.int64), np.full(n, config, object),
                   np.full(n, split, object), np.full(n, path.stem, object),
                   np.asarray(boxes, np.float64).reshape(n, 4), np.asarray(scores, np.float64), "line",
                   YOLO_FIELDS, np.asarray(reported, bool))


def read_coco_table(path: Path, config: str, index, tmp: Path) -> dict[tuple[str, str, str], Detections]:
    """Load one COCO results file with :func:`~aegisbench.predictions.read_coco_results`
    against the GT rebuilt from the dataset (never a submitted GT), keyed by split."""
    from aegisbench.evaluation.dataset import coco_gt
    gt_path = tmp / f"{config}.json"
    gt_path.write_text(json.dumps(coco_gt(index, config, key_field=COCO_KEY)), encoding="utf-8")
    table = read_coco_results(path, gt_path, config, "_", id_field=COCO_KEY)
    ids = {str(cid): (split, image_id) for cid, split, image_id in index.coco_images(config)}
    return {(cfg, *ids[key]): det for (cfg, _, key), det in table.items()}
