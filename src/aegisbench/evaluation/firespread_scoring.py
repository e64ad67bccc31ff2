"""Scores of probabilistic fire-spread forecasts: F2R and F2S side by side, stratified,
with 95% bootstrap intervals that resample whole units (initial conditions for the
synthetic track, fire events for Next Day Wildfire Spread), never pixels.

Cells scored for one config (S-level): all forecast frames pooled (``t`` null,
stratum ``all``), each frame ``t`` (stratum ``all``), each macro-variance stratum
``var_z:<bin>`` (``Var[Z_t]`` of the ensemble at the map's frame; seed 003 Fig. 7),
and each Dice stratum ``dice:<bin>`` (Dice between the successive observed masks
``t-1`` and ``t``; two empty masks count as Dice 1 — no progression; seed 003 Table 3).

Metrics (pixels pooled within a cell; a map is ``H x W`` pixels):

* F2R: ``precision``, ``recall``, ``f1`` at the declared threshold (burnt iff
  ``p > threshold``, seed 003's convention; 0/0 = 0), ``average_precision`` (scikit-learn's step-wise AP)
  and, separately, ``auc_pr_trapezoid`` (the trapezoid AUC-PR of the paper);
* F2S: ``brier`` with ``brier_reliability``, ``brier_resolution``,
  ``brier_uncertainty`` and ``brier_residual`` (within-bin spread), ``ece``
  (``n_bins`` uniform right-closed bins, every pixel of the cell pooled: seed 003 uses 10 for
  its calibration curves and 15 in its ``Var[Z_t]`` studies), ``ece_seed003`` beside it (seed
  003's code's ECE: 15 equal-width bins per map, averaged over the maps whose outcomes hold
  both classes; ``n`` counts those maps) and, where the ensemble statistic is known,
  ``oracle_brier`` (the statistic's Brier against the same realizations) and
  ``excess_brier`` = ``brier - oracle_brier``;
* ``ece_floor``: where outcomes drawn from the statistic itself are given (``floor_y``:
  as many realizations of the ensemble the statistic counts, paired map for map), the ECE
  of the statistic against them -- what a perfectly calibrated forecaster scores on the
  same number of equally correlated cells. An ``ece`` inside the floor's interval is
  finite-sample noise, not miscalibration;
* per stratum, the spread over maps of per-map scores (Fig. 7): ``<metric>_sd_maps``
  (no interval; the family ``aegisbench.metrics.SD_MAPS``).

Every metric name is registered in :mod:`aegisbench.metrics` (its direction, bounds and
label live there); a cell whose names are not is refused.

Everything is computed from per-unit sufficient statistics of the pooled pixels
(:class:`~aegisbench.evaluation.firespread_cells.CellStats`): TP/FP/FN counts (``metrics.precision`` /
``recall`` / ``f1``), the calibration-bin state of ``metrics._calibration_update``
(``metrics._calibration_compute`` gives Brier, its decomposition and ECE), and per-unit
tables of positives/negatives per distinct score (AP and AUC-PR by
``metrics.weighted_pr_areas``, the curve and areas of ``metrics.average_precision`` /
``metrics.auc_pr_trapezoid``; equal to scikit-learn, which the tests check). A bootstrap
resample re-weights the units, which equals re-scoring the resampled pixels exactly. One
multiplicity matrix per config (key ``("firespread", config)``) is shared by all its cells
and by every submission, so comparisons are paired.

>>> rng = np.random.default_rng(0)
>>> p = rng.random((6, 16)); y = rng.random((6, 16)) < p
>>> ms = MapSet(p=p, y=y, unit=np.array([0, 0, 1, 1, 2, 2]), t=np.array([1, 2] * 3))
>>> rows, cal = score_mapset(ms, ScoreConfig(n_boot=50), ("doc",))
>>> r = next(r for r in rows if r["metric"] == "brier" and r["stratum"] == "all" and r["t"] is None)
>>> r["lo"] <= r["value"] <= r["hi"], r["n"], r["n_units"]
(True, 96, 3)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aegisbench import metrics as M
from aegisbench.evaluation.firespread_cells import (  # noqa: F401 - ScoreConfig re-exported
    CellStats, ScoreConfig, distinct_ranks, pool_cells)
from aegisbench.stats import count_ratios as count_statistics
from aegisbench.stats import multiplicities, percentile_interval, ratio, resample_indices

log = logging.getLogger(__name__)

VAR_EDGES = (0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0)
DICE_EDGES = tuple(np.round(np.arange(0, 11) / 10, 1))
#: the per-map scores whose spread over maps is reported, as the registered ``<metric>_sd_maps``
SD_METRICS = tuple(M.SD_MAPS.members)
SD_NAMES = M.SD_MAPS.names


@dataclass(frozen=True, eq=False)
class MapSet:
    """Forecast maps of one config: ``p`` (n, P) in [0, 1], observed ``y`` (n, P) bool,
    optional ``valid`` pixel mask, optional ensemble ``oracle`` (n, P) and ``floor_y`` (n, P)
    (outcomes drawn from the statistic, for ``ece_floor``); per map its bootstrap ``unit``,
    frame ``t``, ``var_z`` (NaN if unknown) and ``dice`` (NaN if unknown)."""

    p: np.ndarray
    y: np.ndarray
    unit: np.ndarray
    t: np.ndarray | None = None
    var_z: np.ndarray | None = None
    dice: np.ndarray | None = None
    valid: np.ndarray | None = None
    oracle: np.ndarray | None = None
    floor_y: np.ndarray | None = None

    def __post_init__(self) -> None:
        p = np.asarray(self.p)
        p = p.astype(np.float64 if p.dtype != np.float32 else np.float32, copy=False).reshape(len(p), -1)
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "y", np.asarray(self.y, bool).reshape(p.shape))
        if self.valid is not None:
            object.__setattr__(self, "valid", np.asarray(self.valid, bool).reshape(p.shape))
        if self.oracle is not None:
            object.__setattr__(self, "oracle", np.asarray(self.oracle, np.float64).reshape(p.shape))
        if self.floor_y is not None:
            if self.oracle is None:
                raise ValueError("floor_y needs the oracle (the statistic it is drawn from)")
            object.__setattr__(self, "floor_y", np.asarray(self.floor_y, bool).reshape(p.shape))
        unit = np.asarray(self.unit, np.int64)
        if unit.shape != (len(p),):
            raise ValueError("unit needs one entry per map")
        object.__setattr__(self, "unit", unit)


def var_label(v: float) -> str:
    """Macro-variance stratum of ``Var[Z_t]``: ``var_z:0``, ``var_z:(0,1]``, ..., ``var_z:>10000``."""
    if v <= 0:
        return "var_z:0"
    for lo, hi in zip(VAR_EDGES[:-1], VAR_EDGES[1:]):
        if v <= hi:
            return f"var_z:({lo:g},{hi:g}]"
    return f"var_z:>{VAR_EDGES[-1]:g}"


def dice_label(d: float) -> str:
    """Dice stratum as in seed 003 Table 3: ``dice:[0.0,0.1)`` ... ``dice:[0.9,1.0]``."""
    k = min(int(np.floor(d * 10 + 1e-9)), 9)
    return f"dice:[{k / 10:.1f},{(k + 1) / 10:.1f}{']' if k == 9 else ')'}"


def ap_rows(p: np.ndarray, y: np.ndarray, rank: np.ndarray | None = None) -> np.ndarray:
    """Average precision (scikit-learn definition, ties grouped) of every row, vectorised:
    ``sum_k gain_k P_k / n_pos`` over the tie groups (the precision of ``metrics._pr_curve``;
    the sum runs in this order, which may differ from ``metrics.average_precision`` in the
    last bit). ``rank``: each value's rank among the distinct values of ``p`` (equal values,
    equal ranks), which orders the pixels as ``p`` does (a radix sort below 2^16 ranks).

    >>> p = np.array([[0.5, 0.25, 0.5, 1.0]]); y = np.array([[1, 0, 0, 1]], bool)
    >>> ap_rows(p, y).tolist() == ap_rows(p, y, np.array([[1, 0, 1, 2]])).tolist() == [0.8333333333333333]
    True
    """
    p = np.asarray(p, np.float64)
    y = np.asarray(y, bool)
    if rank is not None and p.size and int(rank.max()) < 1 << 16:
        order = np.argsort((int(rank.max()) - rank).astype(np.uint16), axis=1, kind="stable")
    else:
        order = np.argsort(-p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    ys = np.take_along_axis(y, order, 1).astype(np.float64)
    tps = np.cumsum(ys, axis=1)
    n = p.shape[1]
    fps = np.arange(1, n + 1)[None, :] - tps
    end = np.ones_like(ps, bool)
    end[:, :-1] = ps[:, :-1] != ps[:, 1:]
    pos = tps[:, -1:]
    prec = np.where(end, ratio(tps, tps + fps), 0.0)  # tps + fps >= 1: the rank
    tp_end = np.where(end, tps, 0.0)
    prev = np.concatenate([np.zeros((len(p), 1)), np.maximum.accumulate(tp_end, axis=1)[:, :-1]], axis=1)
    gain = np.where(end, tps - prev, 0.0)
    return ratio((gain * prec).sum(axis=1), pos[:, 0])


def _per_map_scores(ms: MapSet, cfg: ScoreConfig, rank: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per-map precision, recall, F1, AP and Brier (for the ``*_sd_maps`` spreads of Fig. 7);
    ``rank``: the pixels' ranks among the distinct forecasts (:func:`distinct_ranks`), if known."""
    p, y = ms.p, ms.y
    pred = p > cfg.threshold
    if ms.valid is None:  # every pixel counts: the same sums, without the all-true mask
        v = None
        f = count_statistics(np.stack([(pred & y).sum(1), (pred & ~y).sum(1), (~pred & y).sum(1)], axis=1))
        brier = ((p.astype(np.float64) - y) ** 2).sum(1) / np.full(len(p), max(p.shape[1], 1))
    else:
        v = ms.valid
        f = count_statistics(np.stack([(pred & y & v).sum(1), (pred & ~y & v).sum(1), (~pred & y & v).sum(1)], axis=1))
        brier = (((p.astype(np.float64) - y) ** 2) * v).sum(1) / np.maximum(v.sum(1), 1)
    if ms.valid is None:
        ap = np.concatenate([ap_rows(p[a:a + 256], y[a:a + 256], None if rank is None else rank[a:a + 256])
                             for a in range(0, len(p), 256)])
    else:
        ap = np.array([M.average_precision(p[i][v[i]], y[i][v[i]]) if v[i].any() else 0.0 for i in range(len(p))])
    return {"precision": f["precision"], "recall": f["recall"], "f1": f["f1"], "average_precision": ap, "brier": brier}


def _cells(ms: MapSet) -> list[tuple[int | None, str, np.ndarray]]:
    n = len(ms.p)
    cells = [(None, "all", np.arange(n))]
    if ms.t is not None:
        t = np.asarray(ms.t)
        cells += [(int(v), "all", np.flatnonzero(t == v)) for v in np.unique(t)]
    for attr, label in (("var_z", var_label), ("dice", dice_label)):
        vals = getattr(ms, attr)
        if vals is None:
            continue
        labels = np.array([label(float(v)) if np.isfinite(v) else "" for v in vals], dtype=object)
        for lab in sorted(set(labels) - {""}):
            cells.append((None, lab, np.flatnonzero(labels == lab)))
    return cells


def _unique_weights(n_units: int, key: Sequence, cfg: ScoreConfig) -> tuple[np.ndarray, np.ndarray]:
    W = multiplicities(resample_indices(n_units, ("firespread", *key), cfg.n_boot), n_units)
    Wu, inv = np.unique(W, axis=0, return_inverse=True)
    return Wu, np.asarray(inv).reshape(-1)


def _cell_rows(cell: CellStats, Wu: np.ndarray, inv: np.ndarray, cfg: ScoreConfig, t, stratum: str, n: int) -> list[dict]:
    point = cell.point()
    samples = [cell.resampled(w.astype(np.float64)) for w in Wu]
    n_present = int((cell.n_u > 0).sum())
    M.REGISTRY.require(point, where=f"fire-spread cell {stratum!r}")
    n_of = {} if cell.map_ece is None else {"ece_seed003": int(cell.map_ece[1].sum())}  # the maps averaged
    rows = []
    for name, value in point.items():
        boot = np.array([smp.get(name, np.nan) for smp in samples])[inv]
        # resamples where a ratio is 0/0 are left out; if all are, so is the point: degenerate
        lo, hi = percentile_interval(boot, cfg.percentiles, fallback=(value, value))
        ok = bool(np.isfinite(value))  # else a 0/0 ratio (no burnt pixel, none forecast): null, noted
        rows.append({"t": t, "stratum": stratum, "metric": name, "value": float(value) if ok else None,
                     "lo": lo if ok else None, "hi": hi if ok else None, "n": n_of.get(name, n), "n_units": n_present,
                     "note": None if ok else M.ZERO_DIVISION})
    return rows


def _collect(collect: dict, stratum: str, cell: CellStats, per_map: dict, sel: np.ndarray) -> None:
    """Pool ``cell`` (and the moments of its per-map scores) into ``collect[stratum]`` at once,
    so memory does not grow with the number of configs."""
    moments = np.array([[len(sel), per_map[k][sel].sum(), (per_map[k][sel] ** 2).sum()] for k in SD_METRICS])
    if stratum in collect:
        prev, m = collect[stratum]
        collect[stratum] = (pool_cells([prev, cell]), m + moments)
    else:
        collect[stratum] = (cell, moments)


def score_pooled(collected: dict[str, tuple], cfg: ScoreConfig, key: Sequence) -> list[dict]:
    """Rows of every stratum pooled over the configs that ``score_mapset(..., collect=)`` saw
    (seed 003 Figs. 6-7: metrics against ``Var[Z_t]`` across S-levels). One resample matrix
    (key ``("firespread", *key)``) re-weights the units, shared by all of them."""
    rows: list[dict] = []
    if not collected:
        return rows
    n_units = next(iter(collected.values()))[0].n_units
    Wu, inv = _unique_weights(n_units, key, cfg)
    for stratum in sorted(collected, key=lambda k: (k != "all", k)):
        cell, moments = collected[stratum]
        rows += _cell_rows(cell, Wu, inv, cfg, None, stratum, cell.n)
        n_present = int((cell.n_u > 0).sum())
        for name, (n, total, squares) in zip(SD_METRICS, moments):
            mean = total / n
            var = max(0.0, squares / n - mean ** 2)
            rows.append({"t": None, "stratum": stratum, "metric": SD_NAMES[name], "value": float(np.sqrt(var)),
                         "lo": float("nan"), "hi": float("nan"), "n": int(n), "n_units": n_present})
    return rows


def score_mapset(ms: MapSet, cfg: ScoreConfig, key: Sequence, collect: dict | None = None
                 ) -> tuple[list[dict], dict]:
    """Rows ``{t, stratum, metric, value, lo, hi, n, n_units}`` for every cell of a map set,
    and the pooled calibration curve ``{prob_true, prob_pred, count}``. ``collect``: a dict
    that receives, per stratum, the all-frames cell and its per-map moments (for
    :func:`score_pooled`)."""
    n_units = int(ms.unit.max()) + 1 if len(ms.unit) else 0
    Wu, inv = _unique_weights(n_units, key, cfg)
    hw = ms.p.shape[1]
    rows: list[dict] = []
    calib: dict = {}
    per_map = None
    # once per map set: each pixel's rank among the distinct forecasts, and its calibration bins (by rank)
    scores_all, rank = distinct_ranks(ms.p)
    bins = M._bin_ids(scores_all, cfg.n_bins).astype(np.int16 if cfg.n_bins < 2**15 else np.int64)[rank]  # by score
    obins = None if ms.floor_y is None else M._bin_ids(ms.oracle, cfg.n_bins).astype(bins.dtype)
    seed_ece = M.ece_per_map(ms.p, ms.y, ms.valid, ranks=(scores_all, rank))  # seed 003 ECE per map (NaN: 1 outcome)
    cells = _cells(ms)
    # atoms: maps that fall in the same cells; every cell is a union of atoms, so each
    # pixel is gathered once and every cell is pooled from the sufficient statistics
    member = np.zeros((len(ms.p), len(cells)), bool)
    for j, (_, _, sel) in enumerate(cells):
        member[sel, j] = True
    patterns, atom_of = np.unique(member, axis=0, return_inverse=True)
    atom_of = np.asarray(atom_of).reshape(-1)
    atoms: dict[int, CellStats] = {}
    for a_id in range(len(patterns)):
        sel = np.flatnonzero(atom_of == a_id)
        if ms.valid is None:
            take = lambda x: x[sel].reshape(-1)  # noqa: E731
            u = np.repeat(ms.unit[sel], hw)
        else:
            mask = ms.valid[sel]
            if not mask.any():
                continue
            take = lambda x: x[sel][mask]  # noqa: E731
            u = np.broadcast_to(ms.unit[sel][:, None], mask.shape)[mask]
        atoms[a_id] = CellStats(take(ms.p), take(ms.y), u, None if ms.oracle is None else take(ms.oracle), n_units, cfg,
                            None if ms.floor_y is None else take(ms.floor_y), inv=take(rank), scores=scores_all,
                            b=take(bins), bo=None if obins is None else take(obins),
                            maps=(seed_ece[sel], ms.unit[sel]))
    for j, (t, stratum, sel) in enumerate(cells):
        parts = [atoms[a] for a in np.flatnonzero(patterns[:, j]) if a in atoms]
        if not parts:
            continue
        cell = pool_cells(parts, scores_all)
        rows += _cell_rows(cell, Wu, inv, cfg, t, stratum, cell.n)
        n_present = int((cell.n_u > 0).sum())
        if t is None:
            per_map = per_map if per_map is not None else _per_map_scores(ms, cfg, rank)
            if collect is not None and (stratum == "all" or stratum.startswith("var_z")):
                _collect(collect, stratum, cell, per_map, sel)
            for name in SD_METRICS:
                rows.append({"t": t, "stratum": stratum, "metric": SD_NAMES[name],
                             "value": float(np.std(per_map[name][sel])), "lo": float("nan"), "hi": float("nan"),
                             "n": int(len(sel)), "n_units": n_present})
        if t is None and stratum == "all":
            c = M._calibration_compute(cell.states.sum(axis=0))
            calib = {"prob_true": c["prob_true"], "prob_pred": c["prob_pred"], "count": c["count"]}
    return rows, calib
