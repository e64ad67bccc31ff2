"""Parsers of the three prediction forms into :class:`~aegisbench.evaluation.rows.RawRows`
for validation (every problem collected), and the COCO loading adapter.

The library readers in :mod:`aegisbench.predictions` stop at the first problem; they
are used to load a submission once these parsers and the row checks found nothing.

A submission may not carry thresholds: :func:`is_threshold_key` is the one rule for
``submission.yaml`` keys (at any depth) and Parquet column names.

>>> sorted(YOLO_FIELDS.items())[:2]
[('score', 'conf'), ('x1', 'cx')]
>>> [k for k in ("conf_thresh", "Threshold", "min_score", "confThr", "score_floor", "description")
...  if is_threshold_key(k)]
['conf_thresh', 'Threshold', 'min_score', 'confThr']
"""

from __future__ import annotations

import io
import json
import logging
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.errors import BadInput
from aegisbench.evaluation.rows import BOX, Problems, RawRows, clip, repeat, shown
from aegisbench.fields import is_int, is_number
from aegisbench.predictions import Detections, read_coco_results
from aegisbench.readers import MAX_COCO_FILE_BYTES, MAX_PREDICTION_ROWS, MAX_YOLO_FILE_BYTES, load_json, read_regular_bytes
from aegisbench.vocab import THRESHOLD_KEYS, TRACK_LABELS

log = logging.getLogger(__name__)

STRING_COLUMNS = ("config", "split", "image_id")
NUMBER_COLUMNS = (*BOX, "score")
OPTIONAL_COLUMNS = ("label",)
THRESHOLD_COLUMNS = THRESHOLD_KEYS  # a submission may not carry thresholds, in its YAML or as a column
#: Threshold-like names (case-insensitive): ``thresh`` anywhere, the word ``thr``, or a
#: confidence / score word joined to ``min``, ``cut`` or ``thr`` (either order).
THRESHOLD_PATTERN = re.compile(r"thresh|(?<![a-z])thr(?![a-z])|(conf|confidence|score)[^a-z0-9]?(min|cut|thr)"
                               r"|(min|cut)[^a-z0-9]?(conf|confidence|score)", re.IGNORECASE)
COCO_FIELDS = {"x1": "bbox", "y1": "bbox", "x2": "bbox", "y2": "bbox"}
YOLO_FIELDS = {"x1": "cx", "y1": "cy", "x2": "w", "y2": "h", "score": "conf"}
COCO_KEY = "aegisbench_key"


def is_threshold_key(name: object) -> bool:
    """Whether a ``submission.yaml`` key or a column name sets a threshold (refused)."""
    return str(name).lower() in THRESHOLD_COLUMNS or THRESHOLD_PATTERN.search(str(name)) is not None


def _empty(path: Path, unit: str = "row", fields: dict | None = None) -> RawRows:
    e = np.zeros(0, object)
    return RawRows(repeat(str(path), 0), np.zeros(0, np.int64), e, e, e, np.zeros((0, 4)), np.zeros(0),
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
    repeated = {n: k for n, k in Counter(names).items() if k > 1}
    for col, k in sorted(repeated.items()):
        problems.add(where, None, col, f"column name appears {k} times; every column needs its own name")
    if repeated:
        return False
    for col in names:
        if is_threshold_key(col):
            problems.add(where, None, clip(col), "per-config thresholds are not accepted: the evaluator freezes one "
                         "threshold per source on the clean _val predictions and applies it to every condition; "
                         "drop this column")
        elif col not in (*strings, *numbers, *optional):
            problems.add(where, None, clip(col), "unknown column (allowed: "
                         f"{', '.join((*strings, *numbers, *optional))})")
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


def read_parquet_checked(path: Path, problems: Problems, strings: tuple, numbers: tuple, optional: tuple,
                         dictionary: bool = False) -> pa.Table | None:
    """The ``strings`` and ``numbers`` columns once the schema and the row count passed
    (``dictionary``: string columns read dictionary-encoded, no string per row)."""
    try:
        schema, n_rows = pq.read_schema(path), pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowException) as exc:
        problems.add(str(path), None, None, f"cannot read Parquet: {exc}")
        return None
    if n_rows > MAX_PREDICTION_ROWS:  # refused from the footer, before any column is read
        problems.add(str(path), None, None, f"{n_rows} rows, more than the limit of {MAX_PREDICTION_ROWS}")
        return None
    if not check_schema(path, schema, strings, numbers, optional, problems):
        return None
    try:
        return pq.read_table(path, columns=[c for c in (*strings, *numbers)],
                             read_dictionary=list(strings) if dictionary else None)
    except (OSError, pa.ArrowException) as exc:
        problems.add(str(path), None, None, f"cannot read Parquet: {exc}")
        return None


def number_column(table: pa.Table, col: str) -> np.ndarray:
    return table.column(col).to_numpy(zero_copy_only=False).astype(np.float64)  # nulls -> NaN


def string_column(table: pa.Table, col: str) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """An object column sharing one Python string per distinct value (nulls: None), and
    its ``(uniques, codes)`` as :meth:`RawRows.code` gives them (no object per row)."""
    column = table.column(col)
    if pa.types.is_dictionary(column.type):
        enc = column.unify_dictionaries().combine_chunks()
    else:
        enc = column.combine_chunks().dictionary_encode()
    words = enc.dictionary.to_pylist()
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    values = np.empty(len(words) + 1, object)
    values[:-1] = words
    uniques = values.copy()
    uniques[-1] = ""
    return values[codes], (uniques, codes)


def parse_parquet(path: Path, problems: Problems) -> RawRows:
    table = read_parquet_checked(path, problems, STRING_COLUMNS, NUMBER_COLUMNS, OPTIONAL_COLUMNS, dictionary=True)
    if table is None:
        return _empty(path)
    n = table.num_rows
    cols, codes = {}, {}
    for c in STRING_COLUMNS:
        cols[c], codes[c] = string_column(table, c)
    xyxy = np.stack([number_column(table, c) for c in BOX], axis=1) if n else np.zeros((0, 4))
    score = number_column(table, "score")
    del table
    return RawRows(repeat(str(path), n), np.arange(n), cols["config"], cols["split"], cols["image_id"],
                   xyxy, score, codes=codes)


def check_labels(path: Path, track: str, problems: Problems) -> None:
    """One problem when the ``label`` column of a Parquet submission holds anything but
    ``track``'s label (nulls are no label): the first such row, the labels found, the count."""
    import pyarrow.compute as pc

    label = TRACK_LABELS.get(track)
    try:
        schema = pq.read_schema(path)
        if (label is None or schema.names.count("label") != 1 or pa.types.is_null(schema.field("label").type)
                or pq.read_metadata(path).num_rows > MAX_PREDICTION_ROWS):
            return  # no labels, or reported by the schema / row checks
        col = pq.read_table(path, columns=["label"]).column("label")
    except (OSError, pa.ArrowException):
        return  # reported by the schema checks
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return  # reported by the schema checks
    bad = np.flatnonzero(np.asarray(pc.fill_null(pc.not_equal(col, label), False), dtype=bool))
    if len(bad):
        found = sorted(set(pc.unique(col.take(pa.array(bad))).to_pylist()))
        listed = ", ".join(shown(v, 40) for v in found[:10]) + (f" and {len(found) - 10} more" if len(found) > 10
                                                                 else "")
        problems.add(str(path), int(bad[0]), "label", f"label {shown(col[int(bad[0])].as_py())} is not the {track} "
                     f"track's label {label!r} (or null); {len(bad)} row(s) hold other labels ({listed}): map the "
                     "model's classes to the target with aegisbench detect --classes and drop the others")


def parse_coco(path: Path, config: str, ids: dict[int, tuple[str, str]], problems: Problems) -> RawRows:
    """COCO results list -> rows; ``ids`` maps the exported integer ids to (split, image_id)."""
    where = str(path)
    try:
        res = load_json(read_regular_bytes(path, "COCO results", MAX_COCO_FILE_BYTES, follow=False)
                        .decode("utf-8"), where, nesting=False)
    except (OSError, UnicodeDecodeError) as exc:
        problems.add(where, None, None, f"cannot read JSON: {exc}")
        return _empty(path, fields=COCO_FIELDS)
    except BadInput as exc:
        problems.add(where, None, None, f"cannot read JSON: {exc.message}")
        return _empty(path, fields=COCO_FIELDS)
    if not isinstance(res, list):
        problems.add(where, None, None, "results must be a JSON list of detections")
        return _empty(path, fields=COCO_FIELDS)
    n = len(res)
    split, image = repeat("", n), repeat("", n)
    xyxy, score, reported = np.full((n, 4), np.nan), np.full(n, np.nan), np.zeros(n, bool)
    for r, det in enumerate(res):
        if not isinstance(det, dict):
            problems.add(where, r, None, "detection must be a JSON object")
            reported[r] = True
            continue
        iid = det.get("image_id")
        if not is_int(iid):
            problems.add(where, r, "image_id", f"must be an integer id from `aegisbench export-coco`, got {shown(iid)}")
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
    return RawRows(repeat(where, n), np.arange(n), repeat(config, n), split, image, xyxy,
                   score, "row", COCO_FIELDS, reported)


_YOLO_NAMES = ("cls", "cx", "cy", "w", "h", "conf")
_LINE_BREAKS = re.compile("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")  # str.splitlines breaks beyond \n


def _yolo_fast(text: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(line numbers, values (n, 6))`` parsed in C when every line holds six numbers
    (no blank line, no line break but ``\\n``); None sends the text to the per-line parser."""
    if not text.strip() or _LINE_BREAKS.search(text):
        return None
    try:
        vals = np.loadtxt(io.StringIO(text), dtype=np.float64, comments=None, ndmin=2)
    except ValueError:
        return None
    n = text.count("\n") + (not text.endswith("\n"))
    if vals.shape != (n, 6):
        return None
    return np.arange(1, n + 1), vals


def _yolo_slow(text: str, where: str, problems: Problems) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Line by line, every problem reported: ``(line numbers, values (n, 6), reported)``;
    a line that cannot be read has NaN values and is marked reported."""
    rows, out, reported = [], [], []
    for ln, line in enumerate(text.splitlines(), start=1):
        parts = line.split()
        if not parts:
            continue
        vals, bad = [np.nan] * 6, len(parts) != 6
        if bad:
            problems.add(where, ln, "conf", f"expected 6 fields 'cls cx cy w h conf', got {len(parts)}", "line")
        else:
            for k, (name, tok) in enumerate(zip(_YOLO_NAMES, parts)):
                try:
                    vals[k] = float(tok)
                except ValueError:
                    problems.add(where, ln, name, f"not a number: {shown(tok)}", "line")
                    bad = True
        rows.append(ln)
        out.append([np.nan] * 6 if bad else vals)
        reported.append(bad)
    return np.asarray(rows, np.int64), np.asarray(out, np.float64).reshape(-1, 6), np.asarray(reported, bool)


def parse_yolo_file(path: Path, config: str, split: str, size: tuple[int, int], problems: Problems) -> RawRows:
    """One ``<image_id>.txt``: ``cls cx cy w h conf`` per line, normalized to the frame
    (parsed in C when well-formed, line by line otherwise)."""
    where = str(path)
    width, height = size
    try:
        text = read_regular_bytes(path, "YOLO file", MAX_YOLO_FILE_BYTES, follow=False).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.add(where, None, None, f"cannot read text: {exc}")
        text = ""
    except BadInput as exc:
        problems.add(where, None, None, f"cannot read text: {exc.message}")
        text = ""
    fast = _yolo_fast(text)
    rows, vals, reported = (*fast, np.zeros(len(fast[0]), bool)) if fast else _yolo_slow(text, where, problems)
    n = len(rows)
    files = repeat(where, n)
    cls = vals[:, 0]
    bad_cls = ~reported & ~(np.isfinite(cls) & (cls >= 0) & (cls == np.floor(cls)))
    problems.add_rows(files, rows, "cls", "class must be a non-negative integer", "line", np.flatnonzero(bad_cls))
    reported |= bad_cls
    vals[reported] = np.nan
    _, cx, cy, w, h = (vals[:, k] for k in range(5))
    boxes = np.stack([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height], 1)
    return RawRows(files, rows, repeat(config, n), repeat(split, n), repeat(path.stem, n),
                   boxes.reshape(n, 4), vals[:, 5].copy(), "line", YOLO_FIELDS, reported)


def read_coco_table(path: Path, config: str, index, tmp: Path) -> dict[tuple[str, str, str], Detections]:
    """Load one COCO results file with :func:`~aegisbench.predictions.read_coco_results`
    against the GT rebuilt from the dataset (never a submitted GT), keyed by split."""
    from aegisbench.evaluation.dataset import coco_gt
    gt_path = tmp / f"{config}.json"
    gt_path.write_text(json.dumps(coco_gt(index, config, key_field=COCO_KEY)), encoding="utf-8")
    table = read_coco_results(path, gt_path, config, "_", id_field=COCO_KEY)
    ids = {str(cid): (split, image_id) for cid, split, image_id in index.coco_images(config)}
    return {(cfg, *ids[key]): det for (cfg, _, key), det in table.items()}
