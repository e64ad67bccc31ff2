"""The long results table, declared once: the columns of ``results/<id>/metrics.parquet``
(one row per source, config, frame, stratum and metric) with their type, nullability and
meaning. The evaluator writes tables of :data:`ARROW_SCHEMA`
(:func:`aegisbench.evaluation.results.results_table`); the leaderboard checks and reads them
with :func:`polars_schema` (:mod:`aegisbench.leaderboard.result_files`), and its long table
takes the types of these columns from there too (:data:`aegisbench.leaderboard.aggregate.LONG_COLUMNS`).
A leaf: it imports nothing from aegisbench.

Each column has a ``kind`` (``str``, ``int``, ``float``: what a reader accepts and casts to:
String, Int64, Float64) and the Arrow type the evaluator stores (``stored``). ``nullable``
is the contract of a ``metrics.parquet`` row, checked by the reader; the stored Parquet
fields are all nullable (the same file bytes as ever, and a fire-spread ``strata.parquet``
of the same schema leaves ``severity`` null). An optional column (``required`` False) absent
from a table written before it existed reads as all-null.

>>> [c.name for c in COLUMNS][-4:]
['t', 'stratum', 'n_units', 'note']
>>> ARROW_SCHEMA.field("t").type, polars_schema()["t"]
(DataType(int32), Int64)
>>> column("n_units").meaning.split(";")[0]
'bootstrap units with data'
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa

#: The results table of a results folder, and its provenance record.
METRICS_FILE = "metrics.parquet"
PROVENANCE_FILE = "provenance.json"
KINDS = ("str", "int", "float")
_STORED = {"string": pa.string, "int64": pa.int64, "int32": pa.int32, "float64": pa.float64}


@dataclass(frozen=True)
class Column:
    """One column of the results table (see the module's text for the fields)."""

    name: str
    kind: str
    stored: str
    nullable: bool
    required: bool
    meaning: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name!r}: kind must be one of {KINDS}, got {self.kind!r}")
        if self.stored not in _STORED:
            raise ValueError(f"column {self.name!r}: stored must be one of {sorted(_STORED)}, got {self.stored!r}")


COLUMNS: tuple[Column, ...] = (
    Column("submission", "str", "string", False, True, "the submission id (the results folder's name)"),
    Column("track", "str", "string", False, True, "the track scored (aegisbench.vocab.TRACKS)"),
    Column("source", "str", "string", False, True, "the source dataset scored"),
    Column("config", "str", "string", False, True, "the condition: a dataset config (clean, low_light_s3, ...)"),
    Column("corruption", "str", "string", True, True, "the config's corruption; null for clean"),
    Column("family", "str", "string", True, True, "the corruption's disaster family; null without a corruption"),
    Column("severity", "int", "int64", False, True, "the corruption's severity; 0 for clean"),
    Column("metric", "str", "string", False, True, "a registered metric's name (aegisbench.metrics)"),
    Column("value", "float", "float64", True, True, "the metric's value; null where undefined (see note)"),
    Column("lo", "float", "float64", True, True, "the interval's lower bound; null with hi where there is none"),
    Column("hi", "float", "float64", True, True, "the interval's upper bound; null with lo where there is none"),
    Column("n", "int", "int64", True, True, "how many items the value is computed over (images, pixels, maps)"),
    Column("t", "int", "int32", True, False, "the forecast frame; null = not per frame"),
    Column("stratum", "str", "string", True, False,
           "null for headline detection rows; COLUMN=value for those of evaluate --stratify; all, var_z:<bin>, "
           "dice:<bin> for fire spread"),
    Column("n_units", "int", "int32", True, False,
           "bootstrap units with data; null where the interval's unit is the image draw of the detection tracks"),
    Column("note", "str", "string", True, False,
           "why a row's value is null (\"0/0\", \"not physical for thermal\", ...); null otherwise"),
)
_BY_NAME = {c.name: c for c in COLUMNS}
#: The Arrow schema of every results table the evaluator writes (field order = :data:`COLUMNS`).
ARROW_SCHEMA = pa.schema([(c.name, _STORED[c.stored]()) for c in COLUMNS])


def column(name: str) -> Column:
    """The declared column ``name``; KeyError naming the columns otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no results column {name!r} (columns: {list(_BY_NAME)})") from None


@functools.cache
def _polars_types() -> dict:
    import polars as pl  # (only readers need polars: the evaluator does not load it)
    return {"str": pl.String, "int": pl.Int64, "float": pl.Float64}


def polars_type(kind: str):
    """The polars dtype a reader casts a column of ``kind`` to.

    >>> polars_type("int")
    Int64
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return _polars_types()[kind]


def polars_schema(*names: str) -> dict:
    """``{column: polars dtype}`` as a reader returns the table: every column in order, or the
    ``names`` given (in that order).

    >>> list(polars_schema("stratum", "value").items())
    [('stratum', String), ('value', Float64)]
    """
    return {n: polars_type(column(n).kind) for n in (names or _BY_NAME)}
