"""Shared helpers of the embedded synthetic sources: value noise, fractions, config checks.

>>> every(4, 0.2), every(3, 0.2)
(True, False)
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from aegisbench import fields
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
    """Field ``name`` of a generator config: an integer >= ``minimum`` (``BadInput`` at ``where.name``)."""
    fields.check_int(getattr(obj, name), name, lo=minimum, error=BadInput, where=f"{where}.{name}")


def check_fraction(obj, name: str, where: str) -> None:
    """Field ``name``: a number in [0, 1]."""
    fields.check_float(getattr(obj, name), name, 0.0, 1.0, error=BadInput, where=f"{where}.{name}")


def as_pair(obj, name: str, minimum: int, where: str) -> tuple[int, int]:
    """Validate a pair of ints (lists from YAML accepted) and store it as a tuple."""
    v = getattr(obj, name)
    if (not isinstance(v, (tuple, list)) or len(v) != 2
            or any(not fields.is_int(x) or x < minimum for x in v)):
        raise BadInput(f"{name} must be two integers >= {minimum}, got {v!r}", where=where)
    object.__setattr__(obj, name, tuple(v))
    return tuple(v)
