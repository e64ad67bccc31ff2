"""Earthquake family: mineral dust haze from collapsed structures.

Model: Koschmieder scattering in linear light, ``I = J t + A (1 - t)``, with

- a brown mineral airlight A (dust scatters more red than blue: R/B of A > 1);
- patchier transmission than smoke: larger relative variance of the optical depth
  at a smaller feature size, and a near-zero Angstrom exponent (coarse particles
  attenuate all wavelengths alike);
- near-lens grain: coarse particles close to the lens add fine-scale, one-sided
  optical depth ``optical_depth * grain * max(0, z)``, with z standard normal (256
  quantiles) on a grid of spacing ``grain_px``, multiplying the transmission.

Ladder parameter: the mean optical depth of the dust cloud.

Sources: H. Koschmieder (1924); S. G. Narasimhan and S. K. Nayar, IJCV 48 (2002);
O. Dubovik et al., "Variability of absorption and optical properties of key aerosol
types observed in worldwide locations", J. Atmos. Sci. 59 (2002) (dust: low Angstrom
exponent, red-brown single-scattering colour); the AegisBench paper (seed 004).

>>> import numpy as np
>>> img = np.full((32, 48, 3), 90, np.uint8)
>>> out = dust_haze(img, np.random.default_rng(0), optical_depth=1.0)
>>> bool(out[..., 0].mean() > out[..., 2].mean())
True
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import cv2
import numpy as np

from aegisbench.corruptions.optics import (
    NORMAL_LUT, grid_shape, haze_transmission, koschmieder, transmission_field, uniform_bytes,
    upsample,
)
from aegisbench.corruptions.registry import check_fields, corruption


@dataclass(frozen=True)
class DustHazeParams:
    optical_depth: float = 1.0   #: mean optical depth (ladder parameter)
    patchiness: float = 0.6      #: relative spatial std of the depth
    patch_px: float = 60.0       #: dust patch feature size, px per 1000 px
    airlight_r: float = 0.60     #: brown mineral airlight, linear RGB
    airlight_g: float = 0.42
    airlight_b: float = 0.24
    angstrom: float = 0.2
    grain: float = 0.25          #: near-lens grain depth, relative to the mean depth
    grain_px: float = 1.5        #: grain size, px per 1000 px

    def __post_init__(self) -> None:
        check_fields(self, optical_depth=(0.0, 8.0), patchiness=(0.0, 3.0), patch_px=(1.0, 5000.0),
                     airlight_r=(0.0, 1.0), airlight_g=(0.0, 1.0), airlight_b=(0.0, 1.0),
                     angstrom=(0.0, 4.0), grain=(0.0, 4.0), grain_px=(0.1, 100.0))


@corruption("dust_haze", family="earthquake", params=DustHazeParams,
            severities={1: DustHazeParams(optical_depth=0.29),
                        2: DustHazeParams(optical_depth=1.0),
                        3: DustHazeParams(optical_depth=2.55)},
            statistic="rms_contrast", targets=(0.1094, 0.0720, 0.0489), direction=-1,
            fit_param="optical_depth", fit_bounds=(0.0, 6.0), spatial=("patch_px", "grain_px"))
def dust_haze(image: np.ndarray, rng: np.random.Generator, p: DustHazeParams,
              px_per_kpx: float) -> np.ndarray:
    """Dust: Koschmieder haze, brown airlight, patchy transmission, near-lens grain."""
    h, w = image.shape[:2]
    t = haze_transmission(rng, h, w, optical_depth=p.optical_depth, patchiness=p.patchiness,
                          cell_px=p.patch_px * px_per_kpx, octaves=4, angstrom=p.angstrom)
    field = transmission_field(t, h, w)
    if p.grain > 0 and p.optical_depth > 0:
        cell = p.grain_px * px_per_kpx
        gh, gw = grid_shape(h, w, cell) if cell > 1.0 else (h, w)
        grain = cv2.LUT(uniform_bytes(rng, (gh, gw)), _grain_lut(p.grain * p.optical_depth))
        grain = upsample(grain, h, w)
        field = cv2.multiply(field, cv2.merge([grain, grain, grain]), scale=1.0 / 255.0)
        np.maximum(field, 1, out=field)
    return koschmieder(image, field, (p.airlight_r, p.airlight_g, p.airlight_b))


@functools.lru_cache(maxsize=64)
def _grain_lut(depth: float) -> np.ndarray:
    """Uniform byte -> 8-bit transmission exp(-depth * max(0, z)) of one grain sample."""
    t = np.exp(-depth * np.maximum(NORMAL_LUT.astype(np.float64), 0.0))
    lut = np.clip(np.rint(255.0 * t), 1, 255).astype(np.uint8)
    lut.flags.writeable = False  # cached and shared
    return lut
