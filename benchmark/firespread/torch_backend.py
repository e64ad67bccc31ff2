"""Dense torch backend of the fire-spread CA (CPU or CUDA).

Same rules and fixed-point heat as :mod:`aegisbench.firespread.model`, computed on
whole ``(B, H, W)`` tensors (shifted-slice neighbourhood sums), which suits GPUs.
With ``rng="torch"`` (default) the trials use a ``torch.Generator`` seeded from
SHA-256 of ``(key, first realization, count)``: statistically equivalent to the
numpy backend and reproducible for the same batching, but not the same draws.
With ``rng="counter"`` every trial uses the counter-based uniform of
:mod:`aegisbench.firespread.streams` (64-bit arithmetic emulated in int64), so the
result equals the numpy backend bit for bit.

>>> from aegisbench.firespread.params import FirespreadParams
>>> from aegisbench.firespread.layout import make_initial_condition
>>> from aegisbench.firespread.model import HeatModel, simulate
>>> p = FirespreadParams.from_dict({"grid": [12, 12], "realizations": 3})
>>> ic, m = make_initial_condition(p, "0.1.0", 1), HeatModel.from_params(p)
>>> a = simulate(ic, m, 0.7, ("doc",), range(3))
>>> b = simulate(ic, m, 0.7, ("doc",), range(3), backend="torch", rng="counter")
>>> bool((a.ignition_time == b.ignition_time).all())
True
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from aegisbench.firespread.layout import InitialCondition
from aegisbench.firespread.model import DEAD, EMBER, FIRE, TREE, Ensemble, HeatModel
from aegisbench.firespread.streams import step_keys
from aegisbench.hashing import key_digest

log = logging.getLogger(__name__)

_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)  # SplitMix64 constants as signed int64
_M2 = 0x94D049BB133111EB - (1 << 64)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _srl(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix64_torch(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finalizer on int64 bit patterns (wrapping multiply)."""
    z = z ^ _srl(z, 30)
    z = z * _M1
    z = z ^ _srl(z, 27)
    z = z * _M2
    return z ^ _srl(z, 31)


def _counter_uniforms(keys_t: torch.Tensor, b: torch.Tensor, cell: torch.Tensor) -> torch.Tensor:
    z = mix64_torch(keys_t[b] ^ cell)
    return _srl(z, 11).to(torch.float64) * (2.0 ** -53)


def simulate_torch(ic: InitialCondition, m: HeatModel, p: float, key: np.uint64, reals: np.ndarray,
                   device: str | None = None, rng: str = "torch") -> Ensemble:
    if rng not in ("torch", "counter"):
        raise ValueError(f"rng must be 'torch' or 'counter', got {rng!r}")
    dev = torch.device(device or default_device())
    h, w = ic.shape
    r = m.radius
    B = len(reals)
    hp, wp = h + 2 * r, w + 2 * r
    # heat fits int16 when a full neighbourhood of saturated fires cannot overflow it
    hdt = torch.int16 if m.q_max * (len(m.offsets) + 1) < 32767 else torch.int32
    tree = torch.zeros((hp, wp), dtype=torch.uint8, device=dev)
    tree[r:r + h, r:r + w] = torch.from_numpy(ic.tree.astype(np.uint8)).to(dev)
    state = tree.expand(B, hp, wp).clone()
    q = torch.zeros((B, hp, wp), dtype=hdt, device=dev)
    tau = torch.full((B, hp, wp), -1, dtype=torch.int16, device=dev)
    seed_gain = torch.zeros((hp, wp), dtype=hdt, device=dev)
    seed_gain[torch.as_tensor(ic.seeds[:, 0] + r), torch.as_tensor(ic.seeds[:, 1] + r)] = m.q_seed
    gen = None
    if rng == "torch":
        gen = torch.Generator(device=dev)
        start = int(reals[0]) if B else 0
        gen.manual_seed(int.from_bytes(key_digest("torch", int(key), start, B)[:8], "little") >> 1)
    out_tau = torch.full((B, h, w), -1, dtype=torch.int16, device=dev)
    n_steps = np.zeros(B, np.int32)
    rows = torch.arange(B, device=dev)  # which output realization each batch row is
    rows_np = np.arange(B)
    inner = (slice(None), slice(r, r + h), slice(r, r + w))
    q_die = torch.tensor(m.q_die, dtype=hdt, device=dev)
    zero = torch.tensor(0, dtype=hdt, device=dev)
    t = 0
    for t in range(1, m.max_steps + 1):
        is_tree = state == TREE
        is_fire = state == FIRE
        is_ember = state == EMBER
        if t == 1:
            gain = seed_gain.expand(len(rows), hp, wp) * is_tree
        else:
            heat = torch.where(is_fire, q, zero)
            heat.masked_fill_(is_ember, m.q_die)
            gain = torch.zeros_like(q)
            g = gain[inner]
            for dy, dx in m.offsets:
                g += heat[:, r + dy:r + dy + h, r + dx:r + dx + w]
            gain.mul_(is_tree)
        got = gain > 0
        q = torch.where(got, torch.clamp(q + gain, max=m.q_max), q)
        cand = got & (q > m.q_threshold)
        if p >= 1.0:
            ign = cand
        elif p <= 0.0:
            ign = torch.zeros_like(cand)
        elif rng == "torch" and dev.type == "cuda":
            ign = cand & (torch.rand(cand.shape, generator=gen, device=dev) < p)
        else:
            b, y, x = torch.nonzero(cand, as_tuple=True)
            if rng == "torch":
                u = torch.rand(b.shape, generator=gen, device=dev, dtype=torch.float64)
            else:
                keys_t = torch.as_tensor(step_keys(key, reals[rows_np], t).view(np.int64), device=dev)
                u = _counter_uniforms(keys_t, b, (y - r) * w + (x - r))
            hit = u < p
            ign = torch.zeros_like(cand)
            ign[b[hit], y[hit], x[hit]] = True
        dead = is_ember & (q <= m.q_threshold + m.q_die)
        q = torch.where(is_ember, q - q_die, q)
        state = torch.where(is_fire, EMBER, state)
        state.masked_fill_(dead, DEAD)
        state.masked_fill_(ign, FIRE)
        tau.masked_fill_(ign, t)
        still = ((state == FIRE) | (state == EMBER)).flatten(1).any(1)
        done = (~still).nonzero().flatten()
        if len(done):
            out_tau[rows[done]] = tau[done][inner]
            n_steps[rows_np[done.cpu().numpy()]] = t
            keep = still.nonzero().flatten()
            if len(keep) == 0:
                break
            state, q, tau, rows = state[keep], q[keep], tau[keep], rows[keep]
            rows_np = rows_np[keep.cpu().numpy()]
    truncated = np.zeros(B, bool)
    if len(rows) and t == m.max_steps and n_steps[rows_np].min(initial=1) == 0:
        out_tau[rows] = tau[inner]
        n_steps[rows_np] = t
        truncated[rows_np] = True
        log.warning("%d of %d realizations still burning at max_steps=%d", len(rows_np), B, m.max_steps)
    return Ensemble(out_tau.cpu().numpy(), n_steps, truncated)
