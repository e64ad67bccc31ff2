"""Shared helpers of the embedded synthetic sources: value noise, fractions, config checks.

>>> every(4, 0.2), every(3, 0.2)
(True, False)
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from aegisbench.errors import BadInput


def value_noise(rng: np.random.Generator, height: int, width: int, cells, weights) -> np.ndarray:
    """Multi-octave value noise (float32, zero mean, unit std): random grids with cell
    sizes ``cells`` (pixels) upscaled by cubic interpolation and summed with ``weights``.

    >>> from aegisbench.hashing import rng_for
    >>> value_noise(rng_for("doc"), 5, 7, (4, 2), (0.5, 0.5)).shape
    (5, 7)
    """
    out = np.zeros((height, width), np.float32)
    for cell, wgt in zip(cells, weights):
        cell = max(float(cell), 1.0)
        gh, gw = int(height / cell) + 3, int(width / cell) + 3
        grid = rng.standard_normal((gh, gw), dtype=np.float32)
        big = cv2.resize(grid, (int(gw * cell), int(gh * cell)), interpolation=cv2.INTER_CUBIC)
        oy, ox = (int(v) for v in rng.integers(0, int(cell) + 1, 2))
        out += np.float32(wgt) * big[oy:oy + height, ox:ox + width]
    return out / np.float32(cv2.meanStdDev(out)[1][0, 0] + 1e-6)


def every(index: int, fraction: float) -> bool:
    """True for an evenly spread ``fraction`` of indices (0.2 -> 4, 9, 14, ...).

    >>> [i for i in range(12) if every(i, 0.2)]
    [4, 9]
    """
    return math.floor((index + 1) * fraction + 1e-9) > math.floor(index * fraction + 1e-9)


def check_int(obj, name: str, minimum: int, where: str) -> None:
    v = getattr(obj, name)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise BadInput(f"{name} must be an integer >= {minimum}, got {v!r}", where=where)


def check_fraction(obj, name: str, where: str) -> None:
    v = getattr(obj, name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise BadInput(f"{name} must be a number in [0, 1], got {v!r}", where=where)


def as_pair(obj, name: str, minimum: int, where: str) -> tuple[int, int]:
    """Validate a pair of ints (lists from YAML accepted) and store it as a tuple."""
    v = getattr(obj, name)
    if (not isinstance(v, (tuple, list)) or len(v) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) or x < minimum for x in v)):
        raise BadInput(f"{name} must be two integers >= {minimum}, got {v!r}", where=where)
    object.__setattr__(obj, name, tuple(v))
    return tuple(v)
