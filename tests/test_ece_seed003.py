"""Seed 003's ECE beside ours (issue 34 item 5): ``ece_seed003`` is the mean over maps of each
map's ECE over 15 equal-width bins, over the maps whose outcomes hold both classes, as the
seed's code computes it (``calibration.get_ece`` per sample, from the ``uncertainty-calibration``
package, which is the independent implementation here); the pooled ``ece`` stands beside it."""

from __future__ import annotations

import calibration as cal  # uncertainty-calibration: what seed 003's code imports
import numpy as np
import pytest

from aegisbench import metrics as M
from aegisbench.evaluation.firespread_cells import CellStats
from aegisbench.evaluation.firespread_scoring import MapSet, ScoreConfig, score_mapset


def _maps(seed: int, n: int = 40, px: int = 96):
    """Forecasts with ties on the 15-bin edges k/15 (and 0, 1), outcomes drawn from them; a few
    maps with one outcome only (all unburnt, all burnt)."""
    rng = np.random.default_rng(seed)
    p = np.where(rng.random((n, px)) < 0.5, rng.integers(0, 16, (n, px)) / 15, np.round(rng.random((n, px)), 3))
    y = rng.random((n, px)) < p
    y[3], y[7] = False, True
    return p, y


def _seed_ece(p, y, valid=None) -> np.ndarray:
    """get_ece on every map with both outcomes (NaN otherwise), as the seed's evaluation loop does."""
    out = []
    for i in range(len(p)):
        v = np.ones(p.shape[1], bool) if valid is None else valid[i]
        t = y[i][v].astype(int)
        out.append(cal.get_ece(p[i][v], t) if np.unique(t).size > 1 else np.nan)
    return np.array(out)


def test_hand_computed_map():
    # 15 bins: 0.0 and 1/15 share bin 0 (right-closed), 0.5 is bin 7, 1.0 bin 14
    p = np.array([[0.0, 1 / 15, 0.5, 0.5, 1.0, 1.0]])
    y = np.array([[0, 1, 0, 1, 1, 0]], bool)
    # bin 0: |(0 + 1/15) - 1| = 14/15; bin 7: |1 - 1| = 0; bin 14: |2 - 1| = 1; over N = 6
    assert M.ece_per_map(p, y)[0] == pytest.approx((14 / 15 + 1) / 6, abs=1e-15)
    assert cal.get_ece(p[0], y[0].astype(int)) == pytest.approx((14 / 15 + 1) / 6, abs=1e-15)
    assert np.isnan(M.ece_per_map(p, np.zeros_like(y))[0]) and np.isnan(M.ece_per_map(p, np.ones_like(y))[0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_map_ece_equals_the_calibration_package(seed):
    p, y = _maps(seed)
    ours, theirs = M.ece_per_map(p, y), _seed_ece(p, y)
    assert np.array_equal(np.isnan(ours), np.isnan(theirs)) and np.isnan(ours[[3, 7]]).all()
    assert ours == pytest.approx(theirs, abs=1e-12, nan_ok=True)
    valid = np.random.default_rng(seed).random(p.shape) < 0.8  # NDWS: masked cells are left out
    assert M.ece_per_map(p, y, valid) == pytest.approx(_seed_ece(p, y, valid), abs=1e-12, nan_ok=True)
    assert M.ece_per_map(p.astype(np.float16), y) == pytest.approx(
        _seed_ece(p.astype(np.float16).astype(np.float64), y), abs=1e-12, nan_ok=True)


def test_scored_beside_the_pooled_ece_with_intervals_over_units():
    p, y = _maps(5, n=48)
    unit, t = np.repeat(np.arange(6), 8), np.tile(np.arange(1, 5), 12)
    rows, _ = score_mapset(MapSet(p=p, y=y, unit=unit, t=t), ScoreConfig(n_boot=200), ("seed003",))
    cell = {(r["t"], r["stratum"], r["metric"]): r for r in rows}
    ref = _seed_ece(p, y)
    ok = np.isfinite(ref)
    r = cell[(None, "all", "ece_seed003")]
    assert r["value"] == pytest.approx(ref[ok].mean(), abs=1e-12) and r["n"] == ok.sum() == 46
    assert r["lo"] <= r["value"] <= r["hi"] and r["lo"] < r["hi"]
    assert cell[(None, "all", "ece")]["value"] == pytest.approx(M.expected_calibration_error(p, y, 10), abs=1e-12)
    assert cell[(None, "all", "ece")]["n"] == p.size  # the pooled ECE counts pixels, seed 003's maps
    for frame in range(1, 5):
        sel = (t == frame) & ok
        assert cell[(frame, "all", "ece_seed003")]["value"] == pytest.approx(ref[sel].mean(), abs=1e-12)
    # metrics.parquet order: seed 003's ECE right after ours
    names = [m for (tt, s, m) in cell if tt is None and s == "all"]
    assert names.index("ece_seed003") == names.index("ece") + 1


def test_bootstrap_reweighting_equals_the_mean_over_the_resampled_maps():
    p, y = _maps(7, n=20)
    unit = np.repeat(np.arange(5), 4)
    per_map = M.ece_per_map(p, y)
    cell = CellStats(p.ravel(), y.ravel(), np.repeat(unit, p.shape[1]), None, 5, ScoreConfig(), maps=(per_map, unit))
    w = np.array([0, 3, 1, 0, 2], float)
    maps = np.concatenate([np.flatnonzero(unit == k) for k in range(5) for _ in range(int(w[k]))])
    ref = _seed_ece(p[maps], y[maps])
    assert cell.resampled(w)["ece_seed003"] == pytest.approx(np.nanmean(ref), abs=1e-12)
    assert cell.resampled(np.ones(5)) == pytest.approx(cell.point(), abs=1e-12)


def test_a_cell_without_a_two_class_map_is_null_0_over_0():
    p = np.full((4, 16), 0.3)
    y = np.zeros((4, 16), bool)
    y[2:] = True  # every map has one outcome only
    rows, _ = score_mapset(MapSet(p=p, y=y, unit=np.array([0, 0, 1, 1])), ScoreConfig(n_boot=20), ("none",))
    r = next(r for r in rows if r["metric"] == "ece_seed003")
    assert (r["value"], r["lo"], r["hi"], r["n"], r["note"]) == (None, None, None, 0, M.ZERO_DIVISION)


def test_registered_and_shown_beside_ece():
    from aegisbench.leaderboard import firespread_report as report
    from aegisbench.leaderboard import tables
    spec = M.REGISTRY["ece_seed003"]
    assert spec.tracks == ("firespread",) and spec.direction == M.LOWER and spec.interval and spec.bounds == (0, 1)
    for shown in (tables.F2S_HEAT, report.TABLE_METRICS):
        assert shown.index("ece_seed003") == shown.index("ece") + 1
