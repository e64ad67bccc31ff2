"""Counter-based random streams for the fire-spread ensembles.

Every uniform the simulator draws is a pure function of
``(key, realization, step, cell)``: the 64-bit stream key is the first 8 bytes of
the SHA-256 of the stable key parts (:func:`aegisbench.hashing.key_digest`), and
the counter is mixed in with the SplitMix64 finalizer, one round per coordinate::

    u = mix(mix(mix(K ^ realization) ^ step) ^ cell) >> 11  * 2**-53

So a draw never depends on which other realizations share a batch, on the order
cells are visited, or on the number of threads: the ensemble of an (initial
condition, S-level) is the same whether it is computed in one block or many.

>>> k = stream_key("0.1.0", "ic", 3, "s", 20)
>>> a = uniforms(k, np.array([0, 7]), 5, np.array([11, 11]))
>>> b = uniforms(k, np.array([7]), 5, np.array([11]))
>>> bool(a[1] == b[0]), bool(a[0] != a[1]), bool(((a >= 0) & (a < 1)).all())
(True, True, True)
"""

from __future__ import annotations

import numpy as np

from aegisbench.hashing import key_digest

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = (np.uint64(s) for s in (30, 27, 31, 11))
_SCALE = 2.0 ** -53


def stream_key(*parts: object) -> np.uint64:
    """64-bit stream key: the first 8 bytes (little endian) of SHA-256 of ``parts``."""
    return np.frombuffer(key_digest(*parts)[:8], dtype="<u8")[0]


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer (a bijection of uint64 with full avalanche), element-wise."""
    z = np.asarray(x, dtype=np.uint64).copy()
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def step_keys(key: np.uint64, realizations: np.ndarray, step: int) -> np.ndarray:
    """Per-realization key of one step: ``mix(mix(K ^ r) ^ step)``."""
    r = np.asarray(realizations, dtype=np.uint64)
    return mix64(mix64(np.uint64(key) ^ r) ^ np.uint64(step))


def uniforms_from_step_keys(keys: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) for ``cells`` (flat unpadded indices) under per-draw step keys."""
    z = mix64(np.asarray(keys, np.uint64) ^ np.asarray(cells, np.uint64))
    return (z >> _S11).astype(np.float64) * _SCALE


def uniforms(key: np.uint64, realizations: np.ndarray, step: int, cells: np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1) for draws ``(realizations[i], step, cells[i])`` of stream ``key``."""
    return uniforms_from_step_keys(step_keys(key, realizations, step), cells)
