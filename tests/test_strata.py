"""``evaluate --stratify COLUMN``: every condition row repeated per stratum with its own
bootstrap interval over the stratum's images, the headline rows untouched, unknown
columns refused; and the leaderboard's strata tables beside the conditions."""

from __future__ import annotations

import json

import polars as pl
import pytest

from _evalkit import write_submission
from _metakit import CONDITION, N_TEST, SOURCE, gt_detections, meta_repo, time_of
from aegisbench.cli import main
from aegisbench.evaluation.bootstrap import BootstrapParams, Resamples, condition_intervals
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.detection import SplitScore
from aegisbench.evaluation.evaluator import EvaluationParams
from aegisbench.evaluation.strata import stratum_label
from aegisbench.evaluation.submission import validate_submission
from aegisbench.leaderboard.build import build_leaderboard

B = 200
STRATA = ["time=day", "time=night", "time=(none)"]


@pytest.fixture(scope="module")
def meta_index(tmp_path_factory):
    return DatasetIndex(meta_repo(tmp_path_factory))


def night_missed(split, image_id, meta):
    """The model finds nothing on the night test images, nor on one day image."""
    return split == SOURCE and (meta.get("time") == "night" or image_id == f"{SOURCE}_test_002")


@pytest.fixture(scope="module")
def evaluated(meta_index, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("strata")
    sub = write_submission(tmp / "nightblind", meta_index, "sar", gt_detections(meta_index, drop=night_missed),
                           name="night blind")
    args = ["evaluate", str(sub), "--dataset", str(meta_index.repo), "--no-verify", "--n-resamples", str(B)]
    assert main([*args, "--out", str(tmp / "plain")]) == 0
    assert main([*args, "--out", str(tmp / "strat"), "--stratify", "time"]) == 0
    return tmp, sub


def rows(folder) -> pl.DataFrame:
    return pl.read_parquet(folder / "metrics.parquet")


def test_rows_per_stratum_with_intervals_and_stratum_image_counts(evaluated, meta_index):
    tmp, sub = evaluated
    df = rows(tmp / "strat" / "nightblind")
    strat = df.filter(pl.col("stratum").is_not_null())
    assert sorted(set(strat["stratum"].to_list())) == sorted(STRATA)
    gt = meta_index.gt("clean", SOURCE)
    n_img = {stratum_label("time", t): int(sum(time_of("test", i) == t for i in range(N_TEST)))
             for t in ("day", "night", None)}
    assert n_img == {"time=day": 4, "time=night": 4, "time=(none)": 1} and len(gt) == N_TEST
    headline = df.filter(pl.col("stratum").is_null())
    cond_metrics = {(r["config"], r["metric"]) for r in headline.iter_rows(named=True) if r["metric"][:4] != "val_"
                    and r["metric"] not in ("frozen_threshold", "label_match")}  # per source, not per condition
    for label in STRATA:
        part = strat.filter(pl.col("stratum") == label)
        assert {(r["config"], r["metric"]) for r in part.iter_rows(named=True)} == cond_metrics, label
        cell = {(r["config"], r["metric"]): r for r in part.iter_rows(named=True)}
        for config in ("clean", CONDITION):
            assert cell[(config, "map50")]["n"] == n_img[label]
            n_boxes = int(sum(gt.n_gt()[k] for k in range(N_TEST)
                              if stratum_label("time", gt.meta[k].get("time")) == label))
            assert cell[(config, "recall")]["n"] == n_boxes
            for metric in ("recall", "map50"):
                r = cell[(config, metric)]
                assert r["lo"] is not None and r["lo"] - 1e-6 <= r["value"] <= r["hi"] + 1e-6  # AP50: float32
    night = {r["config"]: r for r in strat.filter((pl.col("stratum") == "time=night") & (pl.col("metric") == "recall"))
             .iter_rows(named=True)}
    day = {r["config"]: r for r in strat.filter((pl.col("stratum") == "time=day") & (pl.col("metric") == "recall"))
           .iter_rows(named=True)}
    assert night["clean"]["value"] == 0.0 and (night["clean"]["lo"], night["clean"]["hi"]) == (0.0, 0.0)
    assert 0.5 < day["clean"]["value"] < 1.0 and day["clean"]["lo"] < day["clean"]["hi"]
    pooled = headline.filter((pl.col("config") == "clean") & (pl.col("metric") == "recall"))["value"][0]
    assert 0.0 < pooled < 1.0  # the headline cell pools both
    prov = json.loads((tmp / "strat" / "nightblind" / "provenance.json").read_text())
    assert prov["strata"]["columns"] == ["time"] and prov["strata"]["images"] == {SOURCE: n_img}
    assert prov["params"]["stratify"] == ["time"]
    assert any(d.get("stratum") == "time=night" for d in prov["degenerate_intervals"])


def test_headline_rows_and_threshold_are_those_of_the_unstratified_run(evaluated):
    tmp, _ = evaluated
    plain, strat = rows(tmp / "plain" / "nightblind"), rows(tmp / "strat" / "nightblind")
    assert plain["stratum"].null_count() == plain.height
    assert strat.filter(pl.col("stratum").is_null()).equals(plain)  # same rows, same order
    p_prov = json.loads((tmp / "plain" / "nightblind" / "provenance.json").read_text())
    s_prov = json.loads((tmp / "strat" / "nightblind" / "provenance.json").read_text())
    assert p_prov["frozen_threshold"] == s_prov["frozen_threshold"]
    assert "strata" not in p_prov and "stratify" not in p_prov["params"]
    assert "stratify" not in EvaluationParams().as_dict()
    assert EvaluationParams().digest() == EvaluationParams(stratify=()).digest() != \
        EvaluationParams(stratify=("time",)).digest()


def test_stratum_interval_is_the_bootstrap_over_the_stratum_images(evaluated, meta_index):
    tmp, sub_folder = evaluated
    sub = validate_submission(sub_folder, meta_index)
    prov = json.loads((tmp / "strat" / "nightblind" / "provenance.json").read_text())
    thr = prov["frozen_threshold"][SOURCE]
    gt = meta_index.gt("clean", SOURCE)
    score = SplitScore.of(sub, "clean", gt)
    df = rows(tmp / "strat" / "nightblind")
    for label in ("time=day", "time=night"):
        pos = [k for k in range(len(gt)) if stratum_label("time", gt.meta[k].get("time")) == label]
        part = score.subset(pos)
        key = ("aegisbench-bootstrap", meta_index.digest, sub.id, SOURCE, "stratum", label)
        ci = condition_intervals(part.match, thr, resamples=Resamples.draw(len(pos), key, B),
                                 params=BootstrapParams(n_resamples=B))
        cell = {r["metric"]: r for r in df.filter((pl.col("stratum") == label) & (pl.col("config") == "clean"))
                .iter_rows(named=True)}
        for metric in ("recall", "precision", "map50"):
            if cell[metric]["value"] is None:  # undefined (0/0): no interval to compare
                continue
            assert (cell[metric]["lo"], cell[metric]["hi"]) == pytest.approx(ci[metric]), (label, metric)
        if label == "time=day":
            assert cell["recall"]["lo"] < cell["recall"]["hi"]  # a real interval, not a degenerate one
        counts = part.match.counts(thr).sum(axis=0)
        assert cell["tp"]["value"] == counts[0] and cell["fn"]["value"] == counts[2]


def test_unknown_column_is_refused_with_one_line(evaluated, meta_index, capsys):
    tmp, sub = evaluated
    rc = main(["evaluate", str(sub), "--dataset", str(meta_index.repo), "--no-verify", "--n-resamples", "20",
               "--out", str(tmp / "bad"), "--stratify", "altitude"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "--stratify" in err[0] and "'altitude'" in err[0] and "time" in err[0]
    assert not (tmp / "bad").exists()
    rc = main(["evaluate", str(sub), "--dataset", str(meta_index.repo), "--no-verify", "--n-resamples", "20",
               "--out", str(tmp / "bad"), "--stratify", "time", "--stratify", "time"])
    assert rc == 2 and not (tmp / "bad").exists()


def test_leaderboard_shows_strata_beside_conditions_not_in_the_headline(evaluated, meta_index):
    tmp, _ = evaluated
    out = tmp / "lb"
    build_leaderboard(tmp / "strat", meta_index.repo, out)
    md = (out / "README.md").read_text()
    assert "### Strata beside conditions" in md
    table = md.split("#### Recall by stratum")[1].split("\n\n")[1].splitlines()
    assert table[0].startswith("| stratum | images | `clean` | `" + CONDITION)
    body = {line.split(" | ")[0][2:]: line for line in table[2:]}
    assert list(body) == ["`time=day`", "`time=night`", "`time=(none)`"]
    assert "| 1 | 1.000 [1.000, 1.000]" in body["`time=(none)`"] and "0.000 [0.000, 0.000]" in body["`time=night`"]
    day = rows(tmp / "strat" / "nightblind").filter((pl.col("stratum") == "time=day") & (pl.col("config") == "clean")
                                                     & (pl.col("metric") == "recall")).row(0, named=True)
    assert f"| 4 | {day['value']:.3f} [{day['lo']:.3f}, {day['hi']:.3f}]" in body["`time=day`"]
    # the headline recall cell of clean is the pooled one
    df = rows(tmp / "strat" / "nightblind").filter(pl.col("stratum").is_null() & (pl.col("config") == "clean")
                                                    & (pl.col("metric") == "recall"))
    pooled = f"{df['value'][0]:.3f} [{df['lo'][0]:.3f}, {df['hi'][0]:.3f}]"
    assert 0 < df["value"][0] < 1 and f"| `clean` |  | 0 | {pooled} |" in md.split("### Strata")[0]
    html = (out / "site" / "index.html").read_text()
    assert "Strata beside conditions" in html and "time=night" in html
    plain = tmp / "lb_plain"
    build_leaderboard(tmp / "plain", meta_index.repo, plain)
    assert "Strata beside conditions" not in (plain / "README.md").read_text()
    assert "Strata beside conditions" not in (plain / "site" / "index.html").read_text()
