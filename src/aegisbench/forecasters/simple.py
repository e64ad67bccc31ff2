"""Reference forecasters of the fire-spread task and the inputs they see.

A forecaster gets, per target realization, the forest layout, the S-level and the
observed burnt masks of frames ``1..observe``, and returns the burn probability of
each cell at frames ``observe+1 .. observe+horizon``:

* ``oracle``: the ensemble statistic ``burn_counts / N`` of the initial condition
  (the statistic ground truth; it ignores the observation);
* ``persistence``: the last observed frame, repeated;
* ``spread_heuristic``: fire advances from the active front (cells ignited in the
  last two observed frames) along geodesic distance through trees at the speed seen
  so far; ``P = clip(v (t - observe) - d + 1, 0, 1)``; no front = persistence;
* ``convlstm``: see :mod:`aegisbench.forecasters.convlstm`.

>>> tree = np.ones((1, 5, 5), bool); obs = np.zeros((1, 2, 5, 5), bool)
>>> obs[:, 0, 2, 2] = True; obs[:, 1, 1:4, 1:4] = True
>>> float(spread_heuristic(tree, obs, horizon=1)[0, 0].sum())
25.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aegisbench.firespread.ensemble import burnt_masks
from aegisbench.firespread.model import neighbourhood_offsets
from aegisbench.dataset.firespread_truth import EnsembleTruth, TaskSpec

BASELINES = ("oracle", "persistence", "spread_heuristic", "convlstm")


@dataclass(frozen=True, eq=False)
class ForecastInputs:
    """A batch of forecast problems of one S-level: keys, layouts, observed frames."""

    s_level: int
    ics: np.ndarray           # (n,)
    realizations: np.ndarray  # (n,)
    tree: np.ndarray          # (n, H, W) bool
    observed: np.ndarray      # (n, observe, H, W) bool: frames 1..observe
    frames: np.ndarray        # (horizon,) target frames

    @property
    def p_ignite(self) -> float:
        return (100 - self.s_level) / 100.0


def inputs_for(truth: dict[tuple[int, int], EnsembleTruth], task: TaskSpec, s_level: int) -> ForecastInputs:
    """The forecast problems of every evaluation realization of one S-level (sorted keys)."""
    ics, reals, trees, obs = [], [], [], []
    for (s, ic), et in sorted(truth.items()):
        if s != s_level:
            continue
        for j, r in enumerate(et.realizations):
            ics.append(ic)
            reals.append(int(r))
            trees.append(et.tree)
            obs.append(burnt_masks(et.ignition_time[j], np.arange(1, task.observe + 1)))
    return ForecastInputs(s_level, np.array(ics, np.int64), np.array(reals, np.int64), np.array(trees, bool),
                          np.array(obs, bool), task.frames)


def oracle(inputs: ForecastInputs, truth: dict[tuple[int, int], EnsembleTruth], dtype=np.float32) -> np.ndarray:
    """``(n, horizon, H, W)``: the ensemble burn frequency of each target's initial condition,
    rounded to float32 and then to ``dtype`` (computed once per initial condition)."""
    ics, inv = np.unique(inputs.ics, return_inverse=True)
    per_ic = np.stack([truth[(inputs.s_level, int(ic))].probability(inputs.frames) for ic in ics])
    return per_ic.astype(np.float32).astype(dtype, copy=False)[np.asarray(inv).reshape(-1)]


def persistence(observed: np.ndarray, horizon: int) -> np.ndarray:
    """``(n, horizon, H, W)``: the last observed frame, repeated."""
    last = np.asarray(observed)[:, -1].astype(np.float32)
    return np.repeat(last[:, None], horizon, axis=1)


def _dilate(mask: np.ndarray, offsets) -> np.ndarray:
    out = mask.copy()
    h, w = mask.shape[-2:]
    for dy, dx in offsets:
        ys, yd = slice(max(0, -dy), h - max(0, dy)), slice(max(0, dy), h - max(0, -dy))
        xs, xd = slice(max(0, -dx), w - max(0, dx)), slice(max(0, dx), w - max(0, -dx))
        out[..., yd, xd] |= mask[..., ys, xs]
    return out


def _dilate_moore(mask: np.ndarray) -> np.ndarray:
    """:func:`_dilate` by the Moore neighbourhood of radius 1, as two separable passes."""
    rows = mask.copy()
    rows[..., 1:, :] |= mask[..., :-1, :]
    rows[..., :-1, :] |= mask[..., 1:, :]
    out = rows.copy()
    out[..., 1:] |= rows[..., :-1]
    out[..., :-1] |= rows[..., 1:]
    return out


def geodesic_distance(source: np.ndarray, passable: np.ndarray, offsets=None) -> np.ndarray:
    """Steps from ``source`` through ``passable`` cells (Moore by default); -1 = unreachable.
    Over a batch ``(n, H, W)``, a map stops being grown once its front is exhausted.

    >>> src = np.zeros((2, 1, 4), bool); src[:, 0, 0] = True
    >>> geodesic_distance(src, np.array([[[1, 1, 0, 1]], [[1, 1, 1, 1]]], bool)).tolist()
    [[[0, 1, -1, -1]], [[0, 1, 2, 3]]]
    """
    moore = not offsets or tuple(map(tuple, offsets)) == neighbourhood_offsets("moore", 1)
    grow = _dilate_moore if moore else (lambda m: _dilate(m, offsets))
    source, passable = np.asarray(source, bool), np.asarray(passable, bool)
    shape = np.broadcast_shapes(source.shape, passable.shape)
    src = np.broadcast_to(source, shape).reshape(-1, *shape[-2:])
    ok = np.broadcast_to(passable, shape).reshape(-1, *shape[-2:])
    dist = np.where(src, 0, -1).astype(np.int32)
    live = np.arange(len(src))
    reached, ok, sub = src.copy(), ok, dist.copy()
    d = 0
    while live.size:
        d += 1
        grown = grow(reached) & ok & ~reached
        alive = grown.reshape(len(grown), -1).any(axis=1)
        if not alive.all():
            dist[live[~alive]] = sub[~alive]
            live, reached, ok, sub, grown = live[alive], reached[alive], ok[alive], sub[alive], grown[alive]
        sub[grown] = d
        reached |= grown
    return dist.reshape(shape)


def spread_heuristic(tree: np.ndarray, observed: np.ndarray, horizon: int) -> np.ndarray:
    """``(n, horizon, H, W)`` float32 forecasts of the geodesic-front heuristic."""
    tree = np.asarray(tree, bool)
    obs = np.asarray(observed, bool)
    n, k = obs.shape[:2]
    last = obs[:, -1]
    front = last & ~(obs[:, -3] if k >= 3 else np.zeros_like(last))
    d_front = geodesic_distance(front, tree & ~last)
    d_seed = geodesic_distance(obs[:, 0], tree)
    reach = np.where(last, d_seed, -1).reshape(n, -1).max(axis=1)
    v = np.clip(reach / max(k - 1, 1), 0.05, 1.0) if k > 1 else np.ones(n)
    lead = np.arange(1, horizon + 1, dtype=np.float32)
    prob = np.clip(v[:, None, None, None] * lead[None, :, None, None] - d_front[:, None] + 1, 0, 1)
    prob = np.where((d_front >= 1)[:, None] & front.any(axis=(1, 2))[:, None, None, None], prob, 0.0)
    return np.maximum(prob, last[:, None]).astype(np.float32)
