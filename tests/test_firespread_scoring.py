"""Fire-spread scoring: cross-checks with scikit-learn, exact bootstrap re-weighting,
strata, and the ensemble oracle's calibration across S-levels."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import calibration_curve as sk_calibration_curve
from sklearn.metrics import (auc, average_precision_score, brier_score_loss, f1_score, precision_recall_curve,
                             precision_score, recall_score)

from aegisbench.firespread.ensemble import burn_counts, burnt_masks, dice
from aegisbench.firespread.layout import make_initial_condition
from aegisbench.firespread.model import SeedModel, simulate
from aegisbench.params.firespread import FirespreadParams
from aegisbench.evaluation.firespread_cells import CellStats, distinct_ranks
from aegisbench.evaluation.firespread_scoring import MapSet, ScoreConfig, ap_rows, dice_label, score_mapset, var_label
from aegisbench.metrics import weighted_pr_areas
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
    cell = CellStats(p, y, u, None, 5, ScoreConfig(threshold=0.5, n_bins=10))
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
    # seed 003's convention: burnt iff p > 0.5 (cells at exactly 0.5 are not burnt)
    assert (p == 0.5).sum() > 50
    assert pt["precision"] == pytest.approx(precision_score(y, p > 0.5), abs=1e-12)
    assert pt["recall"] == pytest.approx(recall_score(y, p > 0.5), abs=1e-12)
    assert pt["f1"] == pytest.approx(f1_score(y, p > 0.5), abs=1e-12)
    dec = {k: pt[f"brier_{k}"] for k in ("reliability", "resolution", "uncertainty", "residual")}
    assert pt["brier"] == pytest.approx(dec["reliability"] - dec["resolution"] + dec["uncertainty"] + dec["residual"])


@pytest.mark.parametrize("seed", [3, 4])
def test_bootstrap_reweighting_equals_rescoring_the_resample(seed):
    p, y, u = random_data(seed, 3000)
    o = np.random.default_rng(seed).random(len(p))
    cell = CellStats(p, y, u, o, 5, ScoreConfig())
    assert cell.resampled(np.ones(5)) == pytest.approx(cell.point(), abs=1e-12)
    w = np.array([0, 3, 1, 0, 1], float)
    idx = np.concatenate([np.flatnonzero(u == k) for k in range(5) for _ in range(int(w[k]))])
    again = CellStats(p[idx], y[idx], np.zeros(len(idx), int), o[idx], 1, ScoreConfig()).point()
    assert cell.resampled(w) == pytest.approx(again, abs=1e-12)


def test_weighted_pr_areas_without_positives_and_ap_rows():
    assert weighted_pr_areas(np.zeros(3), np.array([1.0, 2, 3]))[0] == 0.0
    rng = np.random.default_rng(5)
    P = np.round(rng.random((30, 64)), 1)
    Y = rng.random((30, 64)) < P
    Y[0] = False
    ref = [M.average_precision(P[i], Y[i]) for i in range(30)]
    assert np.allclose(ap_rows(P, Y), ref, atol=1e-12)


def _old_ap_rows(p, y):
    """ap_rows as it was before it took its precision and 0/0 rule from aegisbench.stats.ratio."""
    p = np.asarray(p, np.float64)
    y = np.asarray(y, bool)
    order = np.argsort(-p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    ys = np.take_along_axis(y, order, 1).astype(np.float64)
    tps = np.cumsum(ys, axis=1)
    fps = np.arange(1, p.shape[1] + 1)[None, :] - tps
    end = np.ones_like(ps, bool)
    end[:, :-1] = ps[:, :-1] != ps[:, 1:]
    pos = tps[:, -1:]
    prec = np.where(end, tps / np.maximum(tps + fps, 1), 0.0)
    tp_end = np.where(end, tps, 0.0)
    prev = np.concatenate([np.zeros((len(p), 1)), np.maximum.accumulate(tp_end, axis=1)[:, :-1]], axis=1)
    gain = np.where(end, tps - prev, 0.0)
    return np.where(pos[:, 0] > 0, (gain * prec).sum(axis=1) / np.maximum(pos[:, 0], 1), 0.0)


def test_ap_rows_is_bit_identical_to_the_formula_it_replaced():
    rng = np.random.default_rng(11)
    for i in range(60):
        n = int(rng.integers(1, 300))
        P = (rng.integers(0, 21, (8, n)) / 20) if i % 2 else rng.random((8, n)).astype(np.float32)
        Y = rng.random(P.shape) < P
        Y[i % 8] = False
        assert ap_rows(P, Y).tobytes() == _old_ap_rows(P, Y).tobytes()


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
    m = SeedModel.from_params(p)
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
        pt = CellStats(np.concatenate(ps), np.concatenate(ys), np.concatenate(us), None, 3, ScoreConfig()).point()
        ece_same[s], recall[s] = pt["ece"], pt["recall"]
        ece_heldout[s] = CellStats(np.concatenate(ps2), np.concatenate(ys2), np.concatenate(us2), None, 3,
                               ScoreConfig()).point()["ece"]
    assert all(v < 1e-9 for v in ece_same.values()), ece_same  # calibrated by construction on its own ensemble
    assert all(v < 0.02 for v in ece_heldout.values())  # and on realizations it has not seen
    assert recall[0] == 1.0 and recall[10] < 0.999 and recall[30] < recall[10]


def test_ece_floor_is_the_statistics_own_ece_on_its_own_realizations():
    # outcomes drawn from the statistic itself: ece_floor equals the ECE of the oracle against
    # them, computed directly; the submission's own forecast does not enter it
    rng = np.random.default_rng(11)
    n_maps, hw = 24, 64
    o = rng.random((n_maps, hw)).round(2)
    y = rng.random((n_maps, hw)) < o
    yf = rng.random((n_maps, hw)) < o
    unit = np.arange(n_maps) % 3
    rows = {}
    for p in (o, np.zeros_like(o) + 0.3):
        ms = MapSet(p=p, y=y, unit=unit, t=np.repeat([1, 2], 12), oracle=o, floor_y=yf)
        got, _ = score_mapset(ms, ScoreConfig(n_boot=50, n_bins=15), ("floor",))
        rows[p is o] = {(r["t"], r["stratum"], r["metric"]): r for r in got}
    key = (None, "all", "ece_floor")
    assert rows[True][key]["value"] == pytest.approx(M.expected_calibration_error(o.ravel(), yf.ravel(), 15),
                                                     abs=1e-12)
    assert rows[True][key]["value"] == rows[False][key]["value"]
    assert rows[True][key]["lo"] <= rows[True][key]["value"] <= rows[True][key]["hi"]
    # the oracle scored on y is as far from 0 as the floor is: both are finite-sample noise
    ece = rows[True][(None, "all", "ece")]["value"]
    assert ece == pytest.approx(M.expected_calibration_error(o.ravel(), y.ravel(), 15), abs=1e-12)
    assert (1, "all", "ece_floor") in rows[True]
    with pytest.raises(ValueError, match="oracle"):
        MapSet(p=o, y=y, unit=unit, floor_y=yf)


def test_cells_pooled_from_atoms_equal_cells_scored_directly():
    # score_mapset gathers each map once (atoms = maps in the same frame and strata) and pools
    # the sufficient statistics; every cell must equal the same pixels scored on their own
    rng = np.random.default_rng(5)
    n_maps, hw = 60, 48
    p = (rng.integers(0, 40, (n_maps, hw)) / 39).astype(np.float32)  # ties across maps
    y = rng.random((n_maps, hw)) < p
    o = np.clip(p + rng.normal(0, 0.05, p.shape), 0, 1).round(3)
    yf = rng.random((n_maps, hw)) < o
    t = np.tile(np.arange(1, 6), 12)
    var = rng.choice([0.0, 0.5, 5.0, 50.0], n_maps)
    dc = rng.random(n_maps)
    ms = MapSet(p=p, y=y, unit=np.arange(n_maps) % 4, t=t, var_z=var, dice=dc, oracle=o, floor_y=yf)
    cfg = ScoreConfig(n_boot=20)
    rows, _ = score_mapset(ms, cfg, ("atoms",))
    got = {(r["t"], r["stratum"], r["metric"]): r["value"] for r in rows}
    labels = {"var": np.array([var_label(v) for v in var]), "dice": np.array([dice_label(d) for d in dc])}
    cases = [(None, "all", np.arange(n_maps)), (3, "all", np.flatnonzero(t == 3))]
    cases += [(None, lab, np.flatnonzero(labels["var"] == lab)) for lab in set(labels["var"])]
    cases += [(None, lab, np.flatnonzero(labels["dice"] == lab)) for lab in set(labels["dice"])]
    for tt, stratum, sel in cases:
        u = np.repeat(ms.unit[sel], hw)
        direct = CellStats(p[sel].ravel(), y[sel].ravel(), u, o[sel].ravel(), 4, cfg, yf[sel].ravel()).point()
        for metric, value in direct.items():
            assert got[(tt, stratum, metric)] == pytest.approx(value, abs=1e-12), (tt, stratum, metric)


def test_distinct_ranks_equal_numpy_unique():
    rng = np.random.default_rng(3)
    for p in (rng.random((30, 20)).astype(np.float16).astype(np.float32),  # the float16 path
              rng.random((30, 20)).astype(np.float32), rng.random(50), np.array([0.0, 1.0, 0.0], np.float16)):
        s, r = distinct_ranks(p)
        s2, r2 = np.unique(p, return_inverse=True)
        assert np.array_equal(s, s2) and s.dtype == p.dtype and np.array_equal(r, np.asarray(r2).reshape(p.shape))
