"""One results folder's files, checked: the metrics table (schema, types, conditions that
agree with their names), the provenance (bounded JSON, typed fields), a fire-spread
``strata.parquet``, all read from one published version of the folder (:func:`snapshot`)
and bounded before they are decoded (:data:`~aegisbench.readers.MAX_RESULT_FILE_BYTES`,
:data:`~aegisbench.readers.MAX_RESULT_ROWS`). :mod:`aegisbench.leaderboard.results` reads
folders through these. The metrics table is read with every column of the results schema
(:mod:`aegisbench.results_schema`), ``n_units`` included, in its order and reader types.

>>> sorted(METRICS_COLUMNS)[:3], list(OPTIONAL_COLUMNS)
(['config', 'corruption', 'family'], ['t', 'stratum', 'n_units', 'note'])
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import stat
import time
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from aegisbench.corruptions import corruption_families
from aegisbench.errors import BadInput, printable
from aegisbench.fields import is_number
from aegisbench.readers import MAX_RESULT_FILE_BYTES, MAX_RESULT_ROWS, MAX_ROW_BYTES, read_upto
from aegisbench.results_schema import COLUMNS, METRICS_FILE, PROVENANCE_FILE, polars_schema, polars_type
from aegisbench.vocab import CLEAN, TRACKS, parse_corruption_config

STRATA_COLUMNS = ("stratum", "metric", "value", "lo", "hi", "n")  # what the fire-spread report reads
ATTACHMENTS = ("calibration.png",)  # optional evaluator figures carried to the model page
# Disaster family of every corruption, from the corruption registry (table order). Other
# conditions (fire-spread stochasticity, WARP levels) may name their own family.
FAMILY_OF = corruption_families()

# column -> (kind, nullable), kind "str", "int" or "float": the results schema's columns
# (aegisbench.results_schema) a table must have, and its optional ones (a frame ``t``, a
# ``stratum``, ``n_units``, a ``note``): a table written before one existed reads it as all-null.
# The headline cell has t null and stratum null or "all".
METRICS_COLUMNS = {c.name: (c.kind, c.nullable) for c in COLUMNS if c.required}
OPTIONAL_COLUMNS = {c.name: (c.kind, c.nullable) for c in COLUMNS if not c.required}
PROVENANCE_STRINGS = ("submission", "name", "team", "model", "track", "dataset_version",
                      "dataset_digest", "evaluator_version")


def _kind_ok(dtype: pl.DataType, kind: str, nullable: bool) -> bool:
    if dtype == pl.Null:
        return nullable
    if kind == "str":
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    if kind == "int":
        return dtype.is_integer()
    return dtype.is_float() or dtype.is_integer()


def check_metrics(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """Check columns, types and row invariants; return the rows with canonical dtypes."""
    missing = [c for c in METRICS_COLUMNS if c not in df.columns]
    if missing:
        raise BadInput(f"missing column(s) {missing}", where=where)
    for col, (kind, nullable) in METRICS_COLUMNS.items():
        if not _kind_ok(df.schema[col], kind, nullable):
            raise BadInput(f"column {col!r} has type {df.schema[col]}, expected {kind}", where=where)
        if not nullable and df[col].null_count():
            raise BadInput(f"column {col!r} has null values", where=where)
    for col, (kind, nullable) in OPTIONAL_COLUMNS.items():
        if col not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=polars_type(kind)).alias(col))
        elif not _kind_ok(df.schema[col], kind, nullable):
            raise BadInput(f"column {col!r} has type {df.schema[col]}, expected {kind}", where=where)
    if df.height == 0:
        raise BadInput("no rows", where=where)
    out = df.select([pl.col(c).cast(t) for c, t in polars_schema().items()])  # every column, schema order
    out = out.with_columns([pl.col(c).fill_nan(None) for c in ("value", "lo", "hi")])
    out = out.with_columns(pl.when(pl.col("value").is_null()).then(pl.col("note")).otherwise(None).alias("note"))
    rows = out.with_row_index("_row")
    bad = rows.filter(pl.col("lo").is_null() != pl.col("hi").is_null())
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: lo and hi must both be set or both be null", where=where)
    bad = rows.filter(pl.col("lo") > pl.col("hi"))
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: lo > hi", where=where)
    bad = rows.filter(pl.col("severity") < 0)
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: negative severity", where=where)
    bad = rows.filter((pl.col("config") == CLEAN)
                      & (pl.col("corruption").is_not_null() | (pl.col("severity") != 0)))
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: config 'clean' needs corruption null and severity 0",
                       where=where)
    for row in rows.select("_row", "config", "corruption", "family", "severity").iter_rows(named=True):
        corr, fam = row["corruption"], row["family"]
        named = parse_corruption_config(row["config"])  # low_light_s3 is low_light at severity 3, in every folder
        if named is not None and named[0] in FAMILY_OF and named != (corr, row["severity"]):
            raise BadInput(f"row {row['_row']}: config {row['config']!r} is corruption {named[0]!r} at severity "
                           f"{named[1]}, the row says {corr!r} at severity {row['severity']}", where=where)
        if corr in FAMILY_OF and fam != FAMILY_OF[corr]:
            raise BadInput(f"row {row['_row']}: corruption {corr!r} belongs to family "
                           f"{FAMILY_OF[corr]!r}, not {fam!r}", where=where)
        if corr is None and fam is not None:
            raise BadInput(f"row {row['_row']}: family without corruption", where=where)
    kinds = out.group_by("source", "config").agg(pl.struct("corruption", "family", "severity").n_unique().alias("k"))
    bad = kinds.filter(pl.col("k") > 1).sort("source", "config")
    if bad.height:
        raise BadInput(f"config {bad['config'][0]!r} of source {bad['source'][0]!r} has rows of different "
                       "corruption, family or severity", where=where)
    keys = ["source", "config", "metric", "stratum", "t"]
    dup = out.group_by(keys).len().filter(pl.col("len") > 1)
    if dup.height:
        first = dup.sort(keys).row(0, named=True)
        extra = "".join(f" {k}={first[k]!r}" for k in ("stratum", "t") if first[k] is not None)
        raise BadInput(f"duplicate rows for source={first['source']!r} config={first['config']!r} "
                       f"metric={first['metric']!r}{extra}", where=where)
    return out


def _shown(value) -> str:
    """``value`` for a message, at most about 60 characters (a 400-digit integer is summarised)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_threshold(value, where: str) -> None:
    if value is None:
        return
    try:
        ok = is_number(value) and math.isfinite(float(value))
    except OverflowError:  # an integer too large for a float
        ok = False
    if not ok:
        raise BadInput(f"frozen_threshold must be a number or null, got {_shown(value)}", where=where)


def check_provenance(obj, where: str) -> dict:
    """Check the required provenance fields; the rest is kept as given."""
    if not isinstance(obj, dict):
        raise BadInput("provenance must be a JSON object", where=where)
    for key in (*PROVENANCE_STRINGS, "frozen_threshold"):
        if key not in obj:
            raise BadInput(f"missing field {key!r}", where=where)
    for key in PROVENANCE_STRINGS:
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise BadInput(f"field {key!r} must be a non-empty string", where=where)
    try:  # every renderer writes UTF-8: a lone surrogate (a JSON "\\ud800" escape) would stop them all
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadInput(f"holds text that is not valid Unicode ({exc.reason}: {exc.object[exc.start:exc.end]!a})",
                       where=where) from None
    if obj["track"] not in TRACKS:
        raise BadInput(f"unknown track {obj['track']!r} (expected one of {list(TRACKS)})", where=where)
    thr = obj["frozen_threshold"]
    if isinstance(thr, dict):  # one threshold per source dataset
        for src, val in thr.items():
            _check_threshold(val, f"{where}: frozen_threshold.{src}")
    else:
        _check_threshold(thr, where)
    return obj


class UnreadableResult(BadInput):
    """A results folder that exists but cannot be read (I/O error, broken link, a swap
    that never settles): the leaderboard stops instead of leaving it out."""


def _read_at(dfd: int, name: str, folder: Path) -> bytes | None:
    """The bytes of regular file ``name`` in the open folder ``dfd`` (None: absent)."""
    try:  # (non-blocking: a FIFO in its place is refused below, not waited on)
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableResult(f"cannot open {name} ({exc.strerror})", where=str(folder)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput("not a regular file", where=str(folder / name))
        if info.st_size > MAX_RESULT_FILE_BYTES:
            raise BadInput(f"{info.st_size} bytes, more than the limit of {MAX_RESULT_FILE_BYTES} (not read)",
                           where=str(folder / name))
        with os.fdopen(os.dup(fd), "rb") as fh:
            try:
                return read_upto(fh, info.st_size, MAX_RESULT_FILE_BYTES)
            except OSError as exc:
                raise UnreadableResult(f"cannot read {name} ({exc.strerror})", where=str(folder)) from None
    finally:
        os.close(fd)


def snapshot(folder: str | Path, names) -> dict[str, bytes | None]:
    """The bytes of ``names`` in ``folder`` (None: absent), all of one published version:
    read through one folder handle, again when the folder was swapped meanwhile."""
    folder = Path(folder)
    for attempt in range(20):
        try:
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            data, dfd = None, None
        except OSError as exc:
            raise UnreadableResult(f"cannot open the folder ({exc.strerror})", where=str(folder)) from None
        if dfd is not None:
            try:
                data = {name: _read_at(dfd, name, folder) for name in names}
                same = os.path.samestat(os.fstat(dfd), os.stat(folder))
            except FileNotFoundError:
                same = False
            finally:
                os.close(dfd)
            if same:
                return data
        time.sleep(0.05 * (attempt + 1))
    raise UnreadableResult("kept changing or vanished while being read (a writer is publishing it?)",
                           where=str(folder))


def _read_metrics(data: bytes, where: str) -> pl.DataFrame:
    """The metrics table in ``data`` once its footer says it is within :data:`MAX_RESULT_ROWS`
    rows of at most ``MAX_ROW_BYTES`` decoded bytes each (nothing is decoded before)."""
    try:
        meta = pq.read_metadata(io.BytesIO(data))
        decoded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if meta.num_rows > MAX_RESULT_ROWS or decoded > MAX_ROW_BYTES * max(meta.num_rows, 1024):
            raise BadInput(f"{meta.num_rows} rows, {decoded} bytes once decoded: more than the limit of "
                           f"{MAX_RESULT_ROWS} rows of {MAX_ROW_BYTES} bytes (from the footer, not read)", where=where)
        return pl.read_parquet(io.BytesIO(data))
    except BadInput:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is not usable Parquet
        raise BadInput(f"unreadable Parquet ({type(exc).__name__}: {exc})", where=where) from None


_STRATUM = re.compile(r"all|var_z:0|var_z:>[0-9.e+-]+|var_z:\([0-9.e+-]+,[0-9.e+-]+\]")


def check_strata(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """A fire-spread ``strata.parquet`` as the report reads it: :data:`STRATA_COLUMNS` of the
    right types and ``Var[Z_t]`` stratum labels; BadInput naming the column otherwise.

    >>> check_strata(pl.DataFrame({"stratum": ["x"], "metric": ["f1"], "value": [0.5], "lo": [0.4],
    ...                            "hi": [0.6], "n": [3]}), "s.parquet")
    Traceback (most recent call last):
    ...
    aegisbench.errors.BadInput: s.parquet: stratum 'x' is not a Var[Z_t] stratum (all, var_z:0, var_z:(lo,hi], var_z:>x)
    """
    missing = sorted(set(STRATA_COLUMNS) - set(df.columns))
    if missing:
        raise BadInput(f"missing columns {missing}", where=where)
    for col, kind in polars_schema(*STRATA_COLUMNS).items():
        try:
            df = df.with_columns(pl.col(col).cast(kind, strict=True))
        except Exception:  # noqa: BLE001 - any failed cast is a wrong column type
            raise BadInput(f"column {col!r} is {df.schema[col]}, not {kind}", where=where) from None
    bad = [s for s in df["stratum"].unique().to_list() if s is None or not _STRATUM.fullmatch(s)]
    if bad:
        raise BadInput(f"stratum {printable(repr(bad[0]), 80)} is not a Var[Z_t] stratum (all, var_z:0, "
                       "var_z:(lo,hi], var_z:>x)", where=where)
    return df
