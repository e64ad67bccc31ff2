"""Wildfire family: smoke haze and fire-lit warm haze.

Model (both): Koschmieder's law of atmospheric scattering in linear light,
``I(x) = J(x) t(x) + A (1 - t(x))`` with ``t = exp(-tau)``. The optical depth
``tau`` varies in space as fractal noise (plume structure) and with wavelength by
the Angstrom law ``tau_c = tau (lambda_c / 550 nm)^-alpha``; fine smoke particles
have alpha ~ 1-2.

- ``smoke_haze``: neutral grey airlight (sunlit smoke), ladder parameter: the mean
  optical depth.
- ``fire_warm_tint``: the scene is lit by low colour-temperature fire light. The
  camera, white-balanced for daylight (6504 K), sees channel gains given by Planck's
  law at the fire's correlated colour temperature (CCT), partially adapted; the
  haze airlight has the same blackbody colour. Ladder parameter: the CCT (lower is
  warmer).

Sources: H. Koschmieder, "Theorie der horizontalen Sichtweite" (1924);
S. G. Narasimhan and S. K. Nayar, "Vision and the atmosphere", IJCV 48 (2002);
K. He, J. Sun, X. Tang, "Single image haze removal using dark channel prior",
CVPR 2009 (the I = Jt + A(1-t) formulation); A. Angstrom (1929) on the wavelength
dependence of aerosol extinction; Planck's law; the AegisBench paper (seed 004)
for the ladder statistics.

>>> import numpy as np
>>> img = np.full((32, 48, 3), 90, np.uint8)
>>> out = smoke_haze(img, np.random.default_rng(0), optical_depth=1.0)
>>> out.shape, out.dtype, bool(out.mean() > img.mean())
((32, 48, 3), dtype('uint8'), True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aegisbench.corruptions.optics import (
    haze_transmission, illuminant_colour, illuminant_gains, koschmieder, transmission_field,
)
from aegisbench.corruptions.registry import corruption
from aegisbench.schema import Declared, param
from aegisbench.vocab import RGB


@dataclass(frozen=True)
class SmokeHazeParams(Declared, coerce=True):
    optical_depth: float = param(1.0, lo=0.0, hi=8.0, doc="mean optical depth tau (ladder parameter)")
    patchiness: float = param(0.35, lo=0.0, hi=3.0, doc="relative spatial std of tau")
    plume_px: float = param(150.0, lo=1.0, hi=5000.0, unit="px per 1000 px", doc="plume feature size")
    airlight: float = param(0.62, lo=0.0, hi=1.0, unit="linear", doc="neutral grey airlight")
    angstrom: float = param(1.3, lo=0.0, hi=4.0, doc="Angstrom exponent of smoke aerosol")


@corruption("smoke_haze", family="wildfire", params=SmokeHazeParams,
            severities={1: SmokeHazeParams(optical_depth=0.0932),
                        2: SmokeHazeParams(optical_depth=0.508),
                        3: SmokeHazeParams(optical_depth=1.82)},
            statistic="rms_contrast", targets=(0.1170, 0.0776, 0.0475), direction=-1,
            fit_param="optical_depth", fit_bounds=(0.0, 6.0), spatial=("plume_px",),
            modalities=(RGB,),
            modality_note=("fine smoke has Angstrom exponent ~1-2, so at 10 um its optical depth is 20-300x "
                           "smaller than at 550 nm: LWIR sees through the smoke (why fire crews use thermal "
                           "cameras)"))
def smoke_haze(image: np.ndarray, rng: np.random.Generator, p: SmokeHazeParams,
               px_per_kpx: float) -> np.ndarray:
    """Smoke: Koschmieder haze with neutral grey airlight and plume-structured depth."""
    h, w = image.shape[:2]
    t = haze_transmission(rng, h, w, optical_depth=p.optical_depth, patchiness=p.patchiness,
                          cell_px=p.plume_px * px_per_kpx, octaves=3, angstrom=p.angstrom)
    return koschmieder(image, transmission_field(t, h, w), (p.airlight,) * 3)


@dataclass(frozen=True)
class FireWarmTintParams(Declared, coerce=True):
    cct_k: float = param(2500.0, lo=800.0, hi=20000.0, unit="K",
                         doc="fire-light colour temperature (ladder parameter)")
    adaptation: float = param(0.6, lo=0.0, hi=1.0, doc="fraction of the illuminant shift left uncorrected")
    optical_depth: float = param(0.4, lo=0.0, hi=8.0, doc="mean optical depth of the warm haze")
    patchiness: float = param(0.3, lo=0.0, hi=3.0, doc="relative spatial std of the optical depth")
    plume_px: float = param(200.0, lo=1.0, hi=5000.0, unit="px per 1000 px", doc="plume feature size")
    airlight: float = param(0.55, lo=0.0, hi=1.0, unit="linear",
                            doc="brightness of the fire-lit airlight (max channel)")
    angstrom: float = param(1.0, lo=0.0, hi=4.0, doc="Angstrom exponent of the haze")


@corruption("fire_warm_tint", family="wildfire", params=FireWarmTintParams,
            severities={1: FireWarmTintParams(cct_k=3290.0, optical_depth=0.25),
                        2: FireWarmTintParams(cct_k=2620.0, optical_depth=0.35),
                        3: FireWarmTintParams(cct_k=2270.0, optical_depth=0.45)},
            statistic="mean_rb_ratio", targets=(1.674, 2.072, 2.452), direction=1,
            fit_param="cct_k", fit_bounds=(900.0, 6504.0), spatial=("plume_px",),
            modalities=(RGB,),
            modality_note=("a blackbody white-balance shift of the visible colour channels plus a warm "
                           "airlight; a thermal camera has no white balance and fire light casts no colour "
                           "on it"))
def fire_warm_tint(image: np.ndarray, rng: np.random.Generator, p: FireWarmTintParams,
                   px_per_kpx: float) -> np.ndarray:
    """Fire light: blackbody white-balance shift plus warm-airlight Koschmieder haze."""
    h, w = image.shape[:2]
    t = haze_transmission(rng, h, w, optical_depth=p.optical_depth, patchiness=p.patchiness,
                          cell_px=p.plume_px * px_per_kpx, octaves=3, angstrom=p.angstrom)
    gains = illuminant_gains(p.cct_k, p.adaptation)
    airlight = p.airlight * illuminant_colour(p.cct_k)
    return koschmieder(image, transmission_field(t, h, w), airlight, gains=gains)
