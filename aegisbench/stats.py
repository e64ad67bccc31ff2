"""Resampling and ratio statistics, once: the seeded bootstrap draw, resample
multiplicities, percentile intervals with their all-0/0 fallback, and pooled
recall / precision / F1 from TP, FP, FN counts. A leaf: imports only numpy and
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


def ratio(num, den, empty: float = 0.0) -> np.ndarray:
    """``num / den`` elementwise (float64), ``empty`` where ``den <= 0`` (a 0/0 ratio)."""
    return np.divide(num, den, out=np.full(np.shape(num), empty, np.float64), where=np.asarray(den) > 0)


def count_ratios(summed, empty: float = 0.0) -> dict[str, np.ndarray]:
    """recall ``TP / (TP + FN)``, precision ``TP / (TP + FP)``, F1 ``2 TP / (2 TP + FP + FN)``
    from (..., 3) TP/FP/FN counts; a 0/0 ratio is ``empty``: 0 by default (threshold
    selection, where an undefined F1 is no better than 0), NaN for a bootstrap resample (then
    left out) and for a reported value (a null row noted "0/0", :mod:`aegisbench.metrics`)."""
    summed = np.asarray(summed, np.float64)
    tp, fp, fn = summed[..., 0], summed[..., 1], summed[..., 2]
    return {"recall": ratio(tp, tp + fn, empty), "precision": ratio(tp, tp + fp, empty),
            "f1": ratio(2 * tp, 2 * tp + fp + fn, empty)}
