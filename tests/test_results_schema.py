"""One results schema (aegisbench.results_schema): the evaluator's Arrow schema, the leaderboard
reader's columns and types, and the long table's result columns all come from its one declaration;
the reader keeps every column, n_units included."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aegisbench import results_schema as S
from aegisbench.evaluation.results import RESULTS_SCHEMA, results_table
from aegisbench.leaderboard.aggregate import LONG_COLUMNS
from aegisbench.leaderboard.result_files import METRICS_COLUMNS, OPTIONAL_COLUMNS, check_strata
from aegisbench.leaderboard.results import read_entry

#: the schema every results table has been written with: the bytes of metrics.parquet depend on it
WRITTEN = pa.schema([
    ("submission", pa.string()), ("track", pa.string()), ("source", pa.string()), ("config", pa.string()),
    ("corruption", pa.string()), ("family", pa.string()), ("severity", pa.int64()), ("metric", pa.string()),
    ("value", pa.float64()), ("lo", pa.float64()), ("hi", pa.float64()), ("n", pa.int64()),
    ("t", pa.int32()), ("stratum", pa.string()), ("n_units", pa.int32()), ("note", pa.string())])


def test_the_evaluator_writes_the_declared_schema_unchanged():
    assert RESULTS_SCHEMA is S.ARROW_SCHEMA
    assert RESULTS_SCHEMA.equals(WRITTEN, check_metadata=True)
    assert RESULTS_SCHEMA.serialize().to_pybytes() == WRITTEN.serialize().to_pybytes()
    assert [c.name for c in S.COLUMNS] == WRITTEN.names
    assert all(c.meaning.strip() for c in S.COLUMNS)


def test_reader_and_long_table_take_their_columns_from_the_schema():
    assert {**METRICS_COLUMNS, **OPTIONAL_COLUMNS} == {c.name: (c.kind, c.nullable) for c in S.COLUMNS}
    assert list(OPTIONAL_COLUMNS) == ["t", "stratum", "n_units", "note"]
    for name, dtype in S.polars_schema().items():
        if name in LONG_COLUMNS:
            assert LONG_COLUMNS[name] == dtype, name
    assert "n_units" not in LONG_COLUMNS  # documented in aggregate: the leaderboard files keep their bytes
    with pytest.raises(KeyError, match="no results column 'nope'"):
        S.polars_schema("nope")
    with pytest.raises(ValueError, match="kind must be one of"):
        S.Column("x", "bool", "string", True, False, "a flag")


def _folder(tmp_path, rows):
    folder = tmp_path / "sub_a"
    folder.mkdir()
    pq.write_table(results_table(rows), folder / S.METRICS_FILE)
    prov = {"submission": "sub_a", "name": "a", "team": "t", "model": "m", "track": "firespread",
            "dataset_version": "0.1.0", "dataset_digest": "d" * 64, "evaluator_version": "1", "frozen_threshold": 0.5}
    (folder / S.PROVENANCE_FILE).write_text(json.dumps(prov))
    return folder


def test_the_reader_keeps_every_column_n_units_included(tmp_path):
    base = {"submission": "sub_a", "track": "firespread", "source": "synthetic_firespread", "config": "firespread_s20",
            "corruption": None, "family": None, "severity": 20, "metric": "brier", "lo": 0.1, "hi": 0.3,
            "n": 96}
    rows = [{**base, "value": 0.2, "stratum": "all", "n_units": 3},
            {**base, "value": 0.25, "t": 1, "stratum": "all", "n_units": 2}]
    df = read_entry(_folder(tmp_path, rows)).metrics
    assert df.schema == pl.Schema(S.polars_schema())
    assert df["n_units"].to_list() == [3, 2] and df["t"].to_list() == [None, 1]


def test_an_older_table_without_the_optional_columns_reads_them_as_null(tmp_path):
    row = {"submission": "sub_a", "track": "firespread", "source": "s", "config": "firespread_s20", "corruption": None,
           "family": None, "severity": 20, "metric": "brier", "value": 0.2, "lo": None, "hi": None, "n": 5}
    folder = _folder(tmp_path, [row])
    table = pq.read_table(folder / S.METRICS_FILE).select(list(METRICS_COLUMNS))
    pq.write_table(table, folder / S.METRICS_FILE)
    df = read_entry(folder).metrics
    assert list(df.columns) == S.ARROW_SCHEMA.names
    assert df.select(list(OPTIONAL_COLUMNS)).null_count().row(0) == (1, 1, 1, 1)


def test_strata_columns_are_read_with_the_schema_types():
    df = check_strata(pl.DataFrame({"stratum": ["all"], "metric": ["f1"], "value": [1], "lo": [0], "hi": [1],
                                    "n": [3]}), "s.parquet")
    assert df.schema == pl.Schema(S.polars_schema("stratum", "metric", "value", "lo", "hi", "n"))
