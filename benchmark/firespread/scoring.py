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
  (``n_bins`` uniform right-closed bins: seed 003 uses 10 for its calibration curves and 15
  in its ``Var[Z_t]`` studies), and, where the ensemble statistic is known,
  ``oracle_brier`` (the statistic's Brier against the same realizations) and
  ``excess_brier`` = ``brier - oracle_brier``;
* ``ece_floor``: where outcomes drawn from the statistic itself are given (``floor_y``:
  as many realizations of the ensemble the statistic counts, paired map for map), the ECE
  of the statistic against them -- what a perfectly calibrated forecaster scores on the
  same number of equally correlated cells. An ``ece`` inside the floor's interval is
  finite-sample noise, not miscalibration;
* per stratum, the spread over maps of per-map scores (Fig. 7): ``<metric>_sd_maps``
  (no interval).

Everything is computed from per-unit sufficient statistics of the pooled pixels:
TP/FP/FN counts (``metrics.precision`` / ``recall`` / ``f1``), the calibration-bin state
of ``metrics._calibration_update`` (``metrics._calibration_compute`` gives Brier, its
decomposition and ECE), and per-unit tables of positives/negatives per distinct score
(AP and AUC-PR in the layout of ``metrics._pr_curve``; equal to
``metrics.average_precision`` / ``metrics.auc_pr_trapezoid`` and scikit-learn, which the
tests check). A bootstrap resample re-weights the units, which equals re-scoring the
resampled pixels exactly. One multiplicity matrix
per config (key ``("firespread", config)``) is shared by all its cells and by every
submission, so comparisons are paired.

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

# evaluation before metrics: metrics imports evaluation.bootstrap, whose package imports metrics back
from aegisbench.evaluation.bootstrap import (count_statistics, multiplicities, percentile_interval,
                                             resample_indices)
from aegisbench import metrics as M  # noqa: E402,I001

log = logging.getLogger(__name__)

VAR_EDGES = (0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0)
DICE_EDGES = tuple(np.round(np.arange(0, 11) / 10, 1))
SD_METRICS = ("precision", "recall", "f1", "average_precision", "brier")


@dataclass(frozen=True)
class ScoreConfig:
    threshold: float = 0.5  # burnt iff p > threshold
    n_bins: int = 10
    n_boot: int = 1000
    percentiles: tuple[float, float] = (2.5, 97.5)

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold < 1.0:
            raise ValueError(f"threshold must lie in [0, 1) (burnt iff p > threshold), got {self.threshold}")
        if self.n_bins < 1 or self.n_boot < 1:
            raise ValueError("n_bins and n_boot must be positive")


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
        p = p.astype(np.float64 if p.dtype != np.float32 else np.float32).reshape(len(p), -1)
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


def ap_rows(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Average precision (scikit-learn definition, ties grouped) of every row, vectorised."""
    p = np.asarray(p, np.float64)
    y = np.asarray(y, bool)
    order = np.argsort(-p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    ys = np.take_along_axis(y, order, 1).astype(np.float64)
    tps = np.cumsum(ys, axis=1)
    n = p.shape[1]
    fps = np.arange(1, n + 1)[None, :] - tps
    end = np.ones_like(ps, bool)
    end[:, :-1] = ps[:, :-1] != ps[:, 1:]
    pos = tps[:, -1:]
    prec = np.where(end, tps / np.maximum(tps + fps, 1), 0.0)
    tp_end = np.where(end, tps, 0.0)
    prev = np.concatenate([np.zeros((len(p), 1)), np.maximum.accumulate(tp_end, axis=1)[:, :-1]], axis=1)
    gain = np.where(end, tps - prev, 0.0)
    return np.where(pos[:, 0] > 0, (gain * prec).sum(axis=1) / np.maximum(pos[:, 0], 1), 0.0)


def _bin_states(key: np.ndarray, p: np.ndarray, y: np.ndarray, n_units: int, n_bins: int) -> np.ndarray:
    """(n_units, 5, n_bins) calibration states (count, sum p, sum y, sum y^2, sum (p - y)^2;
    the layout of ``metrics._calibration_update``) from ``key = unit * n_bins + bin``; y binary."""
    n = n_units * n_bins
    pf = p.astype(np.float64, copy=False)
    sy = np.bincount(key[y], minlength=n).astype(np.float64)
    st = [np.bincount(key, minlength=n).astype(np.float64), np.bincount(key, weights=pf, minlength=n), sy, sy,
          np.bincount(key, weights=(pf - y) ** 2, minlength=n)]
    return np.stack([v.reshape(n_units, n_bins) for v in st], axis=1)


class _Cell:
    """Per-unit sufficient statistics of the pixels of one cell. ``inv``/``scores`` (the rank
    of every pixel's forecast among ``scores``, ascending), ``b`` / ``bo`` (calibration bins of
    the forecast / the oracle) may be given precomputed for a whole map set, so a cell costs
    a few bincounts instead of sorts."""

    def __init__(self, p: np.ndarray, y: np.ndarray, u: np.ndarray, o: np.ndarray | None,
                 n_units: int, cfg: ScoreConfig, yf: np.ndarray | None = None, *, inv: np.ndarray | None = None,
                 scores: np.ndarray | None = None, b: np.ndarray | None = None, bo: np.ndarray | None = None):
        nb = cfg.n_bins
        y = np.asarray(y, bool)
        u = np.asarray(u, np.int64)
        self.cfg, self.n_units = cfg, n_units
        self.n = len(p)
        self.n_u = np.bincount(u, minlength=n_units).astype(np.float64)
        pred = p > cfg.threshold
        self.counts = np.stack([np.bincount(u[pred & y], minlength=n_units),
                                np.bincount(u[pred & ~y], minlength=n_units),
                                np.bincount(u[~pred & y], minlength=n_units)], axis=1).astype(np.float64)
        b = M._bin_ids(p, nb) if b is None else b
        self.states = _bin_states(u * nb + b, p, y, n_units, nb)
        self.floor_states = None
        if yf is not None and o is not None:
            bo = M._bin_ids(o, nb) if bo is None else bo
            self.floor_states = _bin_states(u * nb + bo, o, np.asarray(yf, bool), n_units, nb)
        self.sse_o = None if o is None else np.bincount(u, weights=(o - y) ** 2, minlength=n_units)
        if inv is None or n_units * len(scores) > 4 * len(p) + 4096:
            if inv is None:
                scores, inv = np.unique(p, return_inverse=True)
            else:  # a small cell of a map set with many distinct scores: compress its ranks
                local, inv = np.unique(inv, return_inverse=True)
                scores = scores[local]
            inv = np.asarray(inv).reshape(-1)
        U = len(scores)
        key = u * U + inv
        pos = np.bincount(key[y], minlength=n_units * U).reshape(n_units, U)
        neg = np.bincount(key[~y], minlength=n_units * U).reshape(n_units, U)
        present = (pos + neg).sum(axis=0) > 0
        if not present.all():
            pos, neg, scores = pos[:, present], neg[:, present], scores[present]
        self.scores = scores[::-1]  # distinct scores, highest first (the column order of pos / neg)
        self.pos = pos[:, ::-1].astype(np.float64)
        self.neg = neg[:, ::-1].astype(np.float64)

    def point(self) -> dict[str, float]:
        c = self.counts.sum(axis=0)
        out = {"precision": M.precision(c), "recall": M.recall(c), "f1": M.f1(c)}
        # AP / AUC-PR from the pooled score table (one sort per cell; equal to metrics.average_precision
        # and metrics.auc_pr_trapezoid on the pixels, which the tests check)
        out["average_precision"], out["auc_pr_trapezoid"] = weighted_pr_areas(self.pos.sum(0), self.neg.sum(0))
        cal = M._calibration_compute(self.states.sum(axis=0))
        out["ece"] = cal["ece"]
        if self.floor_states is not None:
            out["ece_floor"] = M._calibration_compute(self.floor_states.sum(axis=0))["ece"]
        out["brier"] = cal["brier"]
        out.update({f"brier_{k}": cal[k] for k in ("reliability", "resolution", "uncertainty", "residual")})
        if self.sse_o is not None:
            out["oracle_brier"] = float(self.sse_o.sum() / self.n)
            out["excess_brier"] = out["brier"] - out["oracle_brier"]
        return out

    def resampled(self, w: np.ndarray) -> dict[str, float]:
        """The same metrics with unit ``k`` counted ``w[k]`` times."""
        n = float(w @ self.n_u)
        if n == 0:
            return {}
        out = {k: float(v) for k, v in count_statistics(w @ self.counts, empty=np.nan).items()}
        c = M._calibration_compute(np.tensordot(w, self.states, axes=1))
        out.update({"ece": c["ece"], "brier": c["brier"], "brier_reliability": c["reliability"],
                    "brier_resolution": c["resolution"], "brier_uncertainty": c["uncertainty"],
                    "brier_residual": c["residual"]})
        if self.floor_states is not None:
            out["ece_floor"] = M._calibration_compute(np.tensordot(w, self.floor_states, axes=1))["ece"]
        if self.sse_o is not None:
            out["oracle_brier"] = float(w @ self.sse_o) / n
            out["excess_brier"] = out["brier"] - out["oracle_brier"]
        out.update(zip(("average_precision", "auc_pr_trapezoid"), weighted_pr_areas(w @ self.pos, w @ self.neg)))
        return out


DENSE_POOL_LIMIT = 1 << 24  # units x distinct scores up to which pooled score tables are dense arrays


def pool_cells(cells: Sequence[_Cell], scores_all: np.ndarray | None = None) -> _Cell:
    """One cell whose pixels are the union of ``cells`` (same units): every sufficient
    statistic adds up; the score tables are merged on the union of their scores
    (``scores_all``: the ascending distinct scores all cells were ranked among, if shared)."""
    if not cells:
        raise ValueError("nothing to pool")
    if len(cells) == 1:
        return cells[0]
    first = cells[0]
    out = object.__new__(_Cell)
    out.cfg, out.n_units = first.cfg, first.n_units
    out.n = sum(c.n for c in cells)
    out.n_u = sum(c.n_u for c in cells)
    out.counts = sum(c.counts for c in cells)
    out.states = sum(c.states for c in cells)
    floors = [c.floor_states for c in cells]
    out.floor_states = None if any(f is None for f in floors) else sum(floors)
    sse = [c.sse_o for c in cells]
    out.sse_o = None if any(v is None for v in sse) else sum(sse)
    if scores_all is None or first.n_units * len(scores_all) > DENSE_POOL_LIMIT:
        scores_all = np.unique(np.concatenate([c.scores for c in cells]))
    U = len(scores_all)
    pos = np.zeros((first.n_units, U))
    neg = np.zeros((first.n_units, U))
    for c in cells:
        idx = np.searchsorted(scores_all, c.scores)  # c.scores are distinct: no repeated index
        pos[:, idx] += c.pos
        neg[:, idx] += c.neg
    present = (pos + neg).sum(axis=0) > 0
    out.scores = scores_all[present][::-1]
    out.pos, out.neg = pos[:, present][:, ::-1], neg[:, present][:, ::-1]
    return out


def weighted_pr_areas(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """(AP, trapezoid AUC-PR) from positive/negative weights per distinct score, highest score
    first — the layout of ``metrics._pr_curve`` with repeated samples."""
    keep = (pos + neg) > 0
    pos, neg = pos[keep], neg[keep]
    tps, fps = np.cumsum(pos), np.cumsum(neg)
    prec = np.divide(tps, tps + fps, out=np.zeros(tps.size), where=(tps + fps) != 0)
    rec = np.ones(tps.size) if tps[-1] == 0 else tps / tps[-1]
    prec_c, rec_c = np.r_[prec[::-1], 1.0], np.r_[rec[::-1], 0.0]
    ap = float(max(0.0, -np.sum(np.diff(rec_c) * prec_c[:-1])))
    return ap, float(abs(np.trapezoid(prec_c, rec_c)))


def _per_map_scores(ms: MapSet, cfg: ScoreConfig) -> dict[str, np.ndarray]:
    """Per-map precision, recall, F1, AP and Brier (for the ``*_sd_maps`` spreads of Fig. 7)."""
    p, y = ms.p, ms.y
    v = np.ones_like(y) if ms.valid is None else ms.valid
    pred = p > cfg.threshold
    f = count_statistics(np.stack([(pred & y & v).sum(1), (pred & ~y & v).sum(1), (~pred & y & v).sum(1)], axis=1))
    brier = (((p.astype(np.float64) - y) ** 2) * v).sum(1) / np.maximum(v.sum(1), 1)
    if ms.valid is None:
        ap = np.concatenate([ap_rows(p[a:a + 256], y[a:a + 256]) for a in range(0, len(p), 256)])
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


def distinct_ranks(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(p, return_inverse=True)`` (inverse in ``p``'s shape), without a sort when every
    value is a float16 (forecasts stored as float16): non-negative floats order as their bits.

    >>> s, r = distinct_ranks(np.array([[0.5, 0.25], [1.0, 0.5]], np.float32))
    >>> s.tolist(), r.tolist()
    ([0.25, 0.5, 1.0], [[1, 0], [2, 1]])
    """
    p = np.asarray(p)
    if p.dtype in (np.float16, np.float32) and p.size:
        h = p.astype(np.float16)
        if p.dtype == np.float16 or (h.astype(p.dtype) == p).all():
            bits = h.view(np.uint16)
            if bits.max() < 0x7C00:  # finite and non-negative (the sign bit is clear)
                present = np.bincount(bits.reshape(-1), minlength=1 << 16) > 0
                lookup = np.cumsum(present, dtype=np.int32) - 1
                scores = np.flatnonzero(present).astype(np.uint16).view(np.float16).astype(p.dtype)
                return scores, lookup[bits]
    scores, inv = np.unique(p, return_inverse=True)
    return scores, np.asarray(inv).reshape(p.shape).astype(np.int32 if len(scores) < 2**31 else np.int64)


def _unique_weights(n_units: int, key: Sequence, cfg: ScoreConfig) -> tuple[np.ndarray, np.ndarray]:
    W = multiplicities(resample_indices(n_units, ("firespread", *key), cfg.n_boot), n_units)
    Wu, inv = np.unique(W, axis=0, return_inverse=True)
    return Wu, np.asarray(inv).reshape(-1)


def _cell_rows(cell: _Cell, Wu: np.ndarray, inv: np.ndarray, cfg: ScoreConfig, t, stratum: str, n: int) -> list[dict]:
    point = cell.point()
    samples = [cell.resampled(w.astype(np.float64)) for w in Wu]
    n_present = int((cell.n_u > 0).sum())
    rows = []
    for name, value in point.items():
        boot = np.array([smp.get(name, np.nan) for smp in samples])[inv]
        # resamples where a ratio is 0/0 are left out; if all are, so is the point: degenerate
        lo, hi = percentile_interval(boot, cfg.percentiles) if np.isfinite(boot).any() else (value, value)
        rows.append({"t": t, "stratum": stratum, "metric": name, "value": float(value), "lo": lo, "hi": hi,
                     "n": n, "n_units": n_present})
    return rows


def _collect(collect: dict, stratum: str, cell: _Cell, per_map: dict, sel: np.ndarray) -> None:
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
            rows.append({"t": None, "stratum": stratum, "metric": f"{name}_sd_maps", "value": float(np.sqrt(var)),
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
    # once per map set: each pixel's rank among the distinct forecasts and its calibration bins
    scores_all, rank = distinct_ranks(ms.p)
    bins = M._bin_ids(ms.p, cfg.n_bins).astype(np.int16 if cfg.n_bins < 2**15 else np.int64)
    obins = None if ms.floor_y is None else M._bin_ids(ms.oracle, cfg.n_bins).astype(bins.dtype)
    cells = _cells(ms)
    # atoms: maps that fall in the same cells; every cell is a union of atoms, so each
    # pixel is gathered once and every cell is pooled from the sufficient statistics
    member = np.zeros((len(ms.p), len(cells)), bool)
    for j, (_, _, sel) in enumerate(cells):
        member[sel, j] = True
    patterns, atom_of = np.unique(member, axis=0, return_inverse=True)
    atom_of = np.asarray(atom_of).reshape(-1)
    atoms: dict[int, _Cell] = {}
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
        atoms[a_id] = _Cell(take(ms.p), take(ms.y), u, None if ms.oracle is None else take(ms.oracle), n_units, cfg,
                            None if ms.floor_y is None else take(ms.floor_y), inv=take(rank), scores=scores_all,
                            b=take(bins), bo=None if obins is None else take(obins))
    for j, (t, stratum, sel) in enumerate(cells):
        parts = [atoms[a] for a in np.flatnonzero(patterns[:, j]) if a in atoms]
        if not parts:
            continue
        cell = pool_cells(parts, scores_all)
        rows += _cell_rows(cell, Wu, inv, cfg, t, stratum, cell.n)
        n_present = int((cell.n_u > 0).sum())
        if t is None:
            per_map = per_map if per_map is not None else _per_map_scores(ms, cfg)
            if collect is not None and (stratum == "all" or stratum.startswith("var_z")):
                _collect(collect, stratum, cell, per_map, sel)
            for name in SD_METRICS:
                rows.append({"t": t, "stratum": stratum, "metric": f"{name}_sd_maps",
                             "value": float(np.std(per_map[name][sel])), "lo": float("nan"), "hi": float("nan"),
                             "n": int(len(sel)), "n_units": n_present})
        if t is None and stratum == "all":
            c = M._calibration_compute(cell.states.sum(axis=0))
            calib = {"prob_true": c["prob_true"], "prob_pred": c["prob_pred"], "count": c["count"]}
    return rows, calib
