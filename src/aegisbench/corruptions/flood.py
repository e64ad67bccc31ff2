"""Flood family: sun glint on water, sediment-laden water, standing water.

- ``water_glare``: specular sun glint. Glint cores (facets of the wavy surface that
  mirror the sun) appear where a uniform draw falls below a local glint probability
  ``coverage * e(x)``; ``e`` is a log-normal zone field (glitter patterns cluster, as
  in the Cox-Munk slope statistics). Cores have radiance ``intensity`` >= 1 (they clip)
  and a Gaussian bloom halo (lens and sensor scatter). The glint layer G (clipped to
  [0, 1]) is screen-blended in linear light: ``I = 1 - (1 - J)(1 - G)``. Ladder
  parameter: the expected core coverage.
- ``turbidity_cast``: suspended sediment is not a scattering haze but a change of
  the water body's colour: light from the scene is filtered toward the mud
  chromaticity (per-channel gains ``T_c = (M_c / Y(M))^chroma``, luminance-preserving,
  as a coloured water column absorbs blue first), then blended with the mud colour
  by a spatially varying turbidity ``w``: ``I = (1 - w) T J + w M``, which compresses
  contrast by ``1 - w``. Ladder parameter: the mean turbidity.
- ``inundation``: standing water as a smooth coverage mask m (fractal field
  thresholded at the quantile that gives the requested coverage, shoreline fading
  out over ``edge`` below the threshold), a
  bounded ripple r (two crossed sinusoids, ``|r| <= ripple``) modulating the water's
  opacity (slope-dependent Fresnel reflectance), and a murky semi-transparent blend
  ``I = (1 - w) J + w W`` with ``w = min(1, a m (1 + r))``. Ladder parameter: the
  covered fraction.

Every model is a per-pixel function of the pixel and one 8-bit field (glint layer,
turbidity, water weight), evaluated by one table lookup per sample.

Sources: C. Cox and W. Munk, "Measurement of the roughness of the sea surface from
photographs of the sun's glitter", JOSA 44 (1954); J. T. O. Kirk, "Light and
Photosynthesis in Aquatic Ecosystems" (3rd ed., 2011) on the colour of turbid
inland water; Porter-Duff/screen compositing; the AegisBench paper (seed 004).

>>> import numpy as np
>>> img = np.full((40, 40, 3), 120, np.uint8)
>>> inundation(img, np.random.default_rng(0), coverage=0.3).shape
(40, 40, 3)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cv2
import numpy as np

from aegisbench.corruptions.optics import (
    apply_field_table, as_rgb3, fbm_grid, field_axes, luminance_normalised, quantise, tabulate,
    uniform_u32, upsample,
)
from aegisbench.corruptions.registry import corruption
from aegisbench.schema import Declared, param
from aegisbench.vocab import RGB, THERMAL


@dataclass(frozen=True)
class WaterGlareParams(Declared, coerce=True):
    coverage: float = param(0.01, lo=0.0, hi=1.0, unit="fraction",
                            doc="expected fraction of the frame under glint cores (ladder parameter)")
    core_px: float = param(3.0, lo=0.1, hi=100.0, unit="px per 1000 px", doc="core size")
    bloom_px: float = param(4.0, lo=0.0, hi=200.0, unit="px per 1000 px", doc="bloom Gaussian sigma")
    bloom: float = param(0.6, lo=0.0, hi=10.0, unit="linear", doc="bloom peak of an isolated core")
    intensity: float = param(1.6, lo=0.0, hi=10.0, unit="linear", doc="core radiance (>= 1 clips)")
    zone_px: float = param(250.0, lo=1.0, hi=5000.0, unit="px per 1000 px", doc="size of glitter zones")
    clustering: float = param(1.0, lo=0.0, hi=3.0, doc="log-normal sigma of the zone field")


@corruption("water_glare", family="flood", params=WaterGlareParams,
            severities={1: WaterGlareParams(coverage=0.0185),
                        2: WaterGlareParams(coverage=0.0211),
                        3: WaterGlareParams(coverage=0.0559, bloom=1.0)},
            statistic="saturated_fraction", targets=(0.0116, 0.0182, 0.1895), direction=1,
            fit_param="coverage", fit_bounds=(0.0, 0.6), spatial=("core_px", "bloom_px", "zone_px"),
            modalities=(RGB,),
            modality_note=("specular reflection of the sun's visible radiance by the wavy surface; at 8-14 "
                           "um water is a near-black emitter (emissivity ~0.98), so a thermal frame shows no"
                           " saturating sun glint"))
def water_glare(image: np.ndarray, rng: np.random.Generator, p: WaterGlareParams,
                px_per_kpx: float) -> np.ndarray:
    """Sun glint: screen-blended glint cores with bloom, clustered in glitter zones."""
    h, w = image.shape[:2]
    cell = max(1.0, p.core_px * px_per_kpx)  # one work pixel per glint core
    hw, ww = max(1, math.ceil(h / cell)), max(1, math.ceil(w / cell))
    zone = fbm_grid(rng, hw, ww, p.zone_px * px_per_kpx / cell, octaves=2)
    zone = cv2.resize(zone, (ww, hw), interpolation=cv2.INTER_CUBIC)
    prob = np.exp(np.float32(p.clustering) * zone - np.float32(p.clustering ** 2 / 2))
    prob *= np.float32(p.coverage)
    u = uniform_u32(rng, (hw, ww)).astype(np.float32) * np.float32(2.0 ** -32)
    cores = (u < prob).astype(np.float32)
    glint = cores * np.float32(p.intensity)
    sigma = p.bloom_px * px_per_kpx / cell
    if p.bloom > 0 and sigma > 0:
        halo = cv2.GaussianBlur(cores, (0, 0), sigma, borderType=cv2.BORDER_REFLECT)
        glint += halo * np.float32(p.bloom * 2.0 * math.pi * max(sigma, 0.4) ** 2)
    layer = upsample(quantise(np.minimum(glint, 1.0)), h, w)
    return apply_field_table(image, layer, _screen_table())


@functools.lru_cache(maxsize=1)
def _screen_table() -> np.ndarray:
    j, g = field_axes()
    return tabulate(np.broadcast_to(1.0 - (1.0 - j) * (1.0 - g), (256, 256, 3)))


@dataclass(frozen=True)
class TurbidityCastParams(Declared, coerce=True):
    turbidity: float = param(0.4, lo=0.0, hi=1.0,
                             doc="mean blend weight of the mud colour (ladder parameter)")
    chroma: float = param(0.5, lo=0.0, hi=1.0, doc="pull of the scene light toward the mud chromaticity")
    mud_r: float = param(0.30, lo=0.0, hi=1.0, unit="linear", doc="mud colour, red")
    mud_g: float = param(0.22, lo=0.0, hi=1.0, unit="linear", doc="mud colour, green")
    mud_b: float = param(0.11, lo=0.0, hi=1.0, unit="linear", doc="mud colour, blue")
    patchiness: float = param(0.25, lo=0.0, hi=3.0, doc="relative spatial std of the turbidity")
    plume_px: float = param(300.0, lo=1.0, hi=5000.0, unit="px per 1000 px", doc="sediment plume size")

    def cross_check(self) -> None:
        if self.mud_r + self.mud_g + self.mud_b <= 0:
            raise ValueError("TurbidityCastParams: mud colour must not be black")


@corruption("turbidity_cast", family="flood", params=TurbidityCastParams,
            severities={1: TurbidityCastParams(turbidity=0.203),
                        2: TurbidityCastParams(turbidity=0.476),
                        3: TurbidityCastParams(turbidity=0.815)},
            statistic="rms_contrast", targets=(0.1098, 0.0701, 0.0378), direction=-1,
            fit_param="turbidity", fit_bounds=(0.0, 0.98), spatial=("plume_px",),
            modalities=(RGB,),
            modality_note=("sediment changes the colour of the water (blue is absorbed first), a visible-"
                           "band effect; a thermal camera sees the surface's own emission, about the same "
                           "with or without mud"))
def turbidity_cast(image: np.ndarray, rng: np.random.Generator, p: TurbidityCastParams,
                   px_per_kpx: float) -> np.ndarray:
    """Sediment water: mud-chromaticity tint and contrast-compressing mud blend."""
    h, w = image.shape[:2]
    mud = tuple(float(x) for x in (p.mud_r, p.mud_g, p.mud_b))
    n = fbm_grid(rng, h, w, p.plume_px * px_per_kpx, octaves=3)
    wgt = np.clip(np.float32(p.turbidity) * (1.0 + np.float32(p.patchiness) * n), 0.0, 1.0)
    return apply_field_table(image, upsample(quantise(wgt), h, w), _turbidity_table(mud, p.chroma))


@functools.lru_cache(maxsize=64)
def _turbidity_table(mud: tuple[float, float, float], chroma: float) -> np.ndarray:
    m = as_rgb3(mud)
    tint = luminance_normalised(np.maximum(m, 1e-6)) ** chroma
    j, wgt = field_axes()
    return tabulate((1.0 - wgt) * tint.reshape(1, 1, 3) * j + wgt * m.reshape(1, 1, 3))


@dataclass(frozen=True)
class InundationParams(Declared, coerce=True):
    coverage: float = param(0.2, lo=0.0, hi=1.0, unit="fraction",
                            doc="fraction of the frame under water (ladder parameter)")
    opacity: float = param(0.85, lo=0.0, hi=1.0, doc="opacity of the murky water")
    water_r: float = param(0.085, lo=0.0, hi=1.0, unit="linear", doc="murky water radiance, red")
    water_g: float = param(0.080, lo=0.0, hi=1.0, unit="linear", doc="murky water radiance, green")
    water_b: float = param(0.050, lo=0.0, hi=1.0, unit="linear", doc="murky water radiance, blue")
    pool_px: float = param(250.0, lo=1.0, hi=5000.0, unit="px per 1000 px", doc="size of water bodies")
    edge: float = param(0.15, lo=1e-3, hi=10.0, unit="SD of the coverage field", doc="shoreline softness")
    ripple: float = param(0.25, lo=0.0, hi=1.0, doc="bound on the relative ripple modulation")
    ripple_px: float = param(12.0, lo=0.5, hi=1000.0, unit="px per 1000 px", doc="ripple wavelength")


@corruption("inundation", family="flood", params=InundationParams,
            severities={1: InundationParams(coverage=0.110),
                        2: InundationParams(coverage=0.313),
                        3: InundationParams(coverage=0.572)},
            statistic="occluded_fraction", targets=(0.083, 0.224, 0.392), direction=1,
            fit_param="coverage", fit_bounds=(0.0, 1.0), spatial=("pool_px", "ripple_px"),
            modalities=(RGB, THERMAL),
            modality_note=("water is opaque at thermal wavelengths too (absorption depth ~10 um): a flooded "
                           "area shows the water's own near-uniform radiance instead of the ground and of "
                           "people in it"))
def inundation(image: np.ndarray, rng: np.random.Generator, p: InundationParams,
               px_per_kpx: float) -> np.ndarray:
    """Standing water: smooth coverage mask, bounded ripple, murky semi-transparent blend."""
    h, w = image.shape[:2]
    field = fbm_grid(rng, h, w, p.pool_px * px_per_kpx, octaves=3)
    thr = np.quantile(field, 1.0 - p.coverage) if p.coverage > 0 else np.inf
    lam = p.ripple_px * px_per_kpx
    cell = max(1.0, lam / 4.0)  # ripple grid: >= 4 samples per wavelength
    hw, ww = max(2, math.ceil(h / cell)), max(2, math.ceil(w / cell))
    lo, hi = float(field.min()), float(field.max())
    field = np.clip(cv2.resize(field, (ww, hw), interpolation=cv2.INTER_CUBIC), lo, hi)
    mask = np.clip((field - np.float32(thr)) / np.float32(p.edge) + 1.0, 0.0, 1.0)
    angles = rng.uniform(0.0, math.pi, 2)
    phases = rng.uniform(0.0, 2.0 * math.pi, 2)
    xs = np.arange(ww, dtype=np.float64) * cell
    ys = np.arange(hw, dtype=np.float64) * cell
    ripple = np.zeros((hw, ww), np.float32)
    for ang, ph, k in zip(angles, phases, (1.0, 1.37)):
        # sin(a x + b y + ph) = sin(a x) cos(b y + ph) + cos(a x) sin(b y + ph)
        kx, ky = 2 * math.pi * k / lam * math.cos(ang), 2 * math.pi * k / lam * math.sin(ang)
        ripple += np.outer(np.cos(ky * ys + ph), np.sin(kx * xs)).astype(np.float32)
        ripple += np.outer(np.sin(ky * ys + ph), np.cos(kx * xs)).astype(np.float32)
    wgt = np.clip(mask * np.float32(p.opacity) * (1.0 + ripple * np.float32(p.ripple / 2)), 0.0, 1.0)
    water = tuple(float(x) for x in (p.water_r, p.water_g, p.water_b))
    return apply_field_table(image, upsample(quantise(wgt), h, w), _water_table(water))


@functools.lru_cache(maxsize=64)
def _water_table(water: tuple[float, float, float]) -> np.ndarray:
    j, wgt = field_axes()
    return tabulate((1.0 - wgt) * j + wgt * as_rgb3(water).reshape(1, 1, 3))
