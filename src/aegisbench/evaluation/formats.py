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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.errors import BadInput
from aegisbench.evaluation.rows import BOX, Problems, RawRows, clip, repeat, shown
from aegisbench.fields import is_int, is_number
from aegisbench.predictions import Detections, read_coco_results
from aegisbench.readers import (MAX_COCO_FILE_BYTES, MAX_PREDICTION_ROWS, MAX_ROW_BYTES, MAX_YOLO_FILE_BYTES, load_json,
                                read_regular_bytes)
from aegisbench.vocab import THRESHOLD_KEYS, THRESHOLD_PATTERN, TRACK_LABELS, is_threshold_key  # noqa: F401

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


def check_footer(path: Path, problems: Problems, max_rows: int = MAX_PREDICTION_ROWS, why: str = "") -> bool:
    """The row count and decoded size from the Parquet footer, before any column is read:
    at most ``max_rows`` rows (``why`` says where the limit comes from) and at most
    :data:`MAX_ROW_BYTES` decoded bytes per row on average (a long string in every row)."""
    try:
        meta = pq.read_metadata(path)
        decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    except (OSError, pa.ArrowException) as exc:
        problems.add(str(path), None, None, f"cannot read Parquet: {exc}")
        return False
    if meta.num_rows > max_rows:
        problems.add(str(path), None, None, f"{meta.num_rows} rows, more than the limit of {max_rows}{why} "
                     "(from the file's footer, before any row is read)")
        return False
    if decoded > MAX_ROW_BYTES * max(meta.num_rows, 1024):
        problems.add(str(path), None, None, f"{decoded} bytes once decoded, more than {MAX_ROW_BYTES} bytes a row "
                     "(from the file's footer, before any row is read)")
        return False
    return True


def read_parquet_checked(path: Path, problems: Problems, strings: tuple, numbers: tuple, optional: tuple,
                         dictionary: bool = False, max_rows: int = MAX_PREDICTION_ROWS,
                         why: str = "") -> pa.Table | None:
    """The ``strings`` and ``numbers`` columns once the footer (:func:`check_footer`) and
    the schema passed (``dictionary``: string columns read dictionary-encoded, no string per row)."""
    if not check_footer(path, problems, max_rows, why):
        return None
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        problems.add(str(path), None, None, f"cannot read Parquet: {exc}")
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


def parse_parquet(path: Path, problems: Problems, max_rows: int = MAX_PREDICTION_ROWS, why: str = "") -> RawRows:
    """``predictions.parquet`` -> rows, at most ``max_rows`` of them (checked from the footer)."""
    table = read_parquet_checked(path, problems, STRING_COLUMNS, NUMBER_COLUMNS, OPTIONAL_COLUMNS, dictionary=True,
                                 max_rows=max_rows, why=why)
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


def check_labels(path: Path, track: str, problems: Problems, max_rows: int = MAX_PREDICTION_ROWS) -> None:
    """One problem when the ``label`` column of a Parquet submission holds anything but
    ``track``'s label (nulls are no label): the first such row, the labels found, the count."""
    import pyarrow.compute as pc

    label = TRACK_LABELS.get(track)
    try:
        schema = pq.read_schema(path)
        if (label is None or schema.names.count("label") != 1 or pa.types.is_null(schema.field("label").type)
                or pq.read_metadata(path).num_rows > max_rows):
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


@dataclass(frozen=True)
class ClassRule:
    """Which class ids of a YOLO or COCO file are the track's one class: ``ids`` (from the
    submission's ``class_ids`` map, else the form's default); every other id is refused.

    >>> ClassRule.of("sar", None, {"person": 1}).ids, ClassRule.of("sar", {0: "person", 1: "car"}, {}).ids
    (frozenset({1}), frozenset({0}))
    """

    track: str
    label: str
    ids: frozenset
    declared: bool

    @classmethod
    def of(cls, track: str, declared: dict | None, defaults: dict[str, int]) -> "ClassRule":
        """``declared``: the submission's ``class_ids`` (id -> name); ``defaults``: name -> id of the
        form (YOLO ``{label: 0}``, COCO the exported GT's categories)."""
        label = TRACK_LABELS[track]
        if declared is not None:
            return cls(track, label, frozenset(k for k, v in declared.items() if v == label), True)
        ids = {defaults[label]} if label in defaults else set(defaults.values())
        return cls(track, label, frozenset(ids), False)

    def message(self, value) -> str:
        ids = ", ".join(map(str, sorted(self.ids))) or "none"
        whence = "declared under class_ids: in submission.yaml" if self.declared else "by default; a submission " \
            "that numbers its classes otherwise declares them under class_ids: in submission.yaml"
        return (f"class {shown(value)} is not the {self.track} track's class {self.label!r} (id {ids}, {whence}); "
                "drop the other classes' predictions")


def parse_coco(path: Path, config: str, ids: dict[int, tuple[str, str]], problems: Problems,
               rule: ClassRule | None = None) -> RawRows:
    """COCO results list -> rows; ``ids`` maps the exported integer ids to (split, image_id);
    ``category_id`` must be one of ``rule.ids``."""
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
        cid = det.get("category_id")
        if rule is not None and not (is_int(cid) and cid in rule.ids):
            problems.add(where, r, "category_id", "missing: give the id of the track's class" if cid is None
                         else rule.message(cid))
            reported[r] = True
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


def parse_yolo_file(path: Path, config: str, split: str, size: tuple[int, int], problems: Problems,
                    rule: ClassRule | None = None) -> RawRows:
    """One ``<image_id>.txt``: ``cls cx cy w h conf`` per line, normalized to the frame
    (parsed in C when well-formed, line by line otherwise); ``cls`` one of ``rule.ids``."""
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
    if rule is not None:
        other = ~reported & ~np.isin(cls, np.fromiter(rule.ids, np.float64, len(rule.ids)))
        problems.add_rows(files, rows, "cls", lambda i: rule.message(int(cls[i])), "line", np.flatnonzero(other))
        reported |= other
    vals[reported] = np.nan
    _, cx, cy, w, h = (vals[:, k] for k in range(5))
    boxes = np.stack([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height], 1)
    return RawRows(files, rows, repeat(config, n), repeat(split, n), repeat(path.stem, n),
                   boxes.reshape(n, 4), vals[:, 5].copy(), "line", YOLO_FIELDS, reported)


def read_coco_table(path: Path, config: str, index, tmp: Path) -> dict[tuple[str, str, str], Detections]:
    """Load one COCO results file with :func:`~aegisbench.predictions.read_coco_results`
    against the GT rebuilt from the dataset (never a submitted GT), keyed by split."""
    from aegisbench.dataset.index import coco_gt
    gt_path = tmp / f"{config}.json"
    gt_path.write_text(json.dumps(coco_gt(index, config, key_field=COCO_KEY)), encoding="utf-8")
    table = read_coco_results(path, gt_path, config, "_", id_field=COCO_KEY)
    ids = {str(cid): (split, image_id) for cid, split, image_id in index.coco_images(config)}
    return {(cfg, *ids[key]): det for (cfg, _, key), det in table.items()}
