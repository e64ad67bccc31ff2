"""Resampling and ratio statistics, once: the seeded bootstrap draw, resample
multiplicities, percentile intervals with their all-0/0 fallback, and recall / precision /
F1 from TP, FP, FN counts (:func:`prf`, also behind :mod:`aegisbench.metrics.detection`). A leaf: imports only numpy and
:mod:`aegisbench.hashing` (every draw comes from ``rng_for(*key)``).

>>> idx = resample_indices(4, ("doc",), 3)
>>> idx.shape, multiplicities(idx, 4).sum(axis=1).tolist()
((3, 4), [4, 4, 4])
>>> percentile_interval([np.nan, np.nan], fallback=(0.0, 0.0))
(0.0, 0.0)
>>> {k: float(v) for k, v in count_ratios([3, 1, 1]).items()}
{'recall': 0.75, 'precision': 0.75, 'f1': 0.75}
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from aegisbench.hashing import rng_for

NAN_INTERVAL = (float("nan"), float("nan"))


def resample_indices(n: int, key: Sequence, n_resamples: int = 1000) -> np.ndarray:
    """(B, n) indices drawn with replacement from ``rng_for(*key)``: the one bootstrap draw
    (the call ``scipy.stats.bootstrap`` makes, so its intervals are reproducible with scipy)."""
    if n < 1:
        raise ValueError("need at least one image to bootstrap")
    return rng_for(*key).integers(0, n, (n_resamples, n))


def multiplicities(idx: np.ndarray, n: int) -> np.ndarray:
    """(B, n) counts of each item in each resample."""
    B = idx.shape[0]
    return np.bincount((idx + (np.arange(B) * n)[:, None]).ravel(), minlength=B * n).reshape(B, n)


def percentile_interval(samples, percentiles: tuple[float, float] = (2.5, 97.5),
                        fallback: tuple = NAN_INTERVAL) -> tuple:
    """Linear-interpolated percentiles of the finite samples; ``fallback`` when there are
    none (NaN, NaN by default; resamples where a ratio is 0/0 are NaN and left out, and
    when all are, callers pass the point value's interval)."""
    samples = np.asarray(samples, np.float64)
    samples = samples[np.isfinite(samples)]
    if samples.size == 0:
        return tuple(fallback)
    lo, hi = np.percentile(samples, percentiles)
    return float(lo), float(hi)


def percentile_intervals(samples, percentiles: tuple[float, float] = (2.5, 97.5),
                         fallback: tuple = NAN_INTERVAL) -> list[tuple]:
    """:func:`percentile_interval` of each row of ``samples`` (k, B), the same numbers from
    one sort of all rows: numpy's linear method step for step (virtual index ``(n - 1) * q``,
    neighbours and gamma as ``_get_indexes`` / ``_get_gamma`` give them, ``_lerp``'s two
    formulas) in float64 arithmetic. A row with a non-finite sample, or whose chosen samples
    are zeros while it holds a -0.0 (the sort may place it among equal zeros unlike numpy's
    partition), goes through :func:`percentile_interval`."""
    rows = np.asarray(samples, np.float64)
    if rows.ndim != 2:
        raise ValueError(f"samples must be (k, B), got shape {rows.shape}")
    k, n = rows.shape
    try:
        q = _quantiles(tuple(percentiles), tuple(map(type, percentiles)))
    except TypeError:  # unhashable: not a flat sequence of numbers
        q = None
    if n == 0 or q is None:
        return [percentile_interval(row, percentiles, fallback) for row in rows]
    cols, gamma = [0, -1], []
    for qi in q:
        vi = (n - 1) * qi
        lo = -1 if vi >= n - 1 else (0 if vi < 0 else math.floor(vi))
        cols += [lo, lo if lo == -1 or vi < 0 else lo + 1]
        gamma.append(vi - lo)
    out = []  # NaN sorts last and -inf first: columns 0 and -1 say whether a row is finite
    for row, (first, last, *ab) in zip(rows, np.sort(rows, axis=1)[:, cols].tolist()):
        if not (math.isfinite(first) and math.isfinite(last)) or (0.0 in ab and _has_negative_zero(row)):
            out.append(percentile_interval(row, percentiles, fallback))
            continue
        out.append(tuple(_lerp(a, b, t) for a, b, t in zip(ab[0::2], ab[1::2], gamma)))
    return out


@functools.lru_cache(maxsize=16)
def _quantiles(percentiles: tuple, types: tuple) -> tuple[float, ...] | None:
    """``percentiles / 100`` as ``np.percentile`` computes them (None when they are not
    float64 or not in [0, 100]: :func:`percentile_interval` then decides); ``types`` keeps
    2.5 and ``np.float32(2.5)`` apart in the cache."""
    q = np.true_divide(percentiles, 100)
    return tuple(q.tolist()) if q.dtype == np.float64 and q.ndim == 1 and ((q >= 0) & (q <= 1)).all() else None


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's ``_lerp`` on floats: ``a + (b - a) t``, or ``b - (b - a)(1 - t)`` for t >= 0.5."""
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


def _has_negative_zero(row: np.ndarray) -> bool:
    return bool((np.signbit(row) & (row == 0)).any())


def ratio(num, den, empty: float = 0.0) -> np.ndarray:
    """``num / den`` elementwise (float64), ``empty`` where ``den <= 0`` (a 0/0 ratio)."""
    return np.divide(num, den, out=np.full(np.shape(num), empty, np.float64), where=np.asarray(den) > 0)


def prf(tp, fp, fn, empty: float = 0.0) -> dict[str, np.ndarray]:
    """recall ``TP / (TP + FN)``, precision ``TP / (TP + FP)``, F1 ``2 TP / (2 TP + FP + FN)``:
    the package's one P/R/F1. The sums are made in the counts' own type (integer counts stay
    exact integers up to the division), the ratios in float64; a 0/0 ratio is ``empty``.

    >>> {k: float(v) for k, v in prf(np.int64(3), np.int64(1), np.int64(0), np.nan).items()}
    {'recall': 1.0, 'precision': 0.75, 'f1': 0.8571428571428571}
    """
    return {"recall": ratio(tp, tp + fn, empty), "precision": ratio(tp, tp + fp, empty),
            "f1": ratio(2 * tp, 2 * tp + fp + fn, empty)}


def count_ratios(summed, empty: float = 0.0) -> dict[str, np.ndarray]:
    """:func:`prf` of (..., 3) TP/FP/FN counts, taken as float64 (bootstrap resamples sum
    weighted counts); a 0/0 ratio is ``empty``: 0 by default (threshold
    selection, where an undefined F1 is no better than 0), NaN for a bootstrap resample (then
    left out) and for a reported value (a null row noted "0/0", :mod:`aegisbench.metrics`)."""
    summed = np.asarray(summed, np.float64)
    return prf(summed[..., 0], summed[..., 1], summed[..., 2], empty)
