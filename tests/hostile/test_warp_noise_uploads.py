"""Crafted ``warp_noise.parquet`` files (WARP noise sweep, seed 000) uploaded by a stranger to a
running ``aegisbench serve``: NaN / inf / out-of-range values, wrong column types, missing and
extra columns, a huge row count, an oversized or unreadable file, rows for another track's split
or another submission, levels the submission does not declare. Each is refused with one line
naming the file and the field (the API's ``error``; 400, or 413 for a file over the limit), and
nothing else changes: no folder in the store, nothing left in ``incoming/``, no row, the same
ledger and board bytes, the server still answering.

By design a submission sweeps the levels it declares (``warp_noise: {levels: [...]}`` in its
``submission.yaml``), whether or not the project's ``params.yaml`` runs them for the reference:
such an upload is accepted, and once scored it has touched only its own rows.
"""

from __future__ import annotations

import io
import math
import os

import httpx
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, meta
from _servicekit import Server, Worker, add_team, api, files_of, gt_submission, make_project, upload, wait_final

SRC = "synthetic_smoke"
FILE = "warp_noise.parquet"
#: the largest file one upload may expand to (``hosting.max_expanded_bytes``): every file of a
#: good submission fits; an oversized warp_noise.parquet does not
EXPANDED = 1 << 20


def sweep_rows(index, levels=(0.1,)) -> list[dict]:
    """A valid sweep: at each level the clean test frames' GT boxes (score 0.9)."""
    g = index.gt("clean", SRC)
    return [{"config": f"warp_noise_{round(a * 1000):03d}", "split": SRC, "image_id": i, "x1": float(b[0]),
             "y1": float(b[1]), "x2": float(b[2]), "y2": float(b[3]), "score": 0.9}
            for a in levels for i, boxes in zip(g.image_ids, g.boxes) for b in boxes]


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def smoke_folder(folder, index, levels=(0.1,), **over):
    """A smoke submission (GT boxes) declaring the sweep ``levels`` (None: no declaration)."""
    folder = gt_submission(folder, index, track="smoke", **over)
    if levels is not None:
        doc = meta(index, "smoke", **over, warp_noise={"levels": list(levels), "noise_at": "model_input"})
        (folder / "submission.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


def with_sweep(folder, data: bytes, name: str = FILE) -> list:
    return files_of(folder) + [("warp_noise", (name, data))]


@pytest.fixture(scope="module")
def site(tmp_path_factory, repo, index):
    """A running server and worker; team "Home" has a scored smoke row with its own sweep at 0.1."""
    base = tmp_path_factory.mktemp("warp_noise_uploads")
    root = make_project(base / "proj", repo, {"phases": [{"name": "open", "daily_limit": 50, "total_limit": 100}],
                                              "max_upload_bytes": 8 * EXPANDED, "max_expanded_bytes": EXPANDED})
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["warp"]["noise_levels"] = [0.1, 0.2]  # the levels the project runs for the reference
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    tokens = {name: add_team(root, name) for name in ("Home", "Stranger")}
    server, worker = Server(root), Worker(root)
    try:
        home = smoke_folder(base / "home", index, name="home sweep")
        r = upload(server, tokens["Home"], with_sweep(home, parquet_bytes(pa.Table.from_pylist(sweep_rows(index)))))
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert wait_final(server, tokens["Home"], sid, timeout=180)["status"] == "scored"
        yield root, server, tokens, sid
    finally:
        worker.stop()
        server.stop()


def state(root, server, tokens) -> dict:
    """Everything a refused upload must leave as it was."""
    hosted = root / "hosted"
    return {"store": sorted(os.listdir(hosted / "store" / "submissions")),
            "incoming": sorted(os.listdir(hosted / "incoming")),
            "ledger": (hosted / "store" / "ledger.jsonl").read_bytes(),
            "board": (hosted / "leaderboard" / "leaderboard.parquet").read_bytes(),
            "rows": {t: api(server, tokens[t], "/api/v1/submissions") for t in tokens}}


def refused(site, files, status: int = 400) -> dict:
    root, server, tokens, _ = site
    before = state(root, server, tokens)
    r = upload(server, tokens["Stranger"], files)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "problems"} and "\n" not in body["error"], body
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    assert state(root, server, tokens) == before and before["incoming"] == []
    return body


def one_line(body: dict, field: str, where: str = FILE) -> str:
    """The refusal is one line that starts with the file and names the field."""
    line = body["error"]
    assert line.startswith(where) and (f"field {field}:" in line or f"{field} " in line), line
    assert body["problems"] == [line], body["problems"]
    return line


def _rows(index, **change) -> list[dict]:
    """A valid sweep with ``change`` applied to its first row."""
    rows = sweep_rows(index)
    rows[0].update(change)
    return rows


ROW_VALUES = {  # (first row's change, field, words of the reason)
    "nan score": ({"score": math.nan}, "score", "not finite"),
    "inf box": ({"x2": math.inf}, "x2", "not finite"),
    "-inf box": ({"y1": -math.inf}, "y1", "not finite"),
    "score above 1": ({"score": 1.5}, "score", "outside [0, 1]"),
    "negative score": ({"score": -0.25}, "score", "outside [0, 1]"),
    "box outside the frame": ({"x1": -500.0}, "x1", "outside the frame"),
    "null config": ({"config": None}, "config", "empty or null"),
    "another track's split": ({"split": "sar_test"}, "split", "has no split 'sar_test'"),
    "an image of no split": ({"image_id": "../../clean/synthetic_sar_test_000_f00"}, "image_id", ""),
    "a level not declared": ({"config": "warp_noise_200"}, "config", "unknown config 'warp_noise_200'"),
    "a dataset config": ({"config": "clean"}, "config", "unknown config 'clean'"),
    "a level past 1": ({"config": "warp_noise_1500"}, "config", "unknown config 'warp_noise_1500'"),
    "a level in other digits": ({"config": "warp_noise_\u0661\u0660\u0660"}, "config", "unknown config"),
}


@pytest.mark.parametrize("case", list(ROW_VALUES))
def test_bad_values_are_one_line_naming_the_row_and_field(site, index, tmp_path, case):
    change, field, why = ROW_VALUES[case]
    table = pa.Table.from_pylist(_rows(index, **change), schema=pa.Table.from_pylist(sweep_rows(index)).schema)
    body = refused(site, with_sweep(smoke_folder(tmp_path / "s", index), parquet_bytes(table)))
    assert why in one_line(body, field) and ":row 0 " in body["error"]


def _retyped(index, column: str, array_of) -> pa.Table:
    t = pa.Table.from_pylist(sweep_rows(index))
    i = t.schema.get_field_index(column)
    return t.set_column(i, column, array_of(t.column(column).to_pylist()))


COLUMNS = {  # (table maker, field, words of the reason)
    "score as text": (lambda ix: _retyped(ix, "score", lambda v: pa.array([str(x) for x in v])), "score",
                      "type string, expected float"),
    "score as bool": (lambda ix: _retyped(ix, "score", lambda v: pa.array([True] * len(v))), "score",
                      "type bool, expected float"),
    "config as int": (lambda ix: _retyped(ix, "config", lambda v: pa.array([100] * len(v))), "config",
                      "type int64, expected string"),
    "image_id as bytes": (lambda ix: _retyped(ix, "image_id", lambda v: pa.array([x.encode() for x in v])),
                          "image_id", "type binary, expected string"),
    "score missing": (lambda ix: pa.Table.from_pylist(sweep_rows(ix)).drop_columns(["score"]), "score",
                      "missing column"),
    "a submission column": (lambda ix: pa.Table.from_pylist([dict(r, submission="sub-000000000000")
                                                              for r in sweep_rows(ix)]), "submission",
                            "unknown column"),
    "a team column": (lambda ix: pa.Table.from_pylist([dict(r, team="Home") for r in sweep_rows(ix)]), "team",
                      "unknown column"),
    "a threshold column": (lambda ix: pa.Table.from_pylist([dict(r, conf_threshold=0.3) for r in sweep_rows(ix)]),
                           "conf_threshold", "thresholds are not accepted"),
    "another label": (lambda ix: pa.Table.from_pylist([dict(r, label="person") for r in sweep_rows(ix)]), "label",
                      "is not the smoke track's label"),
}


@pytest.mark.parametrize("case", list(COLUMNS))
def test_wrong_missing_and_extra_columns_are_one_line_naming_the_column(site, index, tmp_path, case):
    make, field, why = COLUMNS[case]
    body = refused(site, with_sweep(smoke_folder(tmp_path / "s", index), parquet_bytes(make(index))))
    assert why in one_line(body, field)


def test_a_huge_row_count_is_refused_from_the_footer(site, index, tmp_path):
    """21 million rows in 600 KB (dictionary-encoded constants): refused before a row is read."""
    g = index.gt("clean", SRC)
    n = 1_000_000
    const = {"config": "warp_noise_100", "split": SRC, "image_id": g.image_ids[0]}
    chunk = pa.table({**{c: pa.DictionaryArray.from_arrays(np.zeros(n, np.int32), [v]) for c, v in const.items()},
                      **{c: pa.array(np.full(n, v, np.float32))
                         for c, v in (("x1", 1.0), ("y1", 1.0), ("x2", 5.0), ("y2", 5.0), ("score", 0.5))}})
    path = tmp_path / FILE
    with pq.ParquetWriter(path, chunk.schema) as w:
        for _ in range(21):
            w.write_table(chunk, row_group_size=n)
    assert path.stat().st_size < EXPANDED
    body = refused(site, with_sweep(smoke_folder(tmp_path / "s", index), path.read_bytes()))
    assert body["error"].startswith(f"{FILE}: 21000000 rows, more than the limit of ") and len(body["problems"]) == 1


def test_an_oversized_file_is_refused_while_it_is_copied(site, index, tmp_path):
    data = parquet_bytes(pa.Table.from_pylist(sweep_rows(index)))
    big = data + np.random.default_rng(0).integers(0, 256, EXPANDED, dtype=np.uint8).tobytes()
    body = refused(site, with_sweep(smoke_folder(tmp_path / "s", index), big), 413)
    assert body["error"] == f"{FILE} is larger than {EXPANDED} bytes"


@pytest.mark.parametrize("data", [b"PAR1 not a parquet file PAR1", b"", b"\x00" * 64])
def test_an_unreadable_file_is_one_line_naming_it(site, index, tmp_path, data):
    body = refused(site, with_sweep(smoke_folder(tmp_path / "s", index), data))
    assert body["error"].startswith(f"{FILE}: ") and len(body["problems"]) == 1, body


LEVELS = {  # declared levels -> the reason
    "past 1": ([1.5], "in [0, 1], got 1.5"),
    "negative": ([-0.1], "in [0, 1], got -0.1"),
    "not a thousandth": ([0.1234], "multiple of 0.001"),
    "not a number": (["all"], "all"),
    "NaN": ([math.nan], "got nan"),
    "not increasing": ([0.2, 0.1], "increasing"),
}


@pytest.mark.parametrize("case", list(LEVELS))
def test_declared_levels_are_checked_and_named(site, index, tmp_path, case):
    levels, why = LEVELS[case]
    folder = smoke_folder(tmp_path / "s", index, levels=levels)
    body = refused(site, with_sweep(folder, parquet_bytes(pa.Table.from_pylist(sweep_rows(index)))))
    line = body["error"]
    assert line.startswith("submission.yaml: field warp_noise.levels: ") and why in line, line


def test_form_level_refusals(site, index, tmp_path):
    folder = smoke_folder(tmp_path / "s", index)
    data = parquet_bytes(pa.Table.from_pylist(sweep_rows(index)))
    assert refused(site, with_sweep(folder, data, "warp_noise.json"))["error"] == "warp_noise is one .parquet file"
    two = with_sweep(folder, data) + [("warp_noise", ("again.parquet", data))]
    assert refused(site, two)["error"] == "warp_noise is one .parquet file"
    sar = gt_submission(tmp_path / "sar", index, name="sar with a sweep")
    body = refused(site, with_sweep(sar, data))
    assert body["error"] == f"{FILE}: the WARP tests are scored on the smoke track only"


def test_a_level_in_superscript_digits_is_one_line(site, index, tmp_path):
    """'²'.isdigit() is true and int('²') raises: vocab parses ASCII digits only (was a 500)."""
    rows = _rows(index, config="warp_noise_\u00b2")
    body = refused(site, with_sweep(smoke_folder(tmp_path / "s", index, levels=None),
                                    parquet_bytes(pa.Table.from_pylist(rows))))
    assert "unknown config" in one_line(body, "config")


def _board(root) -> pl.DataFrame:
    return pl.read_parquet(root / "hosted" / "leaderboard" / "leaderboard.parquet")


def test_a_level_the_project_does_not_run_is_the_submissions_own_and_touches_only_its_rows(site, index, tmp_path):
    """Declared 0.1 (no box at all) and 0.137 (not in params.yaml): accepted and scored; the
    Home row, its own sweep at 0.1 included, is what it was."""
    root, server, tokens, home = site
    key = ["submission", "source", "config", "metric", "stratum", "t"]
    before = _board(root).filter(pl.col("submission") == home).sort(key)
    folder = smoke_folder(tmp_path / "s", index, levels=[0.1, 0.137], name="stranger sweep")
    rows = sweep_rows(index, levels=(0.137,))
    r = upload(server, tokens["Stranger"], with_sweep(folder, parquet_bytes(pa.Table.from_pylist(rows))))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    assert wait_final(server, tokens["Stranger"], sid, timeout=180)["status"] == "scored"
    board = _board(root)
    assert board.filter(pl.col("submission") == home).sort(key).equals(before)
    mine = board.filter(pl.col("submission") == sid)
    warp = set(mine.filter(pl.col("config").str.starts_with("warp_noise_"))["config"])
    assert warp == {"warp_noise_100", "warp_noise_137"}
    assert set(mine["team"]) == {"Stranger"} and "warp_noise_137" not in set(before["config"])
    loss = mine.filter((pl.col("metric") == "warp_map_loss") & (pl.col("source") == SRC))
    assert dict(zip(loss["config"], loss["value"])) == {"warp_noise_100": 100.0, "warp_noise_137": 0.0}
