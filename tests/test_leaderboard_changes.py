"""What a rebuilt leaderboard changes against the one it replaces (issue 36 item 2): the changed
cells of two long tables (hand-built in the real schema, written as real Parquet files), the
CHANGES.md the leaderboard command writes before it swaps in a new folder, and
``aegisbench leaderboard --compare``."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import polars as pl
import pytest

from aegisbench.errors import BadInput
from aegisbench.leaderboard.aggregate import LONG_COLUMNS
from aegisbench.leaderboard.build import build_leaderboard, parquet_bytes
from aegisbench.leaderboard.changes import CHANGE_COLUMNS, changed_cells, read_table
from aegisbench.leaderboard.changes_md import CHANGES_FILE, render_changes
from aegisbench.leaderboard.markdown import md_escape
from test_leaderboard import EV, fake_dataset, hand_results, main  # noqa: F401

VERSION, DIGEST = "0.6.0", "5f089529" + "0" * 56


def cell(sub, config, metric, value, lo=None, hi=None, *, stratum=None, t=None, note=None, status="verified",
         version=VERSION, digest=DIGEST) -> dict:
    corr, sev = (None, 0) if config == "clean" else (config.rsplit("_s", 1)[0], int(config.rsplit("_s", 1)[1]))
    row = {c: None for c in LONG_COLUMNS}
    row.update(submission=sub, name=f"{sub} submission", model=sub, team="t", track="sar", source="demo",
               config=config, corruption=corr, family="storm" if corr else None, severity=sev, metric=metric,
               value=value, lo=lo, hi=hi, n=100, stratum=stratum, t=t, note=note, frozen_threshold=0.5,
               dataset_version=version, dataset_digest=digest, evaluator_version="0.6.0", reference=False,
               status=status, matches_test_labels=False)
    return row


def table(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=LONG_COLUMNS)


def base_rows() -> list[dict]:
    return [cell("ref", "clean", "recall", 0.297, 0.156, 0.448),
            cell("ref", "low_light_s3", "recall", 0.0066, 0.0, 0.02),
            cell("ref", "low_light_s3", "precision", None, note="0/0"),
            cell("ref", "clean", "f1", 0.5, 0.4, 0.6, stratum="all", t=3),
            cell("paper", "clean", "recall", 0.9, status="published", version="0.1.0", digest="e" * 64)]


def parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(parquet_bytes(table(rows)))
    return path


def with_value(rows: list[dict], config: str, metric: str, sub: str = "ref", **changes) -> list[dict]:
    return [{**r, **changes} if (r["submission"], r["config"], r["metric"]) == (sub, config, metric) else r
            for r in rows]


def test_identical_tables_list_nothing(tmp_path):
    old = read_table(parquet(tmp_path / "old" / "leaderboard.parquet", base_rows()))
    new = read_table(parquet(tmp_path / "new.parquet", base_rows()))
    got = changed_cells(old, new)
    assert got.identical and got.compared == 5 and got.cells.height == 0
    assert dict(got.cells.schema) == CHANGE_COLUMNS
    assert "Identical to the leaderboard it replaces (5 cells: every value and interval)." in render_changes(got)


@pytest.mark.parametrize("value, outside", [(0.4, False), (0.514, True), (0.156, False), (0.1559, True)])
def test_one_changed_cell_inside_or_outside_its_old_interval(tmp_path, value, outside):
    old = read_table(parquet(tmp_path / "old.parquet", base_rows()))
    new_rows = with_value(base_rows(), "clean", "recall", value=value, lo=value - 0.15, hi=value + 0.15)
    got = changed_cells(old, read_table(parquet(tmp_path / "new.parquet", new_rows)))
    assert (got.changed, got.added, got.removed, got.compared, got.outside) == (1, 0, 0, 5, int(outside))
    row = got.cells.row(0, named=True)
    assert (row["submission"], row["config"], row["metric"], row["change"]) == ("ref", "clean", "recall", "changed")
    assert (row["old_value"], row["old_lo"], row["old_hi"], row["new_value"]) == (0.297, 0.156, 0.448, value)
    assert row["difference"] == pytest.approx(value - 0.297) and row["outside_old_interval"] is outside
    md = render_changes(got)
    assert (f"1 of 5 cells changed against the leaderboard it replaces, {int(outside)} of them outside their old "
            "95% interval; 0 added, 0 removed.") in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| `ref` | sar | `demo` | `clean` | `recall` |"))
    assert f"| changed | 0.297 [0.156, 0.448] | {value:.6g} [" in line
    assert line.endswith("| **yes** |" if outside else "| no |")


def test_interval_note_and_null_changes_count_as_changes(tmp_path):
    old = table(base_rows())
    got = changed_cells(old, table(with_value(base_rows(), "low_light_s3", "recall", hi=0.03)))
    assert got.changed == 1 and got.outside == 0  # same value, wider interval: changed, inside
    got = changed_cells(old, table(with_value(base_rows(), "low_light_s3", "recall", value=None, lo=None, hi=None,
                                              note="0/0")))
    row = got.cells.row(0, named=True)
    assert row["difference"] is None and row["outside_old_interval"] is None and got.outside == 0
    assert "| 0.0066 [0, 0.02] | n/a (0/0) |" in render_changes(got)
    nan = with_value(base_rows(), "low_light_s3", "precision", value=float("nan"))  # NaN is null: unchanged
    assert changed_cells(old, table(nan)).identical


def test_added_and_removed_cells_are_listed(tmp_path):
    rows = base_rows()
    new_rows = [r for r in rows if r["metric"] != "precision"] + [cell("new_model", "clean", "recall", 0.6, 0.5, 0.7)]
    got = changed_cells(read_table(parquet(tmp_path / "o.parquet", rows)),
                        read_table(parquet(tmp_path / "n.parquet", new_rows)))
    assert (got.changed, got.added, got.removed, got.compared) == (0, 1, 1, 4)
    assert got.cells.select("submission", "config", "metric", "change").rows() == [
        ("new_model", "clean", "recall", "added"), ("ref", "low_light_s3", "precision", "removed")]
    md = render_changes(got)
    assert "0 of 4 cells changed" in md and "1 added, 1 removed" in md
    assert "| changed | outside old interval | added | removed | largest change |" in md
    assert "| added | — | 0.6 [0.5, 0.7] |  |  |" in md and "| removed | n/a (0/0) | — |  |  |" in md
    # a stratified cell is its own cell: same (config, metric) with stratum and t
    strat = changed_cells(table(rows), table(with_value(rows, "clean", "f1", value=0.55)))
    assert strat.cells.select("stratum", "t").rows() == [("all", 3)]
    assert "| stratum, t |" in render_changes(strat) and "| `all`, t=3 |" in render_changes(strat)


@pytest.mark.parametrize("field, value, why", [
    ("dataset_version", "0.7.0", "benchmark_version 0.6.0 there, 0.7.0 here"),
    ("dataset_digest", "a" * 64, "dataset digest 5f0895290000… there, aaaaaaaaaaaa… here (benchmark_version 0.6.0)"),
])
def test_another_benchmark_version_or_digest_is_not_comparable(tmp_path, field, value, why):
    rows = base_rows()
    other = [{**r, field: value} if r["status"] != "published" else r for r in rows]
    other = with_value(other, "clean", "recall", value=0.9)
    got = changed_cells(table(rows), table(other))
    assert got.not_comparable == why and got.cells.height == 0 and not got.identical
    md = render_changes(got)
    assert f"Not compared with the leaderboard it replaces: {md_escape(why)}." in md and "## Cells" not in md
    # numbers from a paper are never scored here: their version does not count
    papers = [{**r, "dataset_version": "9.9.9"} if r["status"] == "published" else r for r in rows]
    assert changed_cells(table(rows), table(papers)).identical
    mixed = table(rows + [cell("x", "clean", "recall", 0.1, **{"version" if field == "dataset_version" else
                                                                "digest": value})])
    assert "the rebuilt table mixes 2 benchmark versions or dataset digests" in changed_cells(table(rows),
                                                                                            mixed).not_comparable


def test_bad_tables_are_refused_naming_the_file(tmp_path):
    with pytest.raises(BadInput, match="missing column.*'dataset_digest'"):
        changed_cells(table(base_rows()), table(base_rows()).drop("dataset_digest"))
    with pytest.raises(BadInput, match="column 'value' has type String"):
        changed_cells(table(base_rows()), table(base_rows()).with_columns(pl.col("value").cast(pl.String)))
    with pytest.raises(BadInput, match="^published: cell submission='paper' .* metric='recall' is given 2 times"):
        changed_cells(table(base_rows() * 2), table(base_rows()))
    with pytest.raises(TypeError, match="polars DataFrame"):
        changed_cells(base_rows(), table(base_rows()))
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(BadInput, match=r"junk\.parquet: unreadable Parquet"):
        read_table(tmp_path / "junk.parquet")
    with pytest.raises(BadInput, match="no leaderboard.parquet in it"):
        read_table(tmp_path)


def test_compare_on_the_command_line(tmp_path, main, capsys):  # noqa: F811
    old = parquet(tmp_path / "old" / "leaderboard.parquet", base_rows())
    parquet(tmp_path / "new" / "leaderboard.parquet",
            with_value(base_rows(), "clean", "recall", value=0.514, lo=0.361, hi=0.676))
    capsys.readouterr()
    assert main(["leaderboard", "--compare", str(old), str(tmp_path / "new")]) == 0
    out = capsys.readouterr().out
    assert "1 of 5 cells changed against" in out and "| 0.297 [0.156, 0.448] | 0.514 [0.361, 0.676] | +0.217 |" in out
    assert main(["leaderboard", "--compare", str(old), "--out", str(tmp_path / "old")]) == 0  # NEW: --out
    assert "Identical to" in capsys.readouterr().out
    (tmp_path / "wrong.parquet").write_bytes(parquet_bytes(pl.DataFrame({"a": [1]})))
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 nope")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    bad = {"does not exist": [str(tmp_path / "nope.parquet"), str(old)],
           "missing column(s)": [str(old), str(tmp_path / "wrong.parquet")],
           "unreadable Parquet": [str(tmp_path / "junk.parquet"), str(old)],
           "at most one NEW": [str(old), str(old), str(old)]}
    for needle, paths in bad.items():
        assert main(["leaderboard", "--compare", *paths]) == 2, needle
        cap = capsys.readouterr()
        err = cap.err.strip().splitlines()
        assert len(err) == 1 and needle in err[0] and cap.out == "", (needle, cap)
        assert needle == "at most one NEW" or any(p in err[0] for p in paths if "old" not in p), err
    assert main(["leaderboard", "--compare", str(old), str(old), "--metrics", str(tmp_path / "m.json")]) == 2
    assert "--metrics has no use beside it" in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


def _set_value(results: Path, sub: str, config: str, metric: str, value: float) -> None:
    path = results / sub / "metrics.parquet"
    df = pl.read_parquet(path)
    hit = (pl.col("config") == config) & (pl.col("metric") == metric)
    df.with_columns(pl.when(hit).then(value).otherwise(pl.col("value")).alias("value")).write_parquet(path)


def test_the_leaderboard_command_writes_changes_before_the_swap(hand_results, tmp_path, main, caplog):  # noqa: F811
    data = fake_dataset(tmp_path / "data")
    lb = tmp_path / "lb"
    args = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--out", str(lb),
            "--evaluator-version", EV]
    assert main(args) == 0
    assert "No leaderboard was published here before: nothing to compare." in (lb / CHANGES_FILE).read_text()
    n = pl.read_parquet(lb / "leaderboard.parquet").height
    assert main(args) == 0
    identical = (lb / CHANGES_FILE).read_bytes()
    assert f"Identical to the leaderboard it replaces ({n} cells: every value and interval).".encode() in identical
    assert main(args) == 0 and (lb / CHANGES_FILE).read_bytes() == identical  # two identical runs, same bytes

    _set_value(hand_results, "a", "clean", "recall", 0.84)  # inside a's clean interval [0.75, 0.85]
    _set_value(hand_results, "b", "water_glare_s1", "recall", 0.70)  # outside b's [0.55, 0.66]
    with caplog.at_level(logging.INFO, logger="aegisbench"):
        assert main(args) == 0
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "changes" in r.name]
    assert len(warned) == 1 and warned[0].startswith(
        f"2 of {n} leaderboard cells changed against the leaderboard it replaces, 1 outside their old 95% interval")
    md = (lb / CHANGES_FILE).read_text()
    assert f"2 of {n} cells changed against the leaderboard it replaces, 1 of them outside" in md
    assert "| `a` | sar | `demo` | `clean` | `recall` | changed | 0.8 [0.75, 0.85] | 0.84 [0.75, 0.85] | +0.04 | no |" in md
    assert ("| `b` | sar | `demo` | `water_glare_s1` | `recall` | changed | 0.6 [0.55, 0.66] | 0.7 [0.55, 0.66] | "
            "+0.1 | **yes** |") in md
    assert str(tmp_path) not in md
    # the library's default (a hosted board, rebuilt byte for byte into an empty folder) writes none
    build_leaderboard(hand_results, data, tmp_path / "hosted", evaluator_version=EV)
    assert not (tmp_path / "hosted" / CHANGES_FILE).exists()


def test_an_unreadable_published_leaderboard_is_said_not_fatal(hand_results, tmp_path, main, caplog):  # noqa: F811
    data = fake_dataset(tmp_path / "data")
    lb = tmp_path / "lb"
    args = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--out", str(lb),
            "--evaluator-version", EV]
    assert main(args) == 0
    (lb / "leaderboard.parquet").write_bytes(b"truncated")
    with caplog.at_level(logging.WARNING, logger="aegisbench"):
        assert main(args) == 0
    md = (lb / CHANGES_FILE).read_text()
    assert "The leaderboard it replaces could not be read (unreadable Parquet" in md and str(tmp_path) not in md
    assert any("not compared with the leaderboard it replaces, unreadable" in r.getMessage() for r in caplog.records)
    assert pl.read_parquet(lb / "leaderboard.parquet").height > 0  # the new one swapped in


PORTABLE_CPU = "x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread, torch 2.14.1"
ONEDNN = "x86-64-v3, oneDNN on, MKL COMPATIBLE, 1 thread, torch 2.14.1"


def test_changes_name_the_machine_class_of_published_and_rebuilt_rows(tmp_path):
    old_rows = [{**r, "kernels": PORTABLE_CPU if r["submission"] == "ref" else None} for r in base_rows()]
    new_rows = [{**r, "kernels": ONEDNN if r["submission"] == "ref" else None}
                for r in with_value(base_rows(), "clean", "recall", value=0.514, lo=0.361, hi=0.676)]
    new_rows.append({**cell("gpu_model", "clean", "recall", 0.6, 0.5, 0.7), "kernels": "cuda:0, torch 2.14.1"})
    old = read_table(parquet(tmp_path / "old.parquet", old_rows))
    got = changed_cells(old, read_table(parquet(tmp_path / "new.parquet", new_rows)))
    assert got.machines == {"gpu_model": ("", "cuda:0, torch 2.14.1"), "ref": (PORTABLE_CPU, ONEDNN)}
    assert got.other_machines == ["ref"]
    md = render_changes(got)
    assert "## Machine class per submission" in md
    assert "The rebuilt rows of 1 submission(s) were computed on another machine class than the published rows: `ref`." in md
    assert (f"| `ref` | `{PORTABLE_CPU}`: portable: the same bytes on every x86-64 machine | `{ONEDNN}`: "
            "machine-dependent (oneDNN on): rows may differ on another machine | **differs** |") in md
    assert ("| `gpu_model` | no rows | `cuda:0, torch 2.14.1`: machine-dependent (a GPU (cuda:0)): rows may differ "
            "on another machine | — |") in md
    # a table written before the column existed: the published class is not recorded, nothing flagged
    before = table(base_rows()).drop("kernels")
    got = changed_cells(before, read_table(parquet(tmp_path / "new.parquet", new_rows)))
    assert got.machines["ref"] == (None, ONEDNN) and got.other_machines == []
    assert f"| `ref` | not recorded | `{ONEDNN}`: machine-dependent" in render_changes(got)
    # the same class on both sides: said, not flagged
    same = [{**r, "kernels": PORTABLE_CPU if r["submission"] == "ref" else None}
            for r in with_value(base_rows(), "clean", "recall", value=0.3)]
    md = render_changes(changed_cells(old, table(same)))
    assert "No submission's rows were computed on another recorded machine class than the published ones." in md
    assert md.count("| same |") == 1


def _set_kernels(results: Path, sub: str, kernels: str) -> None:
    path = results / sub / "provenance.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "kernels": kernels}))


def test_the_command_says_when_rows_were_rebuilt_on_another_machine_class(hand_results, tmp_path, main,  # noqa: F811
                                                                         caplog):
    data = fake_dataset(tmp_path / "data")
    lb = tmp_path / "lb"
    args = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--out", str(lb),
            "--evaluator-version", EV]
    _set_kernels(hand_results, "a", PORTABLE_CPU)
    assert main(args) == 0
    _set_kernels(hand_results, "a", ONEDNN)  # the same results rebuilt with oneDNN on: a value moves
    _set_value(hand_results, "a", "clean", "recall", 0.81)
    _set_value(hand_results, "b", "clean", "recall", 0.79)  # b recorded no class
    with caplog.at_level(logging.WARNING, logger="aegisbench"):
        assert main(args) == 0
    warned = [r.getMessage() for r in caplog.records if "changes" in r.name and r.levelno == logging.WARNING]
    assert len(warned) == 1 and "(0 added, 0 removed); 1 submission(s) rebuilt on another machine class: see" in warned[0]
    md = (lb / CHANGES_FILE).read_text()
    assert (f"| `a` | `{PORTABLE_CPU}`: portable: the same bytes on every x86-64 machine | `{ONEDNN}`: "
            "machine-dependent (oneDNN on): rows may differ on another machine | **differs** |") in md
    assert "| `b` | not recorded | not recorded | — |" in md
    assert pl.read_parquet(lb / "leaderboard.parquet").filter(pl.col("submission") == "a")["kernels"].unique().to_list() \
        == [ONEDNN]
