"""Probabilistic forecasts (the fire-spread track): Brier score and its decomposition,
calibration curve and ECE (pooled; per map, as seed 003 averages it: :func:`ece_per_map`),
average precision and the trapezoid AUC-PR. AP and AUC-PR are one curve
(:func:`_pr_from_cumulative`) and one area formula each, whether the samples come as
pixels (:func:`average_precision`) or as weights per distinct score
(:func:`weighted_pr_areas`: the fire-spread scorer's pooled and re-weighted tables).
Streaming use goes through :func:`_calibration_update` / :func:`_calibration_compute`
(per-bin sufficient statistics), which the fire-spread scorer pools and re-weights.

>>> brier_score([0.0, 1.0], [0, 1]), expected_calibration_error([0.25, 0.75], [0, 1], 2)
(0.0, 0.25)
"""

from __future__ import annotations

import numpy as np

from aegisbench.stats import ratio


def _check_prob(p, y) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, np.float64).reshape(-1)
    y = np.asarray(y, np.float64).reshape(-1)
    if p.shape != y.shape or p.size == 0:
        raise ValueError("p and y need the same non-zero size")
    if not (np.isfinite(p).all() and p.min() >= 0 and p.max() <= 1):
        raise ValueError("p must lie in [0, 1]")
    if not (np.isfinite(y).all() and y.min() >= 0 and y.max() <= 1):
        raise ValueError("y must lie in [0, 1] (binary outcomes or observed frequencies)")
    return p, y


def brier_score(p, y) -> float:
    """Mean squared error of probability forecasts (= sklearn ``brier_score_loss`` for binary y)."""
    p, y = _check_prob(p, y)
    return float(np.mean((p - y) ** 2))


def _bin_ids(p: np.ndarray, n_bins: int) -> np.ndarray:
    """Uniform bins on [0, 1], right-closed: (e_{k-1}, e_k], the first also holds 0."""
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    return np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], p)


def _calibration_update(state: np.ndarray | None, p, y, n_bins: int = 10) -> np.ndarray:
    """Add forecasts to a (5, n_bins) state: count, sum p, sum y, sum y^2, sum (p - y)^2."""
    p, y = _check_prob(p, y)
    b = _bin_ids(p, n_bins)
    s = np.stack([np.bincount(b, minlength=n_bins).astype(np.float64),
                  np.bincount(b, weights=p, minlength=n_bins), np.bincount(b, weights=y, minlength=n_bins),
                  np.bincount(b, weights=y * y, minlength=n_bins),
                  np.bincount(b, weights=(p - y) ** 2, minlength=n_bins)])
    return s if state is None else state + s


def _calibration_compute(state: np.ndarray) -> dict[str, np.ndarray | float]:
    n, sp, sy, sy2, se = state
    nz = n > 0
    N = n.sum()
    ybar = sy.sum() / N
    pk, yk, nk = sp[nz] / n[nz], sy[nz] / n[nz], n[nz]
    rel = float(np.sum(nk * (pk - yk) ** 2) / N)
    res = float(np.sum(nk * (yk - ybar) ** 2) / N)
    unc = float(max(sy2.sum() / N - ybar**2, 0.0))  # = ybar (1 - ybar) for binary y
    brier = float(se.sum() / N)
    return {"prob_true": yk, "prob_pred": pk, "count": nk,
            "ece": float(np.sum(nk / N * np.abs(yk - pk))), "brier": brier, "reliability": rel,
            "resolution": res, "uncertainty": unc, "residual": brier - (rel - res + unc)}


def calibration_curve(p, y, n_bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(prob_true, prob_pred)`` over the non-empty uniform bins (scikit-learn convention)."""
    c = _calibration_compute(_calibration_update(None, p, y, n_bins))
    return c["prob_true"], c["prob_pred"]


def expected_calibration_error(p, y, n_bins: int = 10) -> float:
    """``sum_k |I_k| / N * |mean y_k - mean p_k|`` over the :func:`calibration_curve` bins."""
    return _calibration_compute(_calibration_update(None, p, y, n_bins))["ece"]


#: seed 003's ECE: bins of its code's ``calibration.get_ece`` (the ``uncertainty-calibration`` package)
SEED003_ECE_BINS = 15
_MAP_CHUNK = 256  # maps binned at once by :func:`ece_per_map`


def ece_per_map(p, y, valid=None, n_bins: int = SEED003_ECE_BINS, ranks=None) -> np.ndarray:
    """ECE of every map (row of ``p``) on its own pixels, as seed 003's code computes it per sample:
    ``sum_k |I_k| / N |mean p_k - mean y_k|`` = ``sum_k |sum_{I_k} (p - y)| / N`` over ``n_bins``
    equal-width bins with edges ``k / n_bins``, right-closed, the first also holding 0 (``get_ece``
    with ``get_equal_prob_bins``). NaN for a map whose (``valid``) outcomes are all 0 or all 1: the
    seed's evaluation skips such a sample, so a mean over maps leaves it out. ``ranks``: ``(scores,
    rank)`` with ``scores[rank] == p`` (``firespread_cells.distinct_ranks``), to bin each distinct score once.

    >>> ece_per_map([[0.25, 0.75, 0.75, 0.25], [0.5, 0.5, 0.5, 0.5]], [[0, 1, 1, 1], [0, 0, 0, 0]], n_bins=2).tolist()
    [0.25, nan]
    """
    p = np.asarray(p)
    p = p.reshape(len(p), -1)
    y = np.asarray(y, bool).reshape(p.shape)
    v = np.ones(p.shape, bool) if valid is None else np.asarray(valid, bool).reshape(p.shape)
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    edges = np.arange(1, n_bins) / n_bins  # k / n exactly as get_equal_prob_bins computes them
    if ranks is not None:
        lut, rank = np.searchsorted(edges, np.asarray(ranks[0], np.float64)), np.asarray(ranks[1]).reshape(p.shape)
    out = np.full(len(p), np.nan)
    for a in range(0, len(p), _MAP_CHUNK):
        pa, ya, va = p[a:a + _MAP_CHUNK].astype(np.float64), y[a:a + _MAP_CHUNK], v[a:a + _MAP_CHUNK]
        rows = len(pa)
        b = np.searchsorted(edges, pa) if ranks is None else lut[rank[a:a + _MAP_CHUNK]]
        key, diff = np.arange(rows)[:, None] * n_bins + b, pa - ya
        key, diff = (key.reshape(-1), diff.reshape(-1)) if valid is None else (key[va], diff[va])
        gap = np.bincount(key, weights=diff, minlength=rows * n_bins).reshape(rows, n_bins)
        n, pos = va.sum(axis=1), (ya & va).sum(axis=1)
        both = (pos > 0) & (pos < n)
        out[a:a + rows] = np.where(both, ratio(np.abs(gap).sum(axis=1), n, np.nan), np.nan)
    return out


def brier_decomposition(p, y, n_bins: int = 10) -> dict[str, float]:
    """Murphy's ``brier ~ reliability - resolution + uncertainty`` on the calibration
    bins; ``residual`` is the within-bin forecast-spread term (0 when forecasts are
    constant within bins). ``uncertainty`` is the variance of y (ybar (1 - ybar) for binary y)."""
    c = _calibration_compute(_calibration_update(None, p, y, n_bins))
    return {k: c[k] for k in ("brier", "reliability", "resolution", "uncertainty", "residual")}


def _pr_from_cumulative(tps: np.ndarray, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(precision, recall) in scikit-learn's ``precision_recall_curve`` layout from the
    cumulative true / false positives at each distinct score, highest score first: recall
    descending, closed at (1, 0); precision 0/0 is 0, recall is 1 when there is no positive."""
    prec = ratio(tps, tps + fps)
    rec = np.ones(tps.size) if tps[-1] == 0 else tps / tps[-1]
    return np.r_[prec[::-1], 1.0], np.r_[rec[::-1], 0.0]


def _pr_curve(score, y) -> tuple[np.ndarray, np.ndarray]:
    """(precision, recall) in scikit-learn's ``precision_recall_curve`` layout."""
    s = np.asarray(score, np.float64).reshape(-1)
    t = np.asarray(y).reshape(-1)
    if s.shape != t.shape or s.size == 0 or not np.isfinite(s).all():
        raise ValueError("scores and labels need the same non-zero size and finite scores")
    if not np.isin(t, (0, 1)).all():
        raise ValueError("y must be binary (0/1)")
    order = np.argsort(s, kind="mergesort")[::-1]
    s, t = s[order], t[order].astype(np.float64)
    ends = np.r_[np.flatnonzero(np.diff(s)), t.size - 1]
    tps = np.cumsum(t)[ends]
    return _pr_from_cumulative(tps, 1 + ends - tps)


def _step_area(prec: np.ndarray, rec: np.ndarray) -> float:
    """AP of a :func:`_pr_curve`: ``sum_n (R_n - R_{n-1}) P_n``."""
    return float(max(0.0, -np.sum(np.diff(rec) * prec[:-1])))


def _trapezoid_area(prec: np.ndarray, rec: np.ndarray) -> float:
    """Trapezoidal area under a :func:`_pr_curve`."""
    return float(abs(np.trapezoid(prec, rec)))


def average_precision(p, y) -> float:
    """Step-wise AP, ``sum_n (R_n - R_{n-1}) P_n`` (= sklearn ``average_precision_score``)."""
    return _step_area(*_pr_curve(p, y))


def auc_pr_trapezoid(p, y) -> float:
    """Trapezoidal area under the PR curve (sklearn ``auc(recall, precision)``); not AP."""
    return _trapezoid_area(*_pr_curve(p, y))


def weighted_pr_areas(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """(:func:`average_precision`, :func:`auc_pr_trapezoid`) of samples given as positive /
    negative weights per distinct score, highest score first (scores of zero weight are
    skipped): the same curve and areas as on the samples repeated by their weights.

    >>> weighted_pr_areas(np.array([1.0, 0.0, 1.0]), np.array([0.0, 0.0, 1.0])) == (
    ...     average_precision([0.9, 0.1, 0.1], [1, 1, 0]), auc_pr_trapezoid([0.9, 0.1, 0.1], [1, 1, 0]))
    True
    """
    keep = (pos + neg) > 0
    prec, rec = _pr_from_cumulative(np.cumsum(pos[keep]), np.cumsum(neg[keep]))
    return _step_area(prec, rec), _trapezoid_area(prec, rec)
