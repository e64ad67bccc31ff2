"""Fire-spread forecast submissions: the Parquet layout, the writer and the validator.

A submission folder holds ``submission.yaml`` (``name``, ``team``, ``track:
firespread``, ``model``, ``contact``, ``license``, ``description``,
``dataset_version``, ``dataset_digest``) and ``forecasts.parquet`` with one row per
forecast map, keyed by ``(config, initial_condition, realization, t)``:

=====================  =======================================================
``config``             string, ``firespread_s<level>``
``initial_condition``  integer, a test initial condition
``realization``        integer, ``0 .. eval_realizations-1``
``t``                  integer frame, ``observe+1 .. observe+horizon``
``probability``        list of H lists of W floats in [0, 1]: P(cell burnt at t)
=====================  =======================================================

``submission.yaml`` is checked like every track's (``aegisbench validate``); the maps'
validation raises :class:`~aegisbench.errors.BadInput` naming ``file:row N field F``
(0-based row): wrong type, unknown key, wrong map shape, NaN/null, a value outside
[0, 1], a duplicate key, or missing coverage (every test key must be forecast).

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> keys = [("firespread_s0", 6, 0, 11)]
>>> write_forecasts(d / "f.parquet", keys, np.zeros((1, 2, 3), np.float32))
>>> sorted(read_forecasts(d / "f.parquet", (2, 3)))
[('firespread_s0', 6, 0, 11)]
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from aegisbench.atomic import atomic_path, atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.vocab import REQUIRED_FIELDS, firespread_config, is_threshold_key

log = logging.getLogger(__name__)

Key = tuple[str, int, int, int]  # (config, initial_condition, realization, t)
FORECASTS = "forecasts.parquet"
META = "submission.yaml"
META_FIELDS = REQUIRED_FIELDS  # checked by aegisbench.evaluation.submission.read_meta, as for every track
#: written when given: the kernels a model ran on (aegisbench.kernels.describe; the row's machine class)
OPTIONAL_META_FIELDS = ("kernels",)
KEY_COLUMNS = ("config", "initial_condition", "realization", "t")


def forecast_schema(dtype: pa.DataType = pa.float32()) -> pa.Schema:
    return pa.schema([pa.field("config", pa.string(), nullable=False),
                      pa.field("initial_condition", pa.int32(), nullable=False),
                      pa.field("realization", pa.int32(), nullable=False),
                      pa.field("t", pa.int32(), nullable=False),
                      pa.field("probability", pa.list_(pa.list_(dtype)), nullable=False)])


def forecasts_table(keys: Sequence[Key], probs: np.ndarray, dtype: str = "float32") -> pa.Table:
    """Arrow table of forecast maps ``probs`` (n, H, W) under ``keys``."""
    probs = np.asarray(probs, dtype=dtype)
    n, h, w = probs.shape
    if len(keys) != n:
        raise ValueError(f"{len(keys)} keys for {n} maps")
    inner = pa.ListArray.from_arrays(pa.array(np.arange(0, n * h * w + 1, w, dtype=np.int32)),
                                     pa.array(probs.reshape(-1)))
    outer = pa.ListArray.from_arrays(pa.array(np.arange(0, n * h + 1, h, dtype=np.int32)), inner)
    cols = list(zip(*keys)) if keys else [[], [], [], []]
    return pa.table([pa.array(cols[0], pa.string()), pa.array(cols[1], pa.int32()),
                     pa.array(cols[2], pa.int32()), pa.array(cols[3], pa.int32()), outer],
                    schema=forecast_schema(pa.from_numpy_dtype(probs.dtype)))


def write_forecasts(path: str | Path, keys: Sequence[Key], probs: np.ndarray, dtype: str = "float32") -> None:
    """Write forecast maps atomically (zstd Parquet)."""
    table = forecasts_table(keys, probs, dtype)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=256)


def write_submission(folder: str | Path, meta: dict, keys: Sequence[Key], probs: np.ndarray,
                     dtype: str = "float32") -> Path:
    """A complete submission folder (``submission.yaml`` + ``forecasts.parquet``): the required
    fields of ``meta`` and those of :data:`OPTIONAL_META_FIELDS` it has."""
    folder = Path(folder)
    missing = [f for f in META_FIELDS if f not in meta]
    if missing:
        raise ValueError(f"submission metadata lacks {missing}")
    write_forecasts(folder / FORECASTS, keys, probs, dtype)
    fields = [*META_FIELDS, *(k for k in OPTIONAL_META_FIELDS if k in meta)]
    atomic_write_text(folder / META, yaml.safe_dump({k: meta[k] for k in fields}, sort_keys=False))
    return folder


def _bad(where: str, row: int, field: str, msg: str) -> BadInput:
    return BadInput(msg, where=f"{where}:row {row} field {field}")


def read_forecasts(path: str | Path, shape: tuple[int, int], expected: Iterable[Key] | None = None
                   ) -> dict[Key, np.ndarray]:
    """Validated ``{key: (H, W) float32 map}``; with ``expected`` also checks keys and coverage."""
    path = Path(path)
    where = str(path)
    if not path.is_file():
        raise BadInput("forecast file not found", where=where)
    expected = None if expected is None else set(expected)
    try:
        check_forecast_footer(pq.ParquetFile(path).metadata, where, shape, expected)
        table = pq.read_table(path, columns=[*KEY_COLUMNS, "probability"])
    except (pa.ArrowException, OSError) as exc:
        raise BadInput(f"not a readable Parquet file ({exc})", where=where) from None
    return forecasts_from_table(table, where, shape, expected)


def check_forecast_footer(meta: pq.FileMetaData, where: str, shape: tuple[int, int],
                          expected: set[Key] | None) -> None:
    """Refuse from the footer, before any map is read: a column other than the key columns
    and ``probability`` (a threshold above all: the dataset declares the F2R threshold), more
    rows than forecast targets, or more map values than ``rows x H x W``."""
    names = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]
    for name in dict.fromkeys(names):
        if name not in (*KEY_COLUMNS, "probability"):
            why = ("thresholds cannot be set by a submission: the F2R threshold is declared by the dataset"
                   if is_threshold_key(name) else
                   f"unexpected column: {FORECASTS} holds {', '.join(KEY_COLUMNS)} and probability only")
            raise BadInput(why, where=f"{where}:column {name[:80]}")
    if expected is not None and meta.num_rows > len(expected):
        raise BadInput(f"{meta.num_rows} rows, more than the {len(expected)} forecast targets of the dataset "
                       "(from the file's footer)", where=where)
    leaf = [i for i, n in enumerate(names) if n == "probability"]
    values = sum(meta.row_group(g).column(i).num_values for g in range(meta.num_row_groups) for i in leaf)
    if values > meta.num_rows * shape[0] * shape[1]:
        raise BadInput(f"{values} map values for {meta.num_rows} rows, more than {shape[0]}x{shape[1]} a map "
                       "(from the file's footer)", where=where)


def forecasts_from_table(table: pa.Table, where: str, shape: tuple[int, int],
                         expected: Iterable[Key] | None = None) -> dict[Key, np.ndarray]:
    """The validation of :func:`read_forecasts` on an in-memory table (``where`` names it)."""
    names = set(table.column_names)
    dup = sorted({c for c in table.column_names if table.column_names.count(c) > 1})
    if dup:
        raise BadInput(f"duplicate column names {dup[:5]}", where=where)
    for col in (*KEY_COLUMNS, "probability"):
        if col not in names:
            raise BadInput(f"missing column {col!r}", where=where)
    configs, ints = _key_columns(table, where)
    maps = _maps(table, where, shape)
    out: dict[Key, np.ndarray] = {}
    exp = None if expected is None else set(expected)
    ics, reals, ts = (ints[c].tolist() for c in KEY_COLUMNS[1:])
    for i, key in enumerate(zip(configs, ics, reals, ts)):
        if key in out:
            raise _bad(where, i, "t", f"duplicate forecast for {key}")
        if exp is not None and key not in exp:
            field = _unknown_field(key, exp)
            raise _bad(where, i, field, f"no such forecast target {key}")
        out[key] = maps[i]
    if exp is not None and len(out) != len(exp):
        missing = sorted(exp - set(out))
        c, ic, r, t = missing[0]
        raise BadInput(f"coverage: {len(missing)} of {len(exp)} forecasts missing; first: config={c} "
                       f"initial_condition={ic} realization={r} t={t}", where=where)
    return out


def _key_columns(table: pa.Table, where: str) -> tuple[list, dict[str, np.ndarray]]:
    """The validated key columns: the configs (a list of str) and the integer columns (int64)."""
    cfg = table.column("config")
    if not (pa.types.is_string(cfg.type) or pa.types.is_large_string(cfg.type)):
        raise BadInput(f"column has type {cfg.type}, expected string", where=f"{where}:column config")
    ints = {}
    for col in KEY_COLUMNS[1:]:
        c = table.column(col)
        if not pa.types.is_integer(c.type):
            raise BadInput(f"column has type {c.type}, expected integer", where=f"{where}:column {col}")
        if c.null_count:
            raise _bad(where, int(np.flatnonzero(c.is_null().to_numpy(zero_copy_only=False))[0]), col, "null")
        ints[col] = c.to_numpy().astype(np.int64)
    configs = cfg.to_pylist()
    for i, c in enumerate(configs):
        if not c:
            raise _bad(where, i, "config", "empty or null")
    return configs, ints


def _maps(table: pa.Table, where: str, shape: tuple[int, int]) -> np.ndarray:
    """The validated ``probability`` column as (n, H, W) float32 maps in [0, 1]. Each check
    runs over every row before the next (the first bad row of the first failing check is
    named); the chunks of the column are read one at a time, never combined."""
    prob = table.column("probability")
    if not (pa.types.is_list(prob.type) or pa.types.is_large_list(prob.type)) or not (
            pa.types.is_list(prob.type.value_type) or pa.types.is_large_list(prob.type.value_type)) or not (
            pa.types.is_floating(prob.type.value_type.value_type) or pa.types.is_integer(prob.type.value_type.value_type)):
        raise BadInput(f"column has type {prob.type}, expected list<list<float>>", where=f"{where}:column probability")
    h, w = shape
    n = table.num_rows
    if prob.null_count:
        raise _bad(where, int(np.flatnonzero(prob.is_null().to_numpy(zero_copy_only=False))[0]), "probability", "null map")
    chunks = [c for c in prob.chunks if len(c)]
    outer_len = np.concatenate([np.diff(c.offsets.to_numpy()) for c in chunks] or [np.zeros(0, np.int64)])
    bad = np.flatnonzero(outer_len != h)
    if bad.size:
        raise _bad(where, int(bad[0]), "probability", f"map has {int(outer_len[bad[0]])} rows, expected {h}")
    rows = [c.flatten() for c in chunks]
    inner_ok = np.concatenate([(np.diff(r.offsets.to_numpy()).reshape(len(c), h) == w).all(axis=1)
                               for c, r in zip(chunks, rows)] or [np.ones(0, bool)])
    bad = np.flatnonzero(~inner_ok)
    if bad.size:
        raise _bad(where, int(bad[0]), "probability", f"map rows must have {w} values")
    vals = [r.flatten() for r in rows]
    starts = np.cumsum([0] + [len(c) for c in chunks])
    for v, row0 in zip(vals, starts):
        if v.null_count:
            first = row0 + int(np.flatnonzero(v.is_null().to_numpy(zero_copy_only=False))[0]) // (h * w)
            raise _bad(where, int(first), "probability", "null value in map")
    maps = np.empty((n, h, w), np.float32)
    nan_rows, out_rows = np.zeros(n, bool), np.zeros(n, bool)
    for v, a, b in zip(vals, starts[:-1], starts[1:]):
        _map_values(v.to_numpy(zero_copy_only=False), maps[a:b], nan_rows[a:b], out_rows[a:b])
    if nan_rows.any():
        raise _bad(where, int(np.flatnonzero(nan_rows)[0]), "probability", "NaN in map")
    if out_rows.any():
        raise _bad(where, int(np.flatnonzero(out_rows)[0]), "probability", "value outside [0, 1]")
    return maps


def _map_values(vals: np.ndarray, out: np.ndarray, nan_rows: np.ndarray, out_rows: np.ndarray) -> None:
    """Store the values of ``len(out)`` maps as float32 in ``out``; flag the maps holding a NaN
    and those holding a value outside [0, 1] (of the float32 values; NaN is not outside)."""
    n = len(out)
    if vals.dtype == np.float16:  # exact in float32: checked on the bits (sign bit, exponent, mantissa)
        bits = vals.view(np.uint16).reshape(n, -1)
        if int(bits.max(initial=0)) > 0x3C00:  # else every value lies in [+0, 1]
            nan = (bits & 0x7FFF) > 0x7C00
            nan_rows |= nan.any(axis=1)
            out_rows |= ((bits > 0x3C00) & (bits != 0x8000) & ~nan).any(axis=1)
        out[...] = vals.reshape(out.shape)
        return
    flat = vals.astype(np.float32).reshape(n, -1)
    nan_rows |= np.isnan(flat).any(axis=1)
    out_rows |= ((flat < 0) | (flat > 1)).any(axis=1)
    out.reshape(n, -1)[...] = flat


def _unknown_field(key: Key, expected: set[Key]) -> str:
    """The first key field that matches no expected target (for the error message)."""
    configs = {k[0] for k in expected}
    if key[0] not in configs:
        return "config"
    if key[1] not in {k[1] for k in expected if k[0] == key[0]}:
        return "initial_condition"
    if key[2] not in {k[2] for k in expected if k[:2] == key[:2]}:
        return "realization"
    return "t"


def expected_keys(levels: Iterable[int], ics: Iterable[int], n_realizations: int, frames) -> list[Key]:
    """Every forecast a complete submission must contain."""
    ics = sorted(ics)
    return [(firespread_config(s), ic, r, int(t)) for s in sorted(levels) for ic in ics
            for r in range(n_realizations) for t in frames]
