"""What a rebuilt leaderboard changes against the one it replaces (issue 36 item 2).

A cell is one row of the long table (:data:`~aegisbench.leaderboard.aggregate.LONG_COLUMNS`),
keyed by :data:`KEYS` (submission, track, source, config, metric, stratum, t); it *changed* when
its value, interval (``lo``, ``hi``) or null-reason ``note`` differs, compared exactly (a rebuild
on another machine may move a value by 1e-5). :func:`changed_cells` is a pure function of two
tables; it compares only tables scored on one ``benchmark_version`` (``dataset_version``) and
dataset digest (the rows of numbers taken from a paper, status ``published``, are never scored
here and do not count) and otherwise says in one line why not. Beside the cells it gives, per
submission with a listed cell, the machine class (``kernels``) of the published and of the rebuilt
rows (:attr:`Changes.machines`): a change on another machine class is what a machine-dependent
class (oneDNN on, a GPU) may do; on one portable class it is not. The Markdown of the result
(``CHANGES.md``) and what ``aegisbench leaderboard`` does with it before it swaps in a new
``leaderboard/`` are in :mod:`aegisbench.leaderboard.changes_md`.

>>> t = pl.DataFrame({"submission": ["a"], "track": ["sar"], "source": ["s"], "config": ["clean"],
...                   "metric": ["recall"], "value": [0.5], "lo": [0.4], "hi": [0.6],
...                   "dataset_version": ["0.6.0"], "dataset_digest": ["d" * 64]})
>>> c = changed_cells(t, t.with_columns(pl.lit(0.65).alias("value")))
>>> c.changed, c.outside, c.cells["difference"].round(3).to_list()
(1, 1, [0.15])
>>> changed_cells(t, t.with_columns(pl.lit("0.7.0").alias("dataset_version"))).not_comparable
'benchmark_version 0.6.0 there, 0.7.0 here'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from aegisbench.errors import BadInput
from aegisbench.leaderboard.aggregate import LONG_COLUMNS, PUBLISHED
from aegisbench.leaderboard.export_table import read_leaderboard_file
from aegisbench.leaderboard.machine import KERNELS, by_submission
from aegisbench.vocab import CLEAN

#: what names one cell of the long table
KEYS = ("submission", "track", "source", "config", "metric", "stratum", "t")
#: what a cell holds: compared exactly, null equal to null
CELL = ("value", "lo", "hi", "note")
#: in :attr:`Changes.machines`: the table holds no row of the submission (a class is never empty)
NO_ROWS = ""
#: the columns compared, each of the type the long table declares (:data:`LONG_COLUMNS`); the
#: optional ones are absent from older tables and read as nulls
REQUIRED = ("submission", "track", "source", "config", "metric", "value", "lo", "hi", "dataset_version",
            "dataset_digest")
OPTIONAL = ("stratum", "t", "note", "status", KERNELS)
#: the word a type error uses for each declared type
_KIND = {pl.String: "string", pl.Int64: "integer", pl.Float64: "number"}
#: the columns of :attr:`Changes.cells`; ``change``: changed, added or removed
CHANGE_COLUMNS = {**{k: LONG_COLUMNS[k] for k in KEYS}, "change": pl.String,
                  **{f"old_{c}": LONG_COLUMNS[c] for c in CELL},
                  **{f"new_{c}": LONG_COLUMNS[c] for c in CELL},
                  "difference": pl.Float64, "outside_old_interval": pl.Boolean}


@dataclass(frozen=True)
class Changes:
    """The cells two leaderboards do not share alike (:data:`CHANGE_COLUMNS`, sorted), how many
    cells both hold (``compared``), each table's cell count, and ``not_comparable``: why they
    were not compared (one line; then ``cells`` is empty), or None."""

    cells: pl.DataFrame
    compared: int
    published: int
    rebuilt: int
    not_comparable: str | None = None
    #: per submission with a listed cell, the machine class (``kernels``) of its published rows and
    #: of its rebuilt rows (None: not recorded; :data:`NO_ROWS`: that table has no row of it), sorted
    machines: dict = field(default_factory=dict)

    @property
    def other_machines(self) -> list[str]:
        """The submissions whose rebuilt rows were computed on another machine class than their
        published rows (both recorded)."""
        return [s for s, (old, new) in self.machines.items() if old and new and old != new]

    def _count(self, change: str) -> int:
        return self.cells.filter(pl.col("change") == change).height

    @property
    def changed(self) -> int:
        return self._count("changed")

    @property
    def added(self) -> int:
        return self._count("added")

    @property
    def removed(self) -> int:
        return self._count("removed")

    @property
    def outside(self) -> int:
        """Changed cells whose new value lies outside the old 95% interval."""
        return int(self.cells["outside_old_interval"].sum() or 0)

    @property
    def identical(self) -> bool:
        return self.not_comparable is None and self.cells.height == 0


def _kind_ok(dtype: pl.DataType, want: pl.DataType) -> bool:
    if dtype == pl.Null:
        return True
    if want == pl.String:
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    return dtype.is_integer() if want == pl.Int64 else dtype.is_numeric()


def check_table(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """``df`` as a leaderboard long table: the columns compared, in canonical types (NaN as null,
    optional columns added as nulls); BadInput naming ``where`` and the column otherwise, or the
    first cell given twice."""
    if not isinstance(df, pl.DataFrame):
        raise TypeError(f"{where}: a polars DataFrame (a leaderboard long table), got {type(df).__name__}")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise BadInput(f"missing column(s) {missing}: not a leaderboard table", where=where)
    columns = {c: LONG_COLUMNS[c] for c in REQUIRED + OPTIONAL}
    for col, want in columns.items():
        if col in df.columns and not _kind_ok(df.schema[col], want):
            raise BadInput(f"column {col!r} has type {df.schema[col]}, expected a {_KIND[want]}", where=where)
    df = df.with_columns([pl.lit(None, dtype=columns[c]).alias(c) for c in OPTIONAL if c not in df.columns])
    df = df.select([pl.col(c).cast(want) for c, want in columns.items()])
    df = df.with_columns([pl.col(c).fill_nan(None) for c in ("value", "lo", "hi")])
    dup = df.group_by(KEYS).len().filter(pl.col("len") > 1)
    if dup.height:
        first = dup.sort(KEYS, nulls_last=False).row(0, named=True)
        cell = " ".join(f"{k}={first[k]!r}" for k in KEYS if first[k] is not None)
        raise BadInput(f"cell {cell} is given {first['len']} times", where=where)
    return df


def _scored_on(df: pl.DataFrame) -> list[tuple]:
    """The (benchmark_version, dataset digest) pairs of the rows scored here (not ``published``)."""
    scored = df.filter(pl.col("status").is_null() | (pl.col("status") != PUBLISHED))
    return sorted(scored.select("dataset_version", "dataset_digest").unique().iter_rows(), key=repr)


def comparability(published: pl.DataFrame, rebuilt: pl.DataFrame) -> str | None:
    """Why two checked tables cannot be compared cell by cell (one line), or None. A table with
    no row scored here (empty, or only numbers from papers) is comparable with any."""
    there, here = _scored_on(published), _scored_on(rebuilt)
    for side, pairs in (("the published table", there), ("the rebuilt table", here)):
        if len(pairs) > 1:
            shown = ", ".join(f"{v} / {str(d)[:12]}" for v, d in pairs)
            return f"{side} mixes {len(pairs)} benchmark versions or dataset digests ({shown})"
    if not there or not here or there == here:
        return None
    (v1, d1), (v2, d2) = there[0], here[0]
    if v1 != v2:
        return f"benchmark_version {v1} there, {v2} here"
    return f"dataset digest {str(d1)[:12]}… there, {str(d2)[:12]}… here (benchmark_version {v1})"


def _joined(published: pl.DataFrame, rebuilt: pl.DataFrame) -> pl.DataFrame:
    """Every cell of either table, its old and new contents side by side and ``change``."""
    old = published.select(*KEYS, *[pl.col(c).alias(f"old_{c}") for c in CELL], pl.lit(True).alias("_old"))
    new = rebuilt.select(*KEYS, *[pl.col(c).alias(f"new_{c}") for c in CELL], pl.lit(True).alias("_new"))
    both = old.join(new, on=list(KEYS), how="full", coalesce=True, nulls_equal=True)
    same = pl.all_horizontal([pl.col(f"old_{c}").eq_missing(pl.col(f"new_{c}")) for c in CELL])
    return both.with_columns(
        pl.when(pl.col("_new").is_null()).then(pl.lit("removed"))
        .when(pl.col("_old").is_null()).then(pl.lit("added"))
        .when(~same).then(pl.lit("changed")).otherwise(None).alias("change"))


def changed_cells(published: pl.DataFrame, rebuilt: pl.DataFrame) -> Changes:
    """The cells of ``rebuilt`` that differ from ``published`` (changed, added, removed), each
    with its old and new value and interval, ``difference`` (new - old value) and whether the new
    value lies outside the old interval (null where either is undefined); sorted by submission,
    track, source, condition (clean first), metric. Not comparable (other benchmark_version or dataset digest):
    nothing listed and :attr:`Changes.not_comparable` says why."""
    published, rebuilt = check_table(published, "published"), check_table(rebuilt, "rebuilt")
    why = comparability(published, rebuilt)
    if why is not None:
        return Changes(pl.DataFrame(schema=CHANGE_COLUMNS), 0, published.height, rebuilt.height, why)
    both = _joined(published, rebuilt)
    compared = both.filter(pl.col("_old").is_not_null() & pl.col("_new").is_not_null()).height
    inside = (pl.col("new_value") >= pl.col("old_lo")) & (pl.col("new_value") <= pl.col("old_hi"))
    cells = (both.filter(pl.col("change").is_not_null())
             .with_columns((pl.col("new_value") - pl.col("old_value")).alias("difference"),
                           pl.when(pl.col("change") == "changed").then(~inside).otherwise(None)
                           .alias("outside_old_interval"),
                           (pl.col("config") != CLEAN).alias("_corrupted"))
             .sort("submission", "track", "source", "_corrupted", "config", "metric", "stratum", "t",
                   nulls_last=False)
             .select([pl.col(c).cast(t) for c, t in CHANGE_COLUMNS.items()]))
    there, here = by_submission(published), by_submission(rebuilt)
    machines = {s: (there.get(s, NO_ROWS), here.get(s, NO_ROWS)) for s in sorted(set(cells["submission"].to_list()))}
    return Changes(cells, compared, published.height, rebuilt.height, machines=machines)


def read_table(path: str | Path, where: str | None = None) -> pl.DataFrame:
    """The checked long table of a leaderboard folder or of its ``leaderboard.parquet``; BadInput
    naming ``where`` (default: the path) when it is absent, not Parquet or not a leaderboard table."""
    where = where or str(path)
    return check_table(read_leaderboard_file(path, where), where)
