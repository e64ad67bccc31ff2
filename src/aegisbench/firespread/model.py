"""Seed 003's stochastic fire-spread model (Appendix B and its released NetLogo code), exactly.

Cell states: ``EMPTY`` (no tree, never changes), ``TREE`` (green patch), ``FIRE``,
``EMBER``, ``DEAD`` (burnt out). Fires and embers are *burning* (NetLogo's
``p_ign_state = 1``) and their heat ``q`` counts for their neighbours.

Setup (frame 1): every fire seed gets heat ``I_seed * q_threshold`` and passes the same
test as any tree: it ignites iff ``q > q_threshold`` and a uniform draw is below
``p_ignite``. Then, per tick ``t = 1, 2, ...`` (NetLogo's ``go``), until nothing burns:

1. The fires of this tick are asked in random order. Each asks its 4 orthogonal
   neighbours that are still trees (``patches in-radius 1``), in random order, to
   *ignite*: the tree adds to its heat the sum of the heat of its 8 Moore neighbours
   that are burning at that moment (a cell ignited earlier in this tick counts at once;
   an ember's heat may be negative), and if its heat exceeds ``q_threshold`` it ignites
   with probability ``p_ignite`` -- one trial per ask. A cell ignited in tick ``t`` has
   ignition time ``t + 1`` and asks in the next tick. The asking fire becomes an ember.
2. Every ember loses ``q_die`` of heat (not floored) and dies after ``ember_ticks`` (12:
   NetLogo's colour fades 0.3 a tick from red 15 to below 11.5).

The world is not wrapped. ``S-Level = (1 - p_ignite) * 100``; on a one-cell-wide
corridor the per-link ignition probability is ``p_ignite``. Heat is float64 as in
NetLogo and every draw comes, in the order the model makes them, from one SplitMix64
stream per realization keyed by SHA-256 of the ensemble key and the realization index,
so a realization is the same bytes in any batch, block or process. The kernel is
compiled with numba (one thread); the result is the per-cell ignition time
(``-1``: never burnt).

>>> import numpy as np
>>> tree = np.ones((1, 8), bool)
>>> simulate_realizations(tree, [(0, 0)], 0, 1)[0].tolist()
[[1, 2, 3, 4, 5, 6, 7, 8]]
>>> a = simulate_realizations(np.ones((16, 16), bool), [(8, 8)], 30, 5, seed=3)
>>> b = simulate_realizations(np.ones((16, 16), bool), [(8, 8)], 30, 5, seed=3)
>>> a.dtype.name, a.shape, bool((a == b).all())
('int16', (5, 16, 16), True)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numba
import numpy as np

from aegisbench.fields import check_float, check_int
from aegisbench.firespread.layout import InitialCondition
from aegisbench.params.firespread import FirespreadParams
from aegisbench.firespread.streams import mix64, stream_key
from aegisbench.schema import Declared, param_of

log = logging.getLogger(__name__)

EMPTY, TREE, FIRE, EMBER, DEAD = 0, 1, 2, 3, 4
MAX_CELLS_PER_BLOCK = 1 << 23  # ignition-time output of one kernel call, in cells


def neighbourhood_offsets(kind: str, radius: int) -> tuple[tuple[int, int], ...]:
    """``(dy, dx)`` of a neighbourhood (the centre excluded): Moore = Chebyshev ball,
    von Neumann = L1 ball (used by the spread-heuristic forecaster)."""
    out = []
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            if (dy, dx) == (0, 0) or (kind == "von_neumann" and abs(dy) + abs(dx) > radius):
                continue
            out.append((dy, dx))
    return tuple(out)


@dataclass(frozen=True)
class SeedModel(Declared):
    """The physics of seed 003's model (defaults: the seed's parameters). Each field is
    declared once, in :class:`FirespreadParams` (type, bounds, unit; ``max_steps`` <= 32000:
    ignition times are int16), and checked here as a ``ValueError`` naming ``SeedModel.<field>``.

    >>> SeedModel(max_steps=40000)
    Traceback (most recent call last):
    ...
    aegisbench.fields.FieldError: SeedModel.max_steps must lie in [1, 32000], got 40000
    """

    q_threshold: float = param_of(FirespreadParams, "q_threshold")
    i_seed: float = param_of(FirespreadParams, "i_seed")
    q_die: float = param_of(FirespreadParams, "q_die")
    ember_ticks: int = param_of(FirespreadParams, "ember_ticks")
    max_steps: int = param_of(FirespreadParams, "max_steps")

    @property
    def q_seed(self) -> float:
        return float(self.i_seed) * float(self.q_threshold)

    @classmethod
    def from_params(cls, p: FirespreadParams) -> "SeedModel":
        return cls(q_threshold=p.q_threshold, i_seed=p.i_seed, q_die=p.q_die, ember_ticks=p.ember_ticks,
                   max_steps=p.max_steps)


MODEL_FIELDS = tuple(f.name for f in fields(SeedModel))


@dataclass(frozen=True, eq=False)
class Ensemble:
    """Ignition times (n, H, W) int16 (-1 = never), the ticks each realization ran until
    nothing burnt, and whether it was cut at ``max_steps`` instead."""

    ignition_time: np.ndarray
    n_steps: np.ndarray
    truncated: np.ndarray

    @property
    def t_max(self) -> int:
        return int(self.n_steps.max(initial=0))


_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, inline="always")
def _uniform(st):
    """Next uniform in [0, 1) of the SplitMix64 stream whose state is ``st[0]``."""
    st[0] += _GAMMA
    z = st[0]
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@numba.njit(cache=True)
def _shuffle(a, n, st):
    for i in range(n - 1, 0, -1):
        j = int(_uniform(st) * (i + 1))
        a[i], a[j] = a[j], a[i]


@numba.njit(cache=True)
def _run_block(tree_p, seeds_p, wp, q_th, q_seed, q_die, ember_ticks, p, keys, max_steps,
               tau_out, n_steps, truncated):
    """Run one realization per key on the padded tree map (border = EMPTY)."""
    P = tree_p.size
    h, w = tau_out.shape[1], tau_out.shape[2]
    orth = np.array([-wp, wp, -1, 1], np.int64)
    moore = np.array([-wp - 1, -wp, -wp + 1, -1, 1, wp - 1, wp, wp + 1], np.int64)
    state = np.empty(P, np.uint8)
    q = np.empty(P, np.float64)
    age = np.empty(P, np.int32)
    tau = np.empty(P, np.int16)
    fires = np.empty(P, np.int64)
    new_fires = np.empty(P, np.int64)
    embers = np.empty(P, np.int64)
    nb = np.empty(4, np.int64)
    st = np.empty(1, np.uint64)
    for b in range(keys.size):
        st[0] = keys[b]
        state[:] = tree_p
        q[:] = 0.0
        tau[:] = -1
        n_f = 0
        n_e = 0
        for i in range(seeds_p.size):
            c = seeds_p[i]
            q[c] = q_seed
            if q[c] > q_th and _uniform(st) < p:
                state[c] = FIRE
                tau[c] = 1
                fires[n_f] = c
                n_f += 1
        t = 0
        while n_f + n_e > 0 and t < max_steps:
            t += 1
            _shuffle(fires, n_f, st)
            n_new = 0
            for k in range(n_f):
                f = fires[k]
                m = 0
                for d in range(4):
                    c = f + orth[d]
                    if state[c] == TREE:
                        nb[m] = c
                        m += 1
                _shuffle(nb, m, st)
                for j in range(m):
                    c = nb[j]
                    s = 0.0
                    for d in range(8):
                        x = state[c + moore[d]]
                        if x == FIRE or x == EMBER:
                            s += q[c + moore[d]]
                    q[c] += s
                    if q[c] > q_th and _uniform(st) < p:
                        state[c] = FIRE
                        tau[c] = t + 1
                        new_fires[n_new] = c
                        n_new += 1
                state[f] = EMBER
                age[f] = 0
                embers[n_e] = f
                n_e += 1
            k = 0
            while k < n_e:  # fade-embers: each ember acts on itself only, so order is free
                e = embers[k]
                age[e] += 1
                q[e] -= q_die
                if age[e] >= ember_ticks:
                    state[e] = DEAD
                    n_e -= 1
                    embers[k] = embers[n_e]
                else:
                    k += 1
            fires[:n_new] = new_fires[:n_new]
            n_f = n_new
        n_steps[b] = t
        truncated[b] = n_f + n_e > 0
        for y in range(h):
            for x in range(w):
                tau_out[b, y, x] = tau[(y + 1) * wp + x + 1]


def _key(key: Sequence | np.uint64) -> np.uint64:
    if isinstance(key, np.uint64):
        return key
    return stream_key("firespread-seed003", *key)


def _check_map(tree, seeds) -> tuple[np.ndarray, np.ndarray]:
    tree = np.asarray(tree)
    if tree.dtype != np.bool_:
        raise TypeError(f"tree must be a boolean (H, W) map, got dtype {tree.dtype}")
    if tree.ndim != 2 or min(tree.shape) < 1:
        raise ValueError(f"tree must be a 2-D (H, W) map, got shape {tree.shape}")
    seeds = np.asarray(seeds)
    if seeds.size and not np.issubdtype(seeds.dtype, np.integer):
        raise TypeError(f"seeds must be integer (row, col) pairs, got dtype {seeds.dtype}")
    seeds = seeds.astype(np.int64).reshape(-1, 2) if seeds.size else np.zeros((0, 2), np.int64)
    if len(seeds) == 0:
        raise ValueError("seeds: at least one fire seed is needed")
    h, w = tree.shape
    for i, (y, x) in enumerate(seeds.tolist()):
        if not (0 <= y < h and 0 <= x < w):
            raise ValueError(f"seeds[{i}] = ({y}, {x}) lies outside the {h}x{w} grid")
        if not tree[y, x]:
            raise ValueError(f"seeds[{i}] = ({y}, {x}) is not a tree cell")
    if len({(int(a), int(b)) for a, b in seeds}) != len(seeds):
        raise ValueError("seeds: duplicate fire seeds")
    return tree, seeds


def simulate(ic: InitialCondition, model: SeedModel, p_ignite: float, key: Sequence | np.uint64,
             realizations: Sequence[int] | np.ndarray) -> Ensemble:
    """Run ``realizations`` (their indices select the random streams) until nothing burns.

    ``key`` names the ensemble (e.g. ``(version, ic, s_level)``).
    """
    check_float(p_ignite, "p_ignite", 0.0, 1.0)
    tree, seeds = _check_map(ic.tree, ic.seeds)
    reals = np.asarray(list(realizations) if not isinstance(realizations, np.ndarray) else realizations,
                       dtype=np.int64).reshape(-1)
    if (reals < 0).any():
        raise ValueError("realization indices must be >= 0")
    k = _key(key)
    keys = mix64(mix64(np.uint64(k) ^ reals.astype(np.uint64)) ^ np.uint64(0x5EED003))
    h, w = tree.shape
    hp, wp = h + 2, w + 2
    tree_p = np.zeros((hp, wp), np.uint8)
    tree_p[1:-1, 1:-1] = tree
    seeds_p = (seeds[:, 0] + 1) * wp + seeds[:, 1] + 1
    n = len(reals)
    tau = np.empty((n, h, w), np.int16)
    n_steps = np.zeros(n, np.int32)
    truncated = np.zeros(n, np.bool_)
    block = max(1, MAX_CELLS_PER_BLOCK // (h * w))
    for i in range(0, n, block):
        _run_block(tree_p.ravel(), seeds_p, wp, float(model.q_threshold), model.q_seed, float(model.q_die),
                   int(model.ember_ticks), float(p_ignite), keys[i:i + block], int(model.max_steps),
                   tau[i:i + block], n_steps[i:i + block], truncated[i:i + block])
    if truncated.any():
        log.warning("%d of %d realizations still burning at max_steps=%d", int(truncated.sum()), n,
                    model.max_steps)
    return Ensemble(tau, n_steps, truncated)


def simulate_realizations(tree, seeds, s_level, n: int, seed: int = 0, **model_params) -> np.ndarray:
    """``n`` realizations of seed 003's model on ``tree`` (bool (H, W)) lit at ``seeds``
    (int (k, 2) of (row, col)) at S-Level ``s_level`` (p_ignite = 1 - S/100): int16 ignition
    times (n, H, W), seeds at frame 1, -1 for never burnt. ``model_params``: the fields of
    :class:`SeedModel` (``q_threshold``, ``i_seed``, ``q_die``, ``ember_ticks``,
    ``max_steps``). Same arguments, same bytes.

    >>> simulate_realizations(np.ones((1, 4), bool), [(0, 1)], 0, 2).tolist()
    [[[2, 1, 2, 3]], [[2, 1, 2, 3]]]
    """
    unknown = sorted(set(model_params) - set(MODEL_FIELDS))
    if unknown:
        raise ValueError(f"unknown model parameter(s) {unknown}; expected {list(MODEL_FIELDS)}")
    check_float(s_level, "s_level", 0, 100)
    check_int(n, "n", lo=0)
    check_int(seed, "seed")
    tree, seeds = _check_map(tree, seeds)
    ic = InitialCondition(index=0, tree=tree, seeds=seeds)
    ens = simulate(ic, SeedModel(**model_params), (100.0 - float(s_level)) / 100.0,
                   ("simulate_realizations", int(seed)), np.arange(int(n)))
    return ens.ignition_time
