"""Per-unit sufficient statistics of the pixels of one fire-spread scoring cell
(:mod:`aegisbench.evaluation.firespread_scoring`): TP/FP/FN counts, the calibration-bin states of
``metrics._calibration_update``, a table of positives / negatives per distinct score
and, when per-map scores are given, the sum and count of seed 003's per-map ECE
(``metrics.ece_per_map``) per bootstrap unit. A cell's point value and any bootstrap resample (units re-weighted,
which equals re-scoring the resampled pixels exactly) are computed from them, and cells
pool by adding them up (:func:`pool_cells`).

>>> p = np.array([0.9, 0.6, 0.2, 0.1]); y = np.array([True, False, True, False])
>>> cell = CellStats(p, y, np.array([0, 0, 1, 1]), None, 2, ScoreConfig())
>>> pt = cell.point()
>>> pt["precision"], pt["recall"], pt["average_precision"] == M.average_precision(p, y)
(0.5, 0.5, True)
>>> cell.resampled(np.array([2.0, 0.0]))["recall"]  # unit 0 twice, unit 1 left out
1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aegisbench import metrics as M
from aegisbench.stats import count_ratios as count_statistics
from aegisbench.stats import ratio

DENSE_POOL_LIMIT = 1 << 24  # units x distinct scores up to which pooled score tables are dense arrays


@dataclass(frozen=True)
class ScoreConfig:
    """How a fire-spread cell is scored: the burn ``threshold`` (burnt iff ``p > threshold``),
    ``n_bins`` calibration bins, ``n_boot`` bootstrap resamples and the interval's ``percentiles``.

    >>> ScoreConfig(threshold=1.0)
    Traceback (most recent call last):
    ...
    ValueError: threshold must lie in [0, 1) (burnt iff p > threshold), got 1.0
    """

    threshold: float = 0.5  # burnt iff p > threshold
    n_bins: int = 10
    n_boot: int = 1000
    percentiles: tuple[float, float] = (2.5, 97.5)

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold < 1.0:
            raise ValueError(f"threshold must lie in [0, 1) (burnt iff p > threshold), got {self.threshold}")
        if self.n_bins < 1 or self.n_boot < 1:
            raise ValueError("n_bins and n_boot must be positive")


def map_sums(values: np.ndarray, units: np.ndarray, n_units: int) -> np.ndarray:
    """(2, n_units): per unit, the sum and the count of the finite per-map ``values`` (NaN: a map
    left out of the mean)."""
    ok = np.isfinite(values)
    u = np.asarray(units, np.int64)[ok]
    return np.stack([np.bincount(u, weights=np.asarray(values)[ok], minlength=n_units),
                     np.bincount(u, minlength=n_units).astype(np.float64)])


def _bin_states(key: np.ndarray, p: np.ndarray, y: np.ndarray, n_units: int, n_bins: int) -> np.ndarray:
    """(n_units, 5, n_bins) calibration states (count, sum p, sum y, sum y^2, sum (p - y)^2;
    the layout of ``metrics._calibration_update``) from ``key = unit * n_bins + bin``; y binary."""
    n = n_units * n_bins
    pf = p.astype(np.float64, copy=False)
    sy = np.bincount(key[y], minlength=n).astype(np.float64)
    st = [np.bincount(key, minlength=n).astype(np.float64), np.bincount(key, weights=pf, minlength=n), sy, sy,
          np.bincount(key, weights=(pf - y) ** 2, minlength=n)]
    return np.stack([v.reshape(n_units, n_bins) for v in st], axis=1)


class CellStats:
    """Per-unit sufficient statistics of the pixels of one cell. ``inv``/``scores`` (the rank
    of every pixel's forecast among ``scores``, ascending), ``b`` / ``bo`` (calibration bins of
    the forecast / the oracle) may be given precomputed for a whole map set, so a cell costs
    a few bincounts instead of sorts."""

    def __init__(self, p: np.ndarray, y: np.ndarray, u: np.ndarray, o: np.ndarray | None,
                 n_units: int, cfg: ScoreConfig, yf: np.ndarray | None = None, *, inv: np.ndarray | None = None,
                 scores: np.ndarray | None = None, b: np.ndarray | None = None, bo: np.ndarray | None = None,
                 maps: tuple[np.ndarray, np.ndarray] | None = None):
        nb = cfg.n_bins
        self.map_ece = None if maps is None else map_sums(*maps, n_units)
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
        out["average_precision"], out["auc_pr_trapezoid"] = M.weighted_pr_areas(self.pos.sum(0), self.neg.sum(0))
        cal = M._calibration_compute(self.states.sum(axis=0))
        out["ece"] = cal["ece"]
        if self.map_ece is not None:  # NaN (a null row, 0/0) when no map of the cell holds both outcomes
            out["ece_seed003"] = float(ratio(*self.map_ece.sum(axis=1), np.nan))
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
        if self.map_ece is not None:
            out["ece_seed003"] = float(ratio(*(self.map_ece @ w), np.nan))
        if self.floor_states is not None:
            out["ece_floor"] = M._calibration_compute(np.tensordot(w, self.floor_states, axes=1))["ece"]
        if self.sse_o is not None:
            out["oracle_brier"] = float(w @ self.sse_o) / n
            out["excess_brier"] = out["brier"] - out["oracle_brier"]
        out.update(zip(("average_precision", "auc_pr_trapezoid"), M.weighted_pr_areas(w @ self.pos, w @ self.neg)))
        return out


def pool_cells(cells: Sequence[CellStats], scores_all: np.ndarray | None = None) -> CellStats:
    """One cell whose pixels are the union of ``cells`` (same units): every sufficient
    statistic adds up; the score tables are merged on the union of their scores
    (``scores_all``: the ascending distinct scores all cells were ranked among, if shared)."""
    if not cells:
        raise ValueError("nothing to pool")
    if len(cells) == 1:
        return cells[0]
    first = cells[0]
    out = object.__new__(CellStats)
    out.cfg, out.n_units = first.cfg, first.n_units
    out.n = sum(c.n for c in cells)
    out.n_u = sum(c.n_u for c in cells)
    out.counts = sum(c.counts for c in cells)
    out.states = sum(c.states for c in cells)
    floors = [c.floor_states for c in cells]
    out.floor_states = None if any(f is None for f in floors) else sum(floors)
    maps = [c.map_ece for c in cells]
    out.map_ece = None if any(m is None for m in maps) else sum(maps)
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
