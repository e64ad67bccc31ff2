"""Procedural aerial-like RGB scenes for tests, benchmarks and calibration demos.

Terrain is a fractal field mapped through a grass / soil / rock palette, with
fine texture, a road, a few roofs and small person-sized figures. Deterministic in
``key``; features scale with the frame so a scene looks alike at every size.

>>> img = synthetic_scene(120, 160, key=("demo", 1))
>>> img.shape, img.dtype.name
((120, 160, 3), 'uint8')
"""

from __future__ import annotations

import cv2
import numpy as np

from aegisbench.corruptions.optics import fbm_grid, upsample
from aegisbench.hashing import rng_for

_PALETTE = np.array([[38, 58, 30], [95, 125, 55], [155, 130, 92], [200, 195, 182],
                     [120, 100, 75]], np.float32)


def synthetic_scene(height: int, width: int, key: tuple = ()) -> np.ndarray:
    """A textured aerial-like RGB uint8 scene of the given size."""
    rng = rng_for("synthetic_scene", *key)
    unit = max(height, width) / 1000.0
    terrain = upsample(fbm_grid(rng, height, width, 220 * unit, octaves=4), height, width, cubic=True)
    moisture = upsample(fbm_grid(rng, height, width, 400 * unit, octaves=2), height, width, cubic=True)
    pos = np.clip((terrain * 0.9 + 2.0) / 4.0 * (len(_PALETTE) - 1), 0, len(_PALETTE) - 1.001)
    lo = pos.astype(np.int32)
    frac = (pos - lo)[..., None]
    rgb = _PALETTE[lo] * (1 - frac) + _PALETTE[lo + 1] * frac
    rgb *= (1.0 + 0.12 * moisture)[..., None]
    fine = upsample(fbm_grid(rng, height, width, 6 * unit, octaves=2), height, width, cubic=True)
    grain = rng.standard_normal((height, width), dtype=np.float32)
    rgb *= (1.0 + 0.16 * fine + 0.05 * grain)[..., None]
    img = np.clip(rgb, 0, 255).astype(np.uint8)
    thick = max(1, round(12 * unit))
    p0 = (int(rng.uniform(0, width)), 0)
    p1 = (int(rng.uniform(0, width)), height - 1)
    cv2.line(img, p0, p1, (150, 140, 125), thick, cv2.LINE_AA)
    for _ in range(int(rng.integers(2, 5))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        s = rng.uniform(20, 60) * unit
        colour = tuple(int(c) for c in rng.choice([[170, 70, 55], [200, 200, 195], [90, 90, 100]]))
        cv2.rectangle(img, (int(cx - s), int(cy - s * 0.7)), (int(cx + s), int(cy + s * 0.7)),
                      colour, -1, cv2.LINE_AA)
    for _ in range(int(rng.integers(3, 8))):
        cx, cy = rng.uniform(0, width), rng.uniform(0, height)
        r = max(1.0, rng.uniform(4, 9) * unit)
        colour = tuple(int(c) for c in rng.integers(30, 255, 3))
        cv2.ellipse(img, (int(cx), int(cy)), (int(r), int(r * 1.8)), float(rng.uniform(0, 180)),
                    0, 360, colour, -1, cv2.LINE_AA)
    return img
