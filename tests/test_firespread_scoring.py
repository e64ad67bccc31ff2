"""Fire-spread scoring: cross-checks with scikit-learn, exact bootstrap re-weighting,
strata, and the ensemble oracle's calibration across S-levels."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import calibration_curve as sk_calibration_curve
from sklearn.metrics import average_precision_score, brier_score_loss, precision_recall_curve, auc

from aegisbench.firespread.ensemble import burn_counts, burnt_masks, dice
from aegisbench.firespread.layout import make_initial_condition
from aegisbench.firespread.model import HeatModel, simulate
from aegisbench.firespread.params import FirespreadParams
from aegisbench.firespread.scoring import (MapSet, ScoreConfig, _Cell, ap_rows, dice_label, score_mapset,
                                           var_label, weighted_pr_areas)
from aegisbench import metrics as M  # after scoring: see the import-order note there


def random_data(seed: int, n: int = 4000):
    rng = np.random.default_rng(seed)
    # ties everywhere and values exactly on the bin edges 0, 0.1, ..., 1
    p = np.concatenate([rng.integers(0, 11, n // 2) / 10, np.round(rng.random(n - n // 2), 2)])
    y = rng.random(n) < p
    return p, y, rng.integers(0, 5, n)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_sklearn_with_ties_at_bin_edges(seed):
    p, y, u = random_data(seed)
    cell = _Cell(p, y, u, None, 5, ScoreConfig(threshold=0.5, n_bins=10))
    pt = cell.point()
    assert pt["average_precision"] == pytest.approx(average_precision_score(y, p), abs=1e-12)
    assert pt["average_precision"] == pytest.approx(M.average_precision(p, y), abs=1e-12)
    assert pt["auc_pr_trapezoid"] == pytest.approx(M.auc_pr_trapezoid(p, y), abs=1e-12)
    assert pt["ece"] == pytest.approx(M.expected_calibration_error(p, y, 10), abs=1e-12)
    assert {k: pt[f"brier_{k}"] for k in ("reliability", "resolution", "uncertainty")} == pytest.approx(
        {k: v for k, v in M.brier_decomposition(p, y, 10).items() if k in ("reliability", "resolution", "uncertainty")})
    prec, rec, _ = precision_recall_curve(y, p)
    assert pt["auc_pr_trapezoid"] == pytest.approx(auc(rec, prec), abs=1e-12)
    assert pt["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    prob_true, prob_pred = sk_calibration_curve(y, p, n_bins=10, strategy="uniform")
    ours_true, ours_pred = M.calibration_curve(p, y, 10)
    assert np.allclose(prob_true, ours_true) and np.allclose(prob_pred, ours_pred)
    # ECE over the sklearn bins, with their counts
    binids = np.searchsorted(np.linspace(0, 1, 11)[1:-1], p)
    nk = np.bincount(binids, minlength=10)
    nk = nk[nk > 0]
    assert pt["ece"] == pytest.approx(np.sum(nk / len(p) * np.abs(prob_true - prob_pred)), abs=1e-12)
    tp = np.sum((p >= 0.5) & y)
    assert pt["precision"] == pytest.approx(tp / np.sum(p >= 0.5))
    assert pt["recall"] == pytest.approx(tp / y.sum())
    dec = {k: pt[f"brier_{k}"] for k in ("reliability", "resolution", "uncertainty", "residual")}
    assert pt["brier"] == pytest.approx(dec["reliability"] - dec["resolution"] + dec["uncertainty"] + dec["residual"])


@pytest.mark.parametrize("seed", [3, 4])
def test_bootstrap_reweighting_equals_rescoring_the_resample(seed):
    p, y, u = random_data(seed, 3000)
    o = np.random.default_rng(seed).random(len(p))
    cell = _Cell(p, y, u, o, 5, ScoreConfig())
    assert cell.resampled(np.ones(5)) == pytest.approx(cell.point(), abs=1e-12)
    w = np.array([0, 3, 1, 0, 1], float)
    idx = np.concatenate([np.flatnonzero(u == k) for k in range(5) for _ in range(int(w[k]))])
    again = _Cell(p[idx], y[idx], np.zeros(len(idx), int), o[idx], 1, ScoreConfig()).point()
    assert cell.resampled(w) == pytest.approx(again, abs=1e-12)


def test_weighted_pr_areas_without_positives_and_ap_rows():
    assert weighted_pr_areas(np.zeros(3), np.array([1.0, 2, 3]))[0] == 0.0
    rng = np.random.default_rng(5)
    P = np.round(rng.random((30, 64)), 1)
    Y = rng.random((30, 64)) < P
    Y[0] = False
    ref = [M.average_precision(P[i], Y[i]) for i in range(30)]
    assert np.allclose(ap_rows(P, Y), ref, atol=1e-12)


def test_strata_labels_and_dice_convention():
    assert var_label(0.0) == "var_z:0" and var_label(0.5) == "var_z:(0,1]" and var_label(10.0) == "var_z:(1,10]"
    assert var_label(2e4) == "var_z:>10000"
    assert dice_label(1.0) == "dice:[0.9,1.0]" and dice_label(0.0) == "dice:[0.0,0.1)" and dice_label(0.35) == "dice:[0.3,0.4)"
    e = np.zeros((4, 4), bool)
    assert float(dice(e, e)) == 1.0
    a = e.copy()
    a[0, 0] = True
    assert float(dice(a, e)) == 0.0 and float(dice(a, a)) == 1.0


def test_interval_resamples_units_not_pixels():
    rng = np.random.default_rng(7)
    n_maps, hw = 12, 100
    p = rng.random((n_maps, hw))
    y = rng.random((n_maps, hw)) < p
    ms = MapSet(p=p, y=y, unit=np.zeros(n_maps, int), t=np.repeat([1, 2], 6))
    rows, _ = score_mapset(ms, ScoreConfig(n_boot=100), ("one-unit",))
    for r in rows:
        if not r["metric"].endswith("_sd_maps"):  # a single unit: every resample is the data itself
            assert r["lo"] == pytest.approx(r["value"]) and r["hi"] == pytest.approx(r["value"])
    ms4 = MapSet(p=p, y=y, unit=np.arange(n_maps) % 4, t=np.repeat([1, 2], 6))
    rows4, cal = score_mapset(ms4, ScoreConfig(n_boot=200), ("four",))
    brier = next(r for r in rows4 if r["metric"] == "brier" and r["t"] is None and r["stratum"] == "all")
    assert brier["lo"] < brier["value"] < brier["hi"] and brier["n_units"] == 4 and brier["n"] == n_maps * hw
    assert {r["t"] for r in rows4} == {None, 1, 2}
    assert len(cal["prob_true"]) == len(cal["count"]) and cal["count"].sum() == n_maps * hw


def test_oracle_is_calibrated_against_the_ensemble_while_recall_varies():
    p = FirespreadParams.from_dict({"grid": [20, 20], "realizations": 120})
    m = HeatModel.from_params(p)
    ics = [make_initial_condition(p, "oracle-test", i) for i in range(3)]
    frames = np.arange(6, 24, 3)
    recall, ece_same, ece_heldout = {}, {}, {}
    for s in (0, 10, 30):
        ps, ys, us, ps2, ys2, us2 = [], [], [], [], [], []
        for u, ic in enumerate(ics):
            ens = simulate(ic, m, p.p_ignite(s), ("oracle-test", ic.index, s), range(120))
            prob = burn_counts(ens.ignition_time, frames[-1])[frames] / 120
            masks = burnt_masks(ens.ignition_time, frames)  # (120, T, H, W)
            ps.append(np.broadcast_to(prob, masks.shape).reshape(-1))
            ys.append(masks.reshape(-1))
            us.append(np.full(masks.size, u))
            fresh = simulate(ic, m, p.p_ignite(s), ("oracle-test", ic.index, s), range(120, 180))
            m2 = burnt_masks(fresh.ignition_time, frames)
            ps2.append(np.broadcast_to(prob, m2.shape).reshape(-1))
            ys2.append(m2.reshape(-1))
            us2.append(np.full(m2.size, u))
        pt = _Cell(np.concatenate(ps), np.concatenate(ys), np.concatenate(us), None, 3, ScoreConfig()).point()
        ece_same[s], recall[s] = pt["ece"], pt["recall"]
        ece_heldout[s] = _Cell(np.concatenate(ps2), np.concatenate(ys2), np.concatenate(us2), None, 3,
                               ScoreConfig()).point()["ece"]
    assert all(v < 1e-9 for v in ece_same.values()), ece_same  # calibrated by construction on its own ensemble
    assert all(v < 0.02 for v in ece_heldout.values())  # and on realizations it has not seen
    assert recall[0] == 1.0 and recall[10] < 0.999 and recall[30] < recall[10]
