"""Earthquake family: mineral dust haze from collapsed structures.

Model: Koschmieder scattering in linear light, ``I = J t + A (1 - t)``, with

- a brown mineral airlight A (dust scatters more red than blue: R/B of A > 1);
- a lognormal optical depth (mean ``optical_depth``, log-SD ``patchiness``) at a
  smaller feature size than smoke: a suspended cloud has denser and thinner parts
  but no clear holes, so as the depth grows the scene fades behind the dust
  instead of turning into an opaque sheet with windows; a near-zero Angstrom
  exponent (coarse particles attenuate all wavelengths alike);
- near-lens grain: coarse particles close to the lens add low-amplitude one-sided
  optical depth ``grain * max(0, z)``, with z standard normal (256 quantiles) on a
  grid of spacing ``grain_px`` (coarse, several pixels), multiplying the
  transmission.

Ladder parameter: the mean optical depth of the dust cloud. The haze keeps the
scene's structure: at s3 the edge maps of the corrupted and the clean frame still
correlate (:func:`aegisbench.corruptions.statistics.edge_correlation`), where an
opaque sheet would not.

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
from aegisbench.corruptions.registry import corruption
from aegisbench.schema import Declared, param
from aegisbench.vocab import RGB


@dataclass(frozen=True)
class DustHazeParams(Declared, coerce=True):
    optical_depth: float = param(1.0, lo=0.0, hi=8.0, doc="mean optical depth (ladder parameter)")
    patchiness: float = param(0.4, lo=0.0, hi=3.0, doc="log-SD of the optical depth (lognormal, mean 1)")
    patch_px: float = param(60.0, lo=1.0, hi=5000.0, unit="px per 1000 px", doc="dust patch feature size")
    airlight_r: float = param(0.60, lo=0.0, hi=1.0, unit="linear", doc="brown mineral airlight, red")
    airlight_g: float = param(0.42, lo=0.0, hi=1.0, unit="linear", doc="brown mineral airlight, green")
    airlight_b: float = param(0.24, lo=0.0, hi=1.0, unit="linear", doc="brown mineral airlight, blue")
    angstrom: float = param(0.2, lo=0.0, hi=4.0, doc="Angstrom exponent of the dust")
    grain: float = param(0.06, lo=0.0, hi=4.0, doc="near-lens grain optical depth per unit z")
    grain_px: float = param(4.0, lo=0.1, hi=100.0, unit="px per 1000 px", doc="grain size")


@corruption("dust_haze", family="earthquake", params=DustHazeParams,
            severities={1: DustHazeParams(optical_depth=0.134),
                        2: DustHazeParams(optical_depth=0.549),
                        3: DustHazeParams(optical_depth=1.14)},
            statistic="rms_contrast", targets=(0.1094, 0.0720, 0.0489), direction=-1,
            fit_param="optical_depth", fit_bounds=(0.0, 6.0), spatial=("patch_px", "grain_px"),
            modalities=(RGB,),
            modality_note=("extinction by mineral dust with a brown visible airlight; the particles (<~10 "
                           "um) that carry the visible optical depth scatter far less at 8-14 um, so the "
                           "ladder would overstate thermal loss"))
def dust_haze(image: np.ndarray, rng: np.random.Generator, p: DustHazeParams,
              px_per_kpx: float) -> np.ndarray:
    """Dust: Koschmieder haze, brown airlight, patchy transmission, near-lens grain.

    ``I = J t + A (1 - t)`` in linear light with a lognormal optical depth (no clear
    holes), so the scene fades behind the dust: at s3 the edge maps of the corrupted
    and clean frames still correlate (``edge_correlation`` about 0.7 on the embedded
    source, against about 0.01 for an opaque sheet).
    """
    h, w = image.shape[:2]
    t = haze_transmission(rng, h, w, optical_depth=p.optical_depth, patchiness=p.patchiness,
                          cell_px=p.patch_px * px_per_kpx, octaves=4, angstrom=p.angstrom,
                          lognormal=True)
    field = transmission_field(t, h, w)
    if p.grain > 0 and p.optical_depth > 0:
        cell = p.grain_px * px_per_kpx
        gh, gw = grid_shape(h, w, cell) if cell > 1.0 else (h, w)
        grain = cv2.LUT(uniform_bytes(rng, (gh, gw)), _grain_lut(p.grain))
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
