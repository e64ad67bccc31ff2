"""The heat-accumulation cellular automaton of seed 003 (Appendix B), batched.

Cell states: ``EMPTY`` (no tree, never changes), ``TREE`` (unburnt 'patch'),
``FIRE``, ``EMBER``, ``DEAD``. Heat ``q`` is kept in exact fixed point
(:data:`HEAT_UNITS` units per ``q_threshold``), so sums do not depend on order.
One step ``t-1 -> t`` updates every realization synchronously:

1. Heat transfer, eq. (6): every TREE cell gains ``sum q(k,l)`` over its FIRE
   neighbours in ``N_R`` plus ``q_die`` per EMBER neighbour (embers "radiate heat at
   a rate of q_die to adjacent non-fire patches"). At ``t = 1`` the seeds receive
   ``I_seed * q_threshold``. Heat saturates at ``I_seed * q_threshold`` (a cell
   holds at most a seed's heat; without a bound eq. (6) grows geometrically along
   the front).
2. Ignition: a TREE cell that gained heat in this step and whose heat exceeds
   ``q_threshold`` draws one Bernoulli(``p_ignite``) trial; success -> FIRE, and
   its ignition time is ``t``. ``S-Level = (1 - p_ignite) * 100``.
3. FIRE -> EMBER (after one step of fire). An EMBER that radiated in this step
   loses ``q_die``; when its heat is no longer above ``q_threshold`` it darkens
   -> DEAD and stops radiating.

The run ends at fuel depletion (no FIRE or EMBER cell in any realization) or at
``max_steps``. The result is the per-cell ignition time (``-1``: never burnt);
the burnt mask of frame ``t`` is ``0 <= ignition_time <= t`` and ``Z_t`` (unburnt
trees) is ``n_trees - burnt``.

Randomness: the trial of cell ``c`` at step ``t`` in realization ``r`` uses the
counter-based uniform of :mod:`aegisbench.firespread.streams` (key = SHA-256 of
``key``), so results are identical for any batch size or split into blocks.

>>> from aegisbench.firespread.params import FirespreadParams
>>> from aegisbench.firespread.layout import make_initial_condition
>>> p = FirespreadParams.from_dict({"grid": [16, 16], "realizations": 4})
>>> ic = make_initial_condition(p, "0.1.0", 0)
>>> ens = simulate(ic, HeatModel.from_params(p), 0.8, ("doc", 0, 20), range(4))
>>> ens.ignition_time.shape, ens.ignition_time.dtype.name
((4, 16, 16), 'int16')
>>> bool((simulate(ic, HeatModel.from_params(p), 0.8, ("doc", 0, 20), [2]).ignition_time[0] == ens.ignition_time[2]).all())
True
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aegisbench.firespread.layout import InitialCondition
from aegisbench.firespread.params import FirespreadParams
from aegisbench.firespread.streams import stream_key, uniforms_from_step_keys, step_keys

log = logging.getLogger(__name__)

EMPTY, TREE, FIRE, EMBER, DEAD = 0, 1, 2, 3, 4
HEAT_UNITS = 1024  # fixed-point heat units per q_threshold
MAX_CELLS_PER_BLOCK = 1 << 23  # realizations are processed in blocks of at most this many cells


def neighbourhood_offsets(kind: str, radius: int) -> tuple[tuple[int, int], ...]:
    """``(dy, dx)`` of ``N_R`` (the centre excluded): Moore = Chebyshev ball, von Neumann = L1 ball."""
    out = []
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            if (dy, dx) == (0, 0):
                continue
            if kind == "von_neumann" and abs(dy) + abs(dx) > radius:
                continue
            out.append((dy, dx))
    return tuple(out)


@dataclass(frozen=True)
class HeatModel:
    """Physics of the CA in fixed-point heat units (see module docstring)."""

    offsets: tuple[tuple[int, int], ...]
    q_threshold: int
    q_seed: int
    q_die: int
    max_steps: int = 2000

    def __post_init__(self) -> None:
        if not self.offsets:
            raise ValueError("neighbourhood is empty")
        if min(self.q_threshold, self.q_die) < 1:
            raise ValueError("q_threshold and q_die must be positive")
        if self.q_seed <= self.q_threshold:
            raise ValueError("seed heat I_seed * q_threshold must exceed q_threshold (I_seed > 1)")
        if not 1 <= self.max_steps < 32767:
            raise ValueError("max_steps must lie in [1, 32766] (ignition times are int16)")
        if self.q_seed * len(self.offsets) >= 1 << 30:
            raise ValueError("heat would overflow int32")

    @property
    def radius(self) -> int:
        return max(max(abs(dy), abs(dx)) for dy, dx in self.offsets)

    @property
    def q_max(self) -> int:
        return self.q_seed

    @classmethod
    def from_params(cls, p: FirespreadParams) -> "HeatModel":
        scale = HEAT_UNITS / p.q_threshold
        return cls(offsets=neighbourhood_offsets(p.neighbourhood, p.radius), q_threshold=HEAT_UNITS,
                   q_seed=int(round(p.i_seed * HEAT_UNITS)), q_die=max(1, int(round(p.q_die * scale))),
                   max_steps=p.max_steps)


@dataclass(frozen=True, eq=False)
class Ensemble:
    """Ignition times (n, H, W) int16 (-1 = never), the step each realization reached fuel
    depletion, and whether it was cut at ``max_steps`` instead."""

    ignition_time: np.ndarray
    n_steps: np.ndarray
    truncated: np.ndarray

    @property
    def t_max(self) -> int:
        return int(self.n_steps.max(initial=0))


def _key(key: Sequence | np.uint64) -> np.uint64:
    if isinstance(key, np.uint64):
        return key
    return stream_key("firespread-ca", *key)


def simulate(ic: InitialCondition, model: HeatModel, p_ignite: float, key: Sequence | np.uint64,
             realizations: Sequence[int] | np.ndarray, backend: str = "numpy", device: str | None = None,
             rng: str = "torch") -> Ensemble:
    """Run ``realizations`` (their indices select the random streams) to fuel depletion.

    ``key`` names the ensemble (e.g. ``(version, ic, s_level)``); ``backend`` is ``"numpy"``
    (sparse, bit-deterministic) or ``"torch"`` (dense, CPU/CUDA, see
    :mod:`aegisbench.firespread.torch_backend`; ``rng="counter"`` makes it draw the same
    uniforms as numpy).
    """
    if not 0.0 <= p_ignite <= 1.0:
        raise ValueError(f"p_ignite must lie in [0, 1], got {p_ignite}")
    reals = np.asarray(list(realizations) if not isinstance(realizations, np.ndarray) else realizations,
                       dtype=np.int64).reshape(-1)
    if (reals < 0).any():
        raise ValueError("realization indices must be >= 0")
    k = _key(key)
    if backend == "torch":
        from aegisbench.firespread.torch_backend import simulate_torch
        return simulate_torch(ic, model, p_ignite, k, reals, device=device, rng=rng)
    if backend != "numpy":
        raise ValueError(f"backend must be 'numpy' or 'torch', got {backend!r}")
    h, w = ic.shape
    r = model.radius
    block = max(1, MAX_CELLS_PER_BLOCK // ((h + 2 * r) * (w + 2 * r)))
    parts = [_simulate_block(ic, model, p_ignite, k, reals[i:i + block]) for i in range(0, len(reals), block)]
    if not parts:
        return Ensemble(np.zeros((0, h, w), np.int16), np.zeros(0, np.int32), np.zeros(0, bool))
    return Ensemble(np.concatenate([e.ignition_time for e in parts]),
                    np.concatenate([e.n_steps for e in parts]), np.concatenate([e.truncated for e in parts]))


def _simulate_block(ic: InitialCondition, m: HeatModel, p: float, key: np.uint64,
                    reals: np.ndarray) -> Ensemble:
    """Sparse update: only the radiating cells (FIRE/EMBER) and their neighbours are touched."""
    h, w = ic.shape
    r = m.radius
    hp, wp = h + 2 * r, w + 2 * r
    P = hp * wp
    B = len(reals)
    tree_p = np.zeros((hp, wp), np.uint8)
    tree_p[r:r + h, r:r + w] = ic.tree
    state = np.tile(tree_p.ravel(), B)  # TREE where fuel, EMPTY elsewhere (incl. padding)
    q = np.zeros(B * P, np.int32)
    gain = np.zeros(B * P, np.int32)
    owner = np.zeros(B * P, np.int32)
    tau = np.full(B * P, -1, np.int16)
    offs = np.array([dy * wp + dx for dy, dx in m.offsets], np.int64)
    base = np.arange(B, dtype=np.int64) * P
    seeds_p = (ic.seeds[:, 0] + r) * wp + (ic.seeds[:, 1] + r)
    rad_idx = np.zeros(0, np.int64)   # radiating cells (FIRE or EMBER), global flat index
    rad_q = np.zeros(0, np.int32)     # their own heat
    rad_fire = np.zeros(0, bool)      # FIRE (else EMBER)
    n_steps = np.zeros(B, np.int32)
    active = np.ones(B, bool)
    t = 0
    for t in range(1, m.max_steps + 1):
        if t == 1:
            targets = (base[:, None] + seeds_p[None, :]).ravel()
            weights = np.full(targets.size, m.q_seed, np.int32)
        else:
            heat = np.where(rad_fire, rad_q, np.int32(m.q_die)).astype(np.int32)
            targets = (rad_idx[:, None] + offs[None, :]).ravel()
            keep = state[targets] == TREE
            targets = targets[keep]
            weights = np.repeat(heat, len(offs))[keep]
        if targets.size:
            np.add.at(gain, targets, weights)
            ar = np.arange(targets.size, dtype=np.int32)
            owner[targets] = ar
            uniq = targets[owner[targets] == ar]
            qn = np.minimum(q[uniq] + gain[uniq], m.q_max)
            q[uniq] = qn
            gain[uniq] = 0
            cand = uniq[qn > m.q_threshold]
        else:
            cand = np.zeros(0, np.int64)
        if p >= 1.0 or cand.size == 0:
            ign = cand
        elif p <= 0.0:
            ign = cand[:0]
        else:
            b = cand // P
            cell = cand - b * P
            y, x = cell // wp - r, cell % wp - r
            u = uniforms_from_step_keys(step_keys(key, reals, t)[b], y * w + x)
            ign = cand[u < p]
        if rad_idx.size:  # FIRE -> EMBER; embers that radiated cool down, dark ones die
            cooled = rad_q - np.where(rad_fire, 0, m.q_die).astype(np.int32)
            alive = rad_fire | (cooled > m.q_threshold)
            state[rad_idx[rad_fire]] = EMBER
            state[rad_idx[~alive]] = DEAD
            rad_idx, rad_q = rad_idx[alive], cooled[alive]
        ign = np.sort(ign)
        state[ign] = FIRE
        tau[ign] = t
        rad_idx = np.concatenate([rad_idx, ign])
        rad_q = np.concatenate([rad_q, q[ign]])
        rad_fire = np.concatenate([np.zeros(rad_idx.size - ign.size, bool), np.ones(ign.size, bool)])
        still = np.bincount(rad_idx // P, minlength=B) > 0
        n_steps[active & ~still] = t
        active = still
        if not active.any():
            break
    truncated = active.copy()
    n_steps[active] = t
    if truncated.any():
        log.warning("%d of %d realizations still burning at max_steps=%d", int(truncated.sum()), B, m.max_steps)
    times = tau.reshape(B, hp, wp)[:, r:r + h, r:r + w].copy()
    return Ensemble(times, n_steps, truncated)
