"""The threshold rule of each detection track (issue 34 item 4): the smoke track freezes on
seed 001's grid (0.01..0.20) by default, sar over every clean validation score; the
all-scores rule stays an option; a grid outside [0, 1] is refused in one line naming
``--threshold-grid``, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from _evalkit import write_submission
from aegisbench.cli import main
from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.threshold import RULES, TRACK_RULE, rule_grid
from aegisbench.predictions import Detections

SRC = "synthetic_smoke"
FP_BOX = [1.0, 1.0, 9.0, 9.0]  # far from every GT box of the synthetic sources
# val: every GT box at 0.9 and one false positive per image at 0.12; test: GT at 0.5, false positive at 0.15
VAL, TEST = (0.9, 0.12), (0.5, 0.15)


def _smoke_table(index) -> dict:
    table = {}
    for config, split in index.keys("smoke"):
        gt_score, fp_score = VAL if split.endswith("_val") else TEST
        g = index.gt(config, split)
        for image_id, boxes in zip(g.image_ids, g.boxes):
            b = np.vstack([boxes.reshape(-1, 4), FP_BOX])
            table[(config, split, image_id)] = Detections(b, np.append(np.full(len(boxes), gt_score), fp_score))
    return table


def _metrics(out: Path) -> dict:
    df = pl.read_parquet(out / "metrics.parquet").filter(pl.col("source") == SRC)
    return {(r["config"], r["metric"]): r["value"] for r in df.iter_rows(named=True)}


def test_the_rules_are_declared_once():
    assert TRACK_RULE == {"sar": "scores", "smoke": "seed001"}
    assert set(RULES) == {"scores", "seed001"}
    assert rule_grid("scores") is None
    assert rule_grid("seed001") == tuple(k / 100 for k in range(1, 21))
    with pytest.raises(ValueError, match="seed001"):
        rule_grid("seed01")
    assert EvaluationParams(threshold_grid="seed001").as_dict()["threshold_grid"] == "seed001"
    with pytest.raises(ValueError, match="threshold rule"):
        EvaluationParams(threshold_grid="bogus")
    with pytest.raises(BadInput, match=r"threshold_grid: value 2: must lie in \[0, 1\], got 1.5"):
        EvaluationParams(threshold_grid=(0.5, 1.5))


def test_smoke_freezes_on_seed_001_grid_by_default_and_on_every_score_when_asked(tmp_path, repo, index, capsys):
    folder = write_submission(tmp_path / "smoke_rule", index, "smoke", _smoke_table(index))
    # the pipeline's command: no --threshold-grid
    assert main(["evaluate", str(folder), "--dataset", str(repo), "--results", str(tmp_path / "default"),
                 "--no-verify", "--n-resamples", "20"]) == 0
    assert f"threshold frozen on clean val: {SRC}=0.2" in capsys.readouterr().out
    out = tmp_path / "default" / "smoke_rule"
    prov = json.loads((out / "provenance.json").read_text())
    # val F1 is 2G / (2G + N) at 0.01..0.12 (the false positives at 0.12 kept) and 1 at 0.13..0.20: ties -> 0.20
    assert prov["frozen_threshold"] == {SRC: 0.2} and prov["threshold_selection"]["val_f1"] == {SRC: 1.0}
    sel = prov["threshold_selection"]
    assert (sel["grid"], sel["grid_from"]) == ("seed001", "track default")
    assert sel["candidates"] == [k / 100 for k in range(1, 21)]
    m = _metrics(out)
    n_gt = sum(len(b) for b in index.gt("clean", SRC).boxes)
    n_img = len(index.gt("clean", SRC))
    # test: GT boxes at 0.5 kept, false positives at 0.15 dropped
    assert (m[("clean", "tp")], m[("clean", "fp")], m[("clean", "recall")]) == (n_gt, 0, 1.0)
    assert m[("clean", "frozen_threshold")] == 0.2

    # the all-scores rule, as an option: max F1 at 0.9 (1.0) over 0.12 (2G / (2G + N) < 1)
    scores = EvaluationParams(threshold_grid="scores", bootstrap=BootstrapParams(n_resamples=20))
    out2 = evaluate_submission(folder, repo, tmp_path / "scores", scores, verify=False)
    prov2 = json.loads((out2 / "provenance.json").read_text())
    assert prov2["frozen_threshold"] == {SRC: 0.9}
    sel2 = prov2["threshold_selection"]
    assert (sel2["grid"], sel2["grid_from"], sel2["candidates"]) == (
        "scores", "chosen (evaluate --threshold-grid)", "every distinct clean _val score")
    m2 = _metrics(out2)
    assert (m2[("clean", "tp")], m2[("clean", "fp")], m2[("clean", "recall")]) == (0, 0, 0.0)
    assert m2[("clean", "precision")] is None  # nothing kept: 0/0
    assert n_img > 0 and prov["params_sha256"] != prov2["params_sha256"]


def test_sar_keeps_every_score_by_default(tmp_path, repo, index):
    from _evalkit import gt_table
    table = gt_table(index, "sar", score=0.55)
    out = evaluate_submission(write_submission(tmp_path / "sar_rule", index, "sar", table), repo, tmp_path / "r",
                              EvaluationParams(bootstrap=BootstrapParams(n_resamples=20)), verify=False)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["frozen_threshold"] == {"synthetic_sar": 0.55}  # outside seed 001's grid
    assert prov["threshold_selection"]["grid"] == "scores"


@pytest.mark.parametrize("grid, says", [
    ("0.1,1.5", "--threshold-grid: value 2: must lie in [0, 1], got 1.5"),
    ("-0.05", "--threshold-grid: value 1: must lie in [0, 1], got -0.05"),
    ("0.1,nan", "--threshold-grid: value 2: must lie in [0, 1], got nan"),
    (",", "--threshold-grid: needs at least one threshold in [0, 1]"),
    ("seed01", "got 'seed01' (did you mean 'seed001'?)"),
])
def test_a_grid_outside_the_unit_interval_is_one_line_exit_2_nothing_written(tmp_path, repo, index, capsys,
                                                                             grid, says):
    folder = write_submission(tmp_path / "bad_grid", index, "smoke", _smoke_table(index))
    results = tmp_path / "results"
    assert main(["evaluate", str(folder), "--dataset", str(repo), "--results", str(results), "--no-verify",
                 f"--threshold-grid={grid}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not results.exists()
