"""Leaderboard aggregation, malformed/stale handling, Markdown, escaping and determinism,
on hand-made results folders (polars DataFrames written to Parquet)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from aegisbench import cli
from aegisbench.errors import BadInput
from aegisbench.leaderboard.aggregate import (build_board, family_summary, floor_view, long_table, rank_view,
                                              relative_drop, tied_groups)
from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.leaderboard.markdown import md_code, md_escape, render_markdown
from aegisbench.leaderboard.results import Expectation, collect_results, read_entry

DIGEST = "d" * 64
EV = "ev-1.0"
SCHEMA = {"submission": pl.String, "track": pl.String, "source": pl.String, "config": pl.String,
          "corruption": pl.String, "family": pl.String, "severity": pl.Int64, "metric": pl.String,
          "value": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "n": pl.Int64}
EXTRA = {"t": pl.Int32, "stratum": pl.String, "n_units": pl.Int32}
FAMILY = {"water_glare": "flood", "turbidity_cast": "flood", "inundation": "flood", "smoke_haze": "wildfire",
          "fire_warm_tint": "wildfire", "rain_streaks": "storm", "motion_blur": "storm", "low_light": "storm",
          "dust_haze": "earthquake"}


def row(sub, config, metric, value, lo=None, hi=None, source="demo", track="sar", n=200):
    m = re.fullmatch(r"(.+)_s(\d+)", config)
    corr = m.group(1) if m and config != "clean" else None
    return {"submission": sub, "track": track, "source": source, "config": config, "corruption": corr,
            "family": FAMILY.get(corr) if corr else None, "severity": int(m.group(2)) if corr else 0,
            "metric": metric, "value": value, "lo": lo, "hi": hi, "n": n}


def write_result(root: Path, sub: str, rows: list[dict], model: str | None = None, team: str = "team a",
                 track: str = "sar", digest: str = DIGEST, ev: str = EV, threshold=0.5, **prov) -> Path:
    folder = root / sub
    folder.mkdir(parents=True, exist_ok=True)
    extra = {k: t for k, t in EXTRA.items() if rows and k in rows[0]}  # as the fire-spread evaluator writes
    pl.DataFrame(rows, schema={**SCHEMA, **extra}).write_parquet(folder / "metrics.parquet")
    doc = {"submission": sub, "name": f"{model or sub} submission", "team": team, "model": model or sub,
           "track": track, "dataset_version": "0.1.0", "dataset_digest": digest, "evaluator_version": ev,
           "frozen_threshold": threshold, "submission_files": {"predictions.parquet": "0" * 64},
           "params_sha256": "1" * 64, **prov}
    (folder / "provenance.json").write_text(json.dumps(doc))
    return folder


def fake_dataset(root: Path, digest: str = DIGEST) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps({"format": 2, "benchmark_version": "0.0.0", "dataset_digest": digest,
                                                    "files": {}, "configs": {}}))
    return root


def ci(v, w=0.02):
    return (v, round(v - w, 6), round(v + w, 6))


HAND = {  # model -> config -> (value, lo, hi) of recall
    "a": {"clean": (0.80, 0.75, 0.85), "water_glare_s1": (0.70, 0.65, 0.75), "turbidity_cast_s1": ci(0.74),
          "motion_blur_s3": (0.30, 0.25, 0.35), "low_light_s3": (0.0, 0.0, 0.0)},
    "b": {"clean": (0.78, 0.72, 0.84), "water_glare_s1": (0.60, 0.55, 0.66), "turbidity_cast_s1": ci(0.61),
          "motion_blur_s3": (0.0, 0.0, 0.0), "low_light_s3": (0.0, 0.0, 0.0)},
    "c": {"clean": (0.60, 0.55, 0.65), "water_glare_s1": (0.50, 0.40, 0.56), "turbidity_cast_s1": ci(0.52),
          "motion_blur_s3": (0.20, 0.15, 0.25), "low_light_s3": (0.05, 0.01, 0.09)},
}
FP = {"a": {"clean": (10.0, 8.0, 12.0), "water_glare_s1": (40.0, 35.0, 45.0)},
      "b": {"clean": (30.0, 25.0, 35.0)}, "c": {"clean": (11.0, 9.0, 13.0)}}


def hand_rows(sub: str) -> list[dict]:
    rows = [row(sub, cfg, "recall", *v) for cfg, v in HAND[sub].items()]
    rows += [row(sub, cfg, "fp", *v) for cfg, v in FP[sub].items()]
    if sub == "a":
        rows.append(row("a", "low_light_s3", "precision", float("nan")))  # undefined: no detections
        rows.append(row("a", "clean", "images_seen", 50.0))  # a metric with no order
    return rows


@pytest.fixture
def hand_results(tmp_path):
    root = tmp_path / "results"
    for sub, model in (("a", "Alpha"), ("b", "Bravo"), ("c", "Charlie")):
        write_result(root, sub, hand_rows(sub), model=model,
                     threshold={"demo": 0.25} if sub == "a" else 0.4)
    return root


def test_tied_groups_chain_degenerate_and_direction():
    # a-b and b-c overlap, a-c do not: one group through the chain
    assert tied_groups([("a", .70, .65, .75), ("b", .60, .55, .66), ("c", .50, .40, .56)], 1) == [["a", "b", "c"]]
    assert tied_groups([("a", .74, .72, .76), ("b", .61, .59, .63), ("c", .52, .5, .54)], 1) == [["a"], ["b"], ["c"]]
    # two collapsed models tie at [0, 0]; the better one stands alone
    assert tied_groups([("x", 0.0, 0.0, 0.0), ("y", 0.0, 0.0, 0.0), ("z", .05, .01, .09)], 1) == [["z"], ["x", "y"]]
    # lower is better: the smallest count leads; touching intervals tie
    assert tied_groups([("p", 10, 8, 12), ("q", 30, 25, 35), ("r", 11, 9, 13)], -1) == [["p", "r"], ["q"]]
    assert tied_groups([("p", 1.0, 0.5, 1.5), ("q", 2.0, 1.5, 2.5)], 1) == [["q", "p"]]
    # no interval: a point; equal points tie, in id order
    assert tied_groups([("b", .5, None, None), ("a", .5, None, None), ("c", .4, None, None)], 1) == [["a", "b"], ["c"]]


def test_long_table_keeps_every_condition(hand_results):
    entries, skipped = collect_results(hand_results, Expectation(DIGEST, EV))
    assert skipped == [] and [e.folder for e in entries] == ["a", "b", "c"]
    long = long_table(entries)
    assert long.height == sum(len(hand_rows(s)) for s in "abc")  # nothing averaged away
    for col in ("model", "team", "track", "source", "config", "corruption", "family", "severity", "metric",
                "value", "lo", "hi", "frozen_threshold", "dataset_digest", "evaluator_version"):
        assert col in long.columns
    a = long.filter((pl.col("submission") == "a") & (pl.col("metric") == "recall"))
    assert a["config"].to_list() == ["clean", "water_glare_s1", "turbidity_cast_s1", "motion_blur_s3",
                                     "low_light_s3"]  # condition order: clean, families in order
    assert set(a["frozen_threshold"].to_list()) == {0.25}  # per-source threshold dict
    assert long.filter(pl.col("submission") == "b")["frozen_threshold"].unique().to_list() == [0.4]
    nan_row = long.filter((pl.col("metric") == "precision"))
    assert nan_row.height == 1 and nan_row["value"][0] is None


def test_views_family_floor_drop_and_ranks(hand_results):
    entries, _ = collect_results(hand_results, Expectation(DIGEST, EV))
    long = long_table(entries)

    fam = family_summary(long).filter((pl.col("metric") == "recall") & (pl.col("submission") == "a"))
    flood = fam.filter((pl.col("family") == "flood") & (pl.col("severity") == 1)).row(0, named=True)
    assert flood["mean"] == pytest.approx(0.72) and (flood["min"], flood["max"]) == (0.70, 0.74)
    assert flood["n_conditions"] == 2 and flood["over"] == "turbidity_cast_s1,water_glare_s1"
    assert flood["worst_config"] == "water_glare_s1" and flood["aggregate"] == "mean"
    storm_all = fam.filter((pl.col("family") == "storm") & pl.col("severity").is_null()).row(0, named=True)
    assert storm_all["mean"] == pytest.approx(0.15) and storm_all["worst_config"] == "low_light_s3"
    assert fam.filter(pl.col("family").is_null()).height == 0  # clean is never folded into a family

    fl = floor_view(long)
    rec = {r["submission"]: r for r in fl.filter(pl.col("metric") == "recall").iter_rows(named=True)}
    assert rec["a"]["floor"] == 0.0 and rec["a"]["at"] == ["low_light_s3"] and rec["a"]["clean"] == 0.80
    assert rec["b"]["at"] == ["motion_blur_s3", "low_light_s3"]  # ties all listed, in condition order
    assert rec["c"]["floor"] == 0.05 and (rec["c"]["lo"], rec["c"]["hi"]) == (0.01, 0.09)
    fp = {r["submission"]: r for r in fl.filter(pl.col("metric") == "fp").iter_rows(named=True)}
    assert fp["a"]["floor"] == 40.0 and fp["a"]["at"] == ["water_glare_s1"]  # lower is better: worst = max
    assert "images_seen" not in fl["metric"].to_list()

    dr = relative_drop(long)
    wg = dr.filter((pl.col("submission") == "a") & (pl.col("config") == "water_glare_s1"))
    by_metric = {r["metric"]: r for r in wg.iter_rows(named=True)}
    assert by_metric["recall"]["drop"] == pytest.approx(0.10)
    assert by_metric["recall"]["relative_drop"] == pytest.approx(0.125)
    assert by_metric["fp"]["drop"] == pytest.approx(30.0) and by_metric["fp"]["relative_drop"] == pytest.approx(3.0)
    assert dr.filter(pl.col("config") == "clean").height == 0

    rk = rank_view(long)

    def order(config, metric="recall"):
        part = rk.filter((pl.col("config") == config) & (pl.col("metric") == metric))
        return [(r["submission"], r["rank"], r["group_size"]) for r in part.iter_rows(named=True)]

    assert order("clean") == [("a", 1, 2), ("b", 1, 2), ("c", 3, 1)]
    assert order("low_light_s3") == [("c", 1, 1), ("a", 2, 2), ("b", 2, 2)]  # collapses tie
    assert order("water_glare_s1") == [("a", 1, 3), ("b", 1, 3), ("c", 1, 3)]  # chained overlap
    assert order("turbidity_cast_s1") == [("a", 1, 1), ("b", 2, 1), ("c", 3, 1)]
    assert order("clean", "fp") == [("a", 1, 2), ("c", 1, 2), ("b", 3, 1)]
    assert rk.filter(pl.col("metric") == "precision").height == 0  # undefined values are not ranked
    assert set(rk["config"].to_list()) <= set(long["config"].to_list())  # no cross-condition rank


MALFORMED = {
    "no_provenance": "missing provenance.json",
    "bad_parquet": "unreadable Parquet",
    "missing_col": "missing column(s) ['hi']",
    "str_value": "column 'value' has type String",
    "wrong_family": "belongs to family 'storm'",
    "lo_gt_hi": "lo > hi",
    "dup_rows": "duplicate rows",
    "bad_json": "unreadable JSON",
    "renamed": "does not match the folder name",
    "no_digest": "missing field 'dataset_digest'",
}


def make_bad_folders(root: Path) -> None:
    good = [row("x", "clean", "recall", 0.5, 0.4, 0.6)]
    f = write_result(root, "no_provenance", [{**good[0], "submission": "no_provenance"}])
    (f / "provenance.json").unlink()
    f = write_result(root, "bad_parquet", [{**good[0], "submission": "bad_parquet"}])
    (f / "metrics.parquet").write_bytes(b"PAR1 not really parquet")
    f = write_result(root, "missing_col", [{**good[0], "submission": "missing_col"}])
    pl.read_parquet(f / "metrics.parquet").drop("hi").write_parquet(f / "metrics.parquet")
    f = write_result(root, "str_value", [{**good[0], "submission": "str_value"}])
    pl.read_parquet(f / "metrics.parquet").with_columns(pl.col("value").cast(pl.String)).write_parquet(
        f / "metrics.parquet")
    write_result(root, "wrong_family", [{**row("wrong_family", "low_light_s1", "recall", 0.1), "family": "flood"}])
    write_result(root, "lo_gt_hi", [row("lo_gt_hi", "clean", "recall", 0.5, 0.6, 0.4)])
    write_result(root, "dup_rows", [row("dup_rows", "clean", "recall", 0.5)] * 2)
    f = write_result(root, "bad_json", [row("bad_json", "clean", "recall", 0.5)])
    (f / "provenance.json").write_text("{not json")
    f = write_result(root, "renamed", [row("renamed", "clean", "recall", 0.5)])
    f.rename(root / "renamed_copy")
    (root / "renamed_copy").rename(root / "renamed")
    doc = json.loads((root / "renamed" / "provenance.json").read_text())
    (root / "renamed" / "provenance.json").write_text(json.dumps({**doc, "submission": "other"}))
    f = write_result(root, "no_digest", [row("no_digest", "clean", "recall", 0.5)])
    doc = json.loads((f / "provenance.json").read_text())
    del doc["dataset_digest"]
    (f / "provenance.json").write_text(json.dumps(doc))
    write_result(root, "old_data", [row("old_data", "clean", "recall", 0.9)], digest="e" * 64)
    write_result(root, "old_eval", [row("old_eval", "clean", "recall", 0.9)], ev="ev-0.9")


@pytest.fixture
def main(monkeypatch):
    """``aegisbench`` main with the leaderboard commands registered (until cli.py lists them)."""
    if "aegisbench.leaderboard.commands" not in cli.COMMAND_MODULES:
        monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "aegisbench.leaderboard.commands"])
    return cli.main


def test_malformed_and_stale_are_reported_and_skipped(hand_results, tmp_path, main):
    make_bad_folders(hand_results)
    entries, skipped = collect_results(hand_results, Expectation(DIGEST, EV))
    assert [e.folder for e in entries] == ["a", "b", "c"]
    why = {s.folder: s for s in skipped}
    for folder, text in MALFORMED.items():
        assert why[folder].problem == "malformed" and text in why[folder].reason, (folder, why[folder])
    assert why["old_data"].problem == "stale" and "dataset digest eeeeeeeeeeee" in why["old_data"].reason
    assert why["old_eval"].problem == "stale" and "evaluator version ev-0.9" in why["old_eval"].reason
    assert str(tmp_path) not in "".join(s.reason for s in skipped)  # locations are relative: reproducible
    with pytest.raises(BadInput, match="missing column"):
        read_entry(hand_results / "missing_col")

    rep = build_leaderboard(hand_results, fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV)
    assert rep.merged == ("a", "b", "c") and len(rep.skipped) == len(MALFORMED) + 2
    long = pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")
    assert sorted(set(long["submission"].to_list())) == ["a", "b", "c"]  # nothing of the skipped merged
    listed = json.loads((tmp_path / "lb" / "skipped.json").read_text())
    assert {d["folder"] for d in listed} == set(why)
    readme = (tmp_path / "lb" / "README.md").read_text()
    assert "## Skipped results folders" in readme and "`old_eval` | stale" in readme
    assert "old_eval" in (tmp_path / "lb" / "site" / "index.html").read_text()

    rc = main(["leaderboard", "--results", str(hand_results), "--dataset", str(tmp_path / "data"),
               "--out", str(tmp_path / "lb2"), "--strict", "--evaluator-version", EV])
    assert rc == 2 and (tmp_path / "lb2" / "README.md").exists()
    assert main(["leaderboard", "--results", str(tmp_path / "nope"), "--dataset", str(tmp_path / "data"),
                 "--out", str(tmp_path / "lb3"), "--evaluator-version", EV]) == 2
    assert main(["leaderboard", "--results", str(hand_results), "--dataset", str(tmp_path / "nodata"),
                 "--out", str(tmp_path / "lb3"), "--evaluator-version", EV]) == 2
    assert not (tmp_path / "lb3").exists()


def test_markdown_marks_collapse_threshold_and_intervals(hand_results, tmp_path):
    entries, skipped = collect_results(hand_results, Expectation(DIGEST, EV))
    md = render_markdown(build_board(entries, skipped, Expectation(DIGEST, EV)))
    assert "## sar · demo" in md
    assert "| Alpha (τ 0.250) | Bravo (τ 0.400) | Charlie (τ 0.400) |" in md
    line = next(ln for ln in md.splitlines() if ln.startswith("| `low_light_s3` | storm | 3 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:] == ["**0.000** [0.000, 0.000] ⛔", "**0.000** [0.000, 0.000] ⛔", "0.050 [0.010, 0.090]"]
    assert "0.800 [0.750, 0.850]" in md  # clean Alpha with its interval
    assert "1. {Alpha (self-reported), Bravo (self-reported)} > 3. Charlie (self-reported)" in md  # tied group
    assert "floor: worst Recall (where)" in md and "0.000 [0.000, 0.000] at `motion_blur_s3`, `low_light_s3`" in md
    assert "flood s1 (2)" in md and "0.720 (0.700–0.740)" in md
    # each derived view is introduced by its heading, which says what it aggregates
    fam = md.index("### Per-family summary of Recall (beside, not instead of, the cells above)")
    assert fam < md.index("flood s1 (2)")
    assert md.index("### Order within each condition (Recall)") < md.index("1. {Alpha (self-reported), Bravo")


def test_escaping_of_submitter_text(tmp_path):
    evil = "<script>alert(1)</script>"
    root = tmp_path / "results"
    write_result(root, "evil", [row("evil", c, "recall", *v) for c, v in HAND["a"].items()],
                 model=evil, team='"><img src=x onerror=alert(2)>', description=evil)
    write_result(root, "b", hand_rows("b"), model="Bravo")
    write_result(root, "c", hand_rows("c"), model="costs $5 and $x^2$")  # not mathtext in the plots
    build_leaderboard(root, fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV)
    pages = list((tmp_path / "lb" / "site").rglob("*.html"))
    assert len(pages) == 4
    plots = tmp_path / "lb" / "site" / "plots"
    assert all(evil not in p.read_text() for p in plots.glob("*.svg"))
    recall = (plots / "curves-sar-demo-recall.svg").read_text()  # legend text of all three models
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in recall and "costs $5 and $x^2$" in recall
    for page in pages:
        text = page.read_text()
        assert evil not in text and "<img src=x" not in text
        assert text.count("<script") == 1  # only the page's own sorting script
    index = (tmp_path / "lb" / "site" / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    model_page = (tmp_path / "lb" / "site" / "models" / "evil.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in model_page  # description in the provenance, as text
    readme = (tmp_path / "lb" / "README.md").read_text()
    assert evil not in readme and "&lt;script&gt;alert(1)&lt;/script&gt;" in readme
    assert md_escape("a|b") == "a\\|b" and md_escape("x\ny") == "x y"
    assert md_code("a|b`c") == "`` a\\|b`c ``"  # code spans are literal: only pipes and fences need care


def test_build_is_deterministic_and_idempotent(hand_results, tmp_path):
    data = fake_dataset(tmp_path / "data")
    make_bad_folders(hand_results)
    one = build_leaderboard(hand_results, data, tmp_path / "one", evaluator_version=EV)
    two = build_leaderboard(hand_results, data, tmp_path / "two", evaluator_version=EV)

    def snapshot(root: Path) -> dict:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    first = snapshot(tmp_path / "one")
    assert first == snapshot(tmp_path / "two") and one.files == two.files
    assert {"leaderboard.parquet", "README.md", "skipped.json", "views/ranks.parquet", "site/index.html",
            "site/models/a.html"} <= set(first)
    assert any(k.startswith("site/plots/") and k.endswith(".svg") for k in first)
    (tmp_path / "one" / "stray.txt").write_text("left over")
    build_leaderboard(hand_results, data, tmp_path / "one", evaluator_version=EV)  # rebuild in place: same bytes, nothing stale
    assert snapshot(tmp_path / "one") == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "one", "results", "two"]  # no staging left
    svg = next(v for k, v in first.items() if k.endswith(".svg")).decode()
    assert "<dc:date>" not in svg and not re.search(r"20\d\d-\d\d-\d\d", svg)
    html = first["site/index.html"].decode()
    assert not re.search(r"20\d\d-\d\d-\d\d", html)
    # no relative_drop_recall from the evaluator: the drop view fills the tab, as points without interval
    table = html[html.index('id="heat-sar-demo-relative_drop_recall"'):]
    row_a = table[table.index('data-submission="a"'):table.index("</tr>", table.index('data-submission="a"'))]
    cell = row_a[row_a.index('data-config="water_glare_s1"'):]
    assert cell.index('<span class="v">0.125</span><span class="ci"></span>') < cell.index("</td>")


def test_empty_results_give_an_empty_board(tmp_path):
    (tmp_path / "results").mkdir()
    rep = build_leaderboard(tmp_path / "results", fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV)
    assert rep.merged == () and "No current results yet." in (tmp_path / "lb" / "README.md").read_text()
    assert pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet").height == 0
    assert "No current results yet." in (tmp_path / "lb" / "site" / "index.html").read_text()


def test_stratified_rows_are_kept_but_views_use_the_pooled_cell(tmp_path):
    def fs(sub, config, level, metric, value, t=None, stratum="all"):
        return {**row(sub, config, metric, value, value - 0.01, value + 0.01, source="firespread",
                      track="firespread"), "corruption": "stochasticity", "family": "firespread",
                "severity": level, "t": t, "stratum": stratum, "n_units": 8}

    root = tmp_path / "results"
    for sub, shift in (("p", 0.0), ("q", 0.3)):
        write_result(root, sub, [fs(sub, "firespread_s10", 10, "brier", 0.10 + shift),
                                 fs(sub, "firespread_s10", 10, "brier", 0.90, t=3),  # one frame: worse
                                 fs(sub, "firespread_s10", 10, "brier", 0.01, stratum="dice:high"),
                                 fs(sub, "firespread_s30", 30, "brier", 0.20 + shift)], track="firespread",
                     threshold=None)
    write_result(root, "dup", [fs("dup", "firespread_s10", 10, "brier", 0.1, t=3)] * 2, track="firespread")
    entries, skipped = collect_results(root, Expectation(DIGEST, EV))
    assert [e.folder for e in entries] == ["p", "q"]
    assert skipped[0].folder == "dup" and "duplicate rows" in skipped[0].reason and "t=3" in skipped[0].reason
    board = build_board(entries, skipped, Expectation(DIGEST, EV))
    assert board.long.height == 8  # every row kept, frames and strata included
    floor = {r["submission"]: r for r in board.floors.iter_rows(named=True)}
    assert floor["p"]["floor"] == pytest.approx(0.20) and floor["p"]["at"] == ["firespread_s30"]  # not the frame
    fam = board.families.filter((pl.col("submission") == "p") & pl.col("severity").is_null()).row(0, named=True)
    assert fam["family"] == "firespread" and fam["mean"] == pytest.approx(0.15) and fam["n_conditions"] == 2
    assert board.ranks.filter(pl.col("config") == "firespread_s10")["submission"].to_list() == ["p", "q"]
    png = b"\x89PNG\r\n\x1a\n not a real figure"
    (root / "p" / "calibration.png").write_bytes(png)  # the evaluator's figure travels to the model page
    build_leaderboard(root, fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV)
    page = (tmp_path / "lb" / "site" / "models" / "p.html").read_text()
    assert "Per-frame and stratified rows</b> (2)" in page and "dice:high" in page
    assert '<img src="p-calibration.png"' in page
    assert (tmp_path / "lb" / "site" / "models" / "p-calibration.png").read_bytes() == png
    md = (tmp_path / "lb" / "README.md").read_text()
    assert "### F2S Brier per condition" in md and "0.100 [0.090, 0.110]" in md and "0.900" not in md


def test_metric_directions_colour_and_rank_the_right_way():
    """Seed 002's effectiveness is the corruption's: higher hurts the model, as do every
    relative drop and the WARP loss; recall by size and image-level scores are higher-better."""
    from aegisbench.leaderboard.aggregate import direction
    for m in ("effectiveness", "effectiveness_size_small", "relative_drop_f1", "relative_drop_map50",
              "warp_map_loss", "time_to_detect_frames", "fp", "brier", "ece"):
        assert direction(m) == -1, m
    for m in ("recall", "recall_small", "image_f1", "map50", "average_precision", "loc_n_both"):
        assert direction(m) == 1, m
    for m in ("frozen_threshold", "ece_floor", "oracle_brier", "brier_uncertainty", "f1_sd_maps"):
        assert direction(m) is None, m  # registered as unordered: reference values and spreads
    assert direction("n_images") is None and direction("f2r_f1") is None  # not registered: no order


def test_markdown_warp_section_reports_positive_loss_lower_is_better(tmp_path):
    root = tmp_path / "results"
    rows = [row("w", "clean", "recall", 0.6, 0.5, 0.7, track="smoke"),
            row("w", "warp_noise_100", "recall", 0.5, 0.4, 0.6, track="smoke"),
            row("w", "warp_noise_100", "warp_map_loss", 3.3, track="smoke"),
            row("w", "warp_noise_400", "warp_map_loss", 94.7, track="smoke"),
            row("w", "warp_patch", "gamma", 0.40, 0.35, 0.46, track="smoke"),
            row("w", "warp_patch", "alpha", 0.01, 0.0, 0.03, track="smoke")]
    write_result(root, "w", rows, model="Whiskey", track="smoke")
    entries, skipped = collect_results(root, Expectation(DIGEST, EV))
    md = render_markdown(build_board(entries, skipped, Expectation(DIGEST, EV)))
    warp = md[md.index("### WARP (seed 000)"):]
    assert "**lower is better**" in warp and "a positive percentage" in warp
    assert "| `warp_noise_400` | 94.700 |" in warp and "| `warp_noise_100` | 3.300 |" in warp
    assert "| γ: deceiving detections per patch position | 0.400 [0.350, 0.460] |" in warp
    assert "| β: negative image turned positive | — |" in warp  # not reported: no cell, no number
