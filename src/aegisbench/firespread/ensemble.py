"""Fire maps and the statistic of an ensemble, all derived from ignition times.

* burnt mask of frame ``t``: ``0 <= ignition_time <= t`` (frame 0 is the initial
  state, the seeds ignite at step 1);
* statistic ground truth (micro RV, seed 003 §3.2): ``burn_counts[t, y, x]`` = number
  of the ``N`` realizations in which cell ``(y, x)`` is burnt at frame ``t``; the
  burn probability is ``burn_counts / N``;
* macro RV ``Z_t`` (eq. 2, "number of unburnt trees"): ``n_trees - burnt cells``,
  with its ensemble mean and variance (population variance, ``ddof=0``).

>>> tau = np.array([[[1, -1], [2, 3]], [[1, 2], [-1, -1]]], np.int16)
>>> burn_counts(tau, 3)[:, 0, 1].tolist()
[0, 0, 1, 1]
>>> m, v = z_moments(tau, n_trees=4, n_frames=4)
>>> m.tolist(), v.tolist()
([4.0, 3.0, 2.0, 1.5], [0.0, 0.0, 0.0, 0.25])
"""

from __future__ import annotations

import numpy as np


def burnt_masks(ignition_time: np.ndarray, frames) -> np.ndarray:
    """Burnt masks ``(..., len(frames), H, W)`` bool of the given frames."""
    tau = np.asarray(ignition_time)
    f = np.asarray(frames, np.int64).reshape(-1)
    tau_e = tau[..., None, :, :]
    return (tau_e >= 0) & (tau_e <= f.reshape((-1, 1, 1)))


def burn_counts(ignition_time: np.ndarray, t_max: int) -> np.ndarray:
    """``(t_max + 1, H, W)`` int32: how many realizations have each cell burnt at each frame."""
    tau = np.asarray(ignition_time)
    n, h, w = tau.shape
    hw = h * w
    cells = np.broadcast_to(np.arange(hw), (n, hw))
    flat = tau.reshape(n, hw)
    ok = (flat >= 0) & (flat <= t_max)
    idx = flat[ok].astype(np.int64) * hw + cells[ok]
    hist = np.bincount(idx, minlength=(t_max + 1) * hw).reshape(t_max + 1, h, w)
    return np.cumsum(hist, axis=0).astype(np.int32)


def burnt_curves(ignition_time: np.ndarray, n_frames: int) -> np.ndarray:
    """``(N, n_frames)`` int64: burnt cells of each realization at frames ``0..n_frames-1``."""
    tau = np.asarray(ignition_time)
    n = tau.shape[0]
    flat = tau.reshape(n, -1).astype(np.int64)
    ok = (flat >= 0) & (flat < n_frames)
    rows = np.broadcast_to(np.arange(n)[:, None], flat.shape)
    hist = np.bincount(rows[ok] * n_frames + flat[ok], minlength=n * n_frames).reshape(n, n_frames)
    return np.cumsum(hist, axis=1)


def z_moments(ignition_time: np.ndarray, n_trees: int, n_frames: int) -> tuple[np.ndarray, np.ndarray]:
    """Ensemble mean and variance (ddof=0) of ``Z_t`` for frames ``0..n_frames-1``."""
    z = n_trees - burnt_curves(ignition_time, n_frames).astype(np.float64)
    return z.mean(axis=0), z.var(axis=0)


def dice(a: np.ndarray, b: np.ndarray, axis=(-2, -1)) -> np.ndarray:
    """Dice coefficient ``2|A n B| / (|A| + |B|)`` over ``axis``; two empty masks give 1.0
    (identical masks, no progression: the convention of the Dice strata).

    >>> float(dice(np.zeros((2, 2), bool), np.zeros((2, 2), bool)))
    1.0
    """
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    inter = (a & b).sum(axis=axis)
    tot = a.sum(axis=axis) + b.sum(axis=axis)
    return np.where(tot > 0, 2.0 * inter / np.maximum(tot, 1), 1.0)
