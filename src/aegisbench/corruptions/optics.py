"""Shared photometric and stochastic building blocks of the corruption engine.

Linear light is represented as ``float32`` or ``uint16`` scaled to ``LINEAR_MAX``
(65535 = white). Decoding (display gamma 2.2 -> linear) is a per-channel lookup on
the uint8 input; encoding (linear -> gamma 2.2 -> uint8) is a lookup on a uint16
value, so neither costs a transcendental function per pixel. Random fields are
drawn on a coarse grid and upsampled, so their cost does not grow with resolution.

>>> import numpy as np
>>> img = np.full((4, 4, 3), 128, np.uint8)
>>> bool((encode(decode(img)) == img).all())
True
"""

from __future__ import annotations

import functools
import math

import cv2
import numpy as np
from scipy.special import ndtri

from aegisbench.errors import BadInput

GAMMA = 2.2
LINEAR_MAX = 65535.0
#: Rec. 709 luminance weights of linear RGB.
LUMA = (0.2126, 0.7152, 0.0722)
#: Effective wavelengths (micrometres) of the R, G, B channels of a colour camera.
WAVELENGTHS_UM = (0.610, 0.550, 0.465)

_CODES = np.arange(256, dtype=np.float64) / 255.0
_DECODE = _CODES ** GAMMA
#: uint16 linear value -> uint8 display value (gamma 1/2.2, rounded).
ENCODE_LUT = np.round(255.0 * (np.arange(65536) / LINEAR_MAX) ** (1.0 / GAMMA)).astype(np.uint8)
#: same, for inverted linear values (65535 - v), used by screen blending.
ENCODE_INV_LUT = ENCODE_LUT[::-1].copy()

# Standard normal quantised to 256 equiprobable levels (inverse CDF at bin centres),
# rescaled to unit variance; indexed by a uniform random byte.
_NORMAL = ndtri((np.arange(256) + 0.5) / 256.0)
NORMAL_LUT = (_NORMAL / _NORMAL.std()).astype(np.float32)
for _table in (_DECODE, ENCODE_LUT, ENCODE_INV_LUT, NORMAL_LUT):
    _table.flags.writeable = False


def _lut16_numpy(index: np.ndarray, table: np.ndarray) -> np.ndarray:
    """NumPy lookup of uint16 ``index`` in a (65536,) or (65536, 1, C) table."""
    if table.ndim == 1 or table.size == 65536:
        return np.take(table.reshape(65536), index)
    flat = table.reshape(65536, -1)
    return flat[index, np.arange(flat.shape[1])]


def _cv2_has_lut16() -> bool:
    try:  # OpenCV >= 5 looks up 16-bit indices natively; 4.x accepts only 8-bit
        cv2.LUT(np.zeros((1, 1), np.uint16), np.zeros(65536, np.uint8))
        return True
    except cv2.error:
        return False


_HAS_LUT16 = _cv2_has_lut16()


def lut16(index: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table[index]`` (per channel for a (65536, 1, C) table) for a uint16 index."""
    return cv2.LUT(index, table) if _HAS_LUT16 else _lut16_numpy(index, table)


def check_image(image: object, where: str = "image") -> np.ndarray:
    """Return ``image`` if it is a non-empty RGB uint8 array, else raise BadInput."""
    if not isinstance(image, np.ndarray):
        raise BadInput(f"expected a numpy array, got {type(image).__name__}", where=where)
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise BadInput(f"expected an RGB uint8 image (H, W, 3), got {image.dtype} "
                       f"{tuple(image.shape)}", where=where)
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise BadInput("image is empty", where=where)
    return image


def as_rgb3(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).reshape(3)


def decode_lut(gains=(1.0, 1.0, 1.0), offset=(0.0, 0.0, 0.0), scale: float = LINEAR_MAX,
               dtype=np.float32) -> np.ndarray:
    """Per-channel table ``(decode(code) * gain + offset) * scale`` of shape (256, 1, 3)."""
    table = (_DECODE[:, None] * as_rgb3(gains)[None, :] + as_rgb3(offset)[None, :]) * scale
    if np.issubdtype(dtype, np.integer):
        table = np.clip(np.round(table), 0, np.iinfo(dtype).max)
    return table.astype(dtype).reshape(256, 1, 3)


def decode(image: np.ndarray, gains=(1.0, 1.0, 1.0), offset=(0.0, 0.0, 0.0),
           scale: float = LINEAR_MAX, dtype=np.float32) -> np.ndarray:
    """Display uint8 -> linear light (times per-channel gains, plus offset) in one pass."""
    return cv2.LUT(image, decode_lut(gains, offset, scale, dtype))


def encode(linear: np.ndarray, offset=(0.0, 0.0, 0.0)) -> np.ndarray:
    """Linear light in units of LINEAR_MAX (+ per-channel offset) -> display uint8.

    Values are rounded and saturated to [0, 65535] before the gamma lookup.
    """
    if linear.dtype != np.uint16:
        o = as_rgb3(offset)
        linear = cv2.add(linear, (float(o[0]), float(o[1]), float(o[2]), 0.0), dtype=cv2.CV_16U)
    return lut16(linear, ENCODE_LUT)


def luminance(rgb) -> float:
    r, g, b = as_rgb3(rgb)
    return LUMA[0] * r + LUMA[1] * g + LUMA[2] * b


def luminance_normalised(gains) -> np.ndarray:
    """Scale channel gains so that a neutral grey keeps its luminance."""
    g = as_rgb3(gains)
    return g / luminance(g)


def planck_rgb(cct_k: float) -> np.ndarray:
    """Relative spectral radiance of a blackbody at the three channel wavelengths.

    Planck's law B(lambda, T) ~ lambda^-5 / (exp(c2 / (lambda T)) - 1), c2 = 14388 um K.
    """
    lam = np.asarray(WAVELENGTHS_UM)
    return lam ** -5.0 / np.expm1(14388.0 / (lam * float(cct_k)))


def illuminant_gains(cct_k: float, adaptation: float = 1.0, reference_k: float = 6504.0) -> np.ndarray:
    """Channel gains of light at ``cct_k`` seen by a camera white-balanced for ``reference_k``.

    ``adaptation`` in [0, 1] is the fraction of the shift the camera does not correct
    (applied in log space); gains are luminance-normalised.
    """
    ratio = planck_rgb(cct_k) / planck_rgb(reference_k)
    return luminance_normalised(ratio ** float(adaptation))


def illuminant_colour(cct_k: float, reference_k: float = 6504.0) -> np.ndarray:
    """Colour of light at ``cct_k`` relative to the white point (max channel = 1)."""
    ratio = planck_rgb(cct_k) / planck_rgb(reference_k)
    return ratio / ratio.max()


# ---------------------------------------------------------------- random draws

def uniform_bytes(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform random uint8 array (raw PCG64 output; the fastest draw numpy offers)."""
    n = int(np.prod(shape))
    raw = rng.bit_generator.random_raw((n + 7) // 8)
    return raw.view("<u1")[:n].reshape(shape)


def uniform_u32(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    raw = rng.bit_generator.random_raw((n + 1) // 2)
    return raw.view("<u4")[:n].reshape(shape)


def grid_shape(height: int, width: int, cell_px: float) -> tuple[int, int]:
    """Shape of a control grid with spacing ``cell_px`` covering an image (>= 2 x 2)."""
    cell = max(float(cell_px), 1.0)
    return (max(2, math.ceil(height / cell) + 1), max(2, math.ceil(width / cell) + 1))


def fbm_grid(rng: np.random.Generator, height: int, width: int, cell_px: float,
             octaves: int = 1, persistence: float = 0.5) -> np.ndarray:
    """Fractal Gaussian noise on a control grid, normalised to mean 0 and std 1.

    The coarsest octave has feature size ``cell_px``; each further octave halves it
    (down to one pixel). Returns the grid at the finest octave's spacing; upsample
    it with :func:`upsample`.
    """
    cells = [max(cell_px / 2 ** k, 1.0) for k in range(max(1, int(octaves)))]
    fine = grid_shape(height, width, cells[-1])
    total = np.zeros(fine, np.float32)
    amp = 1.0
    for cell in cells:
        g = rng.standard_normal(grid_shape(height, width, cell), dtype=np.float32)
        if g.shape != fine:
            g = cv2.resize(g, (fine[1], fine[0]), interpolation=cv2.INTER_CUBIC)
        total += np.float32(amp) * g
        amp *= persistence
    total -= total.mean()
    sd = float(total.std())
    if sd > 0:
        total /= np.float32(sd)
    return total


def upsample(grid: np.ndarray, height: int, width: int, cubic: bool = False) -> np.ndarray:
    """Resize a control grid (H', W'[, C]) to the image size.

    Bilinear by default, which keeps values inside the range of the grid (so a
    transmission grid in (0, 1] stays in (0, 1]).
    """
    if grid.shape[:2] == (height, width):
        return grid
    interp = cv2.INTER_CUBIC if cubic else cv2.INTER_LINEAR
    return cv2.resize(grid, (width, height), interpolation=interp)


def replicate3(grid: np.ndarray) -> np.ndarray:
    """(H, W) -> (H, W, 3) with the same values in every channel."""
    return cv2.merge([grid, grid, grid])


def angstrom_exponents(alpha: float) -> np.ndarray:
    """Per-channel optical-depth factors (lambda / 0.55 um)^-alpha (Angstrom law)."""
    return (np.asarray(WAVELENGTHS_UM) / 0.550) ** (-float(alpha))


def haze_transmission(rng: np.random.Generator, height: int, width: int, *, optical_depth: float,
                      patchiness: float, cell_px: float, octaves: int = 3,
                      angstrom: float = 0.0, lognormal: bool = False) -> np.ndarray:
    """Per-channel transmission t = exp(-tau) on a control grid, values in (0, 1].

    tau_c = optical_depth * m * (lambda_c / 0.55 um)^-angstrom, with ``n`` fractal
    noise of feature size ``cell_px`` and m = max(0, 1 + patchiness * n) (plume
    structure with clear gaps) or, with ``lognormal``, m = exp(patchiness * n -
    patchiness^2 / 2) (mean 1, never zero: a cloud without holes). tau is capped at 80
    (so t > 0 in float32). Returns (h', w', 3) float32;
    see :func:`transmission_field` for the frame-sized 8-bit version.

    >>> import numpy as np
    >>> t = haze_transmission(np.random.default_rng(0), 50, 60, optical_depth=1.0,
    ...                       patchiness=0.5, cell_px=20)
    >>> bool((t > 0).all() and (t <= 1).all())
    True
    """
    n = fbm_grid(rng, height, width, cell_px, octaves)
    if lognormal:
        m = np.exp(np.float32(patchiness) * n - np.float32(patchiness * patchiness / 2.0))
    else:
        m = np.maximum(np.float32(1.0) + np.float32(patchiness) * n, 0.0)
    tau = m * np.float32(optical_depth)
    k = angstrom_exponents(angstrom).astype(np.float32)
    tau3 = np.minimum(tau[..., None] * k[None, None, :], np.float32(80.0))  # keeps t > 0 in float32
    return np.exp(-tau3).astype(np.float32)


def transmission_field(grid: np.ndarray, height: int, width: int) -> np.ndarray:
    """Transmission grid in (0, 1] -> frame-sized uint8 levels 1..255 (t = level / 255)."""
    return upsample(quantise(grid, lo=1), height, width)


# ------------------------------------------------------- field-modulated tables

_J_LIN = _DECODE.reshape(256, 1, 1)
_LEVEL = (np.arange(256, dtype=np.float64) / 255.0).reshape(1, 256, 1)


def tabulate(linear_out: np.ndarray) -> np.ndarray:
    """(256 codes, 256 field levels, 3) linear output -> uint8 table (65536, 1, 3).

    Encoded exactly (gamma 1/2.2, rounded), so an identity model maps every code to
    itself.
    """
    v = np.clip(np.broadcast_to(linear_out, (256, 256, 3)), 0.0, 1.0)
    table = np.ascontiguousarray(np.rint(255.0 * v ** (1.0 / GAMMA)).astype(np.uint8).reshape(65536, 1, 3))
    table.flags.writeable = False  # cached and shared
    return table


def field_axes() -> tuple[np.ndarray, np.ndarray]:
    """Broadcastable (linear value of each code (256, 1, 1), field level in [0, 1] (1, 256, 1))."""
    return _J_LIN, _LEVEL


def apply_field_table(image: np.ndarray, field: np.ndarray, table: np.ndarray) -> np.ndarray:
    """out[y, x, c] = table[image[y, x, c] * 256 + field[y, x(, c)], c].

    Any per-pixel model ``out_c = F_c(J_c, f(x))`` with an 8-bit field ``f`` (a
    transmission, a mask, a noise draw) costs one lookup per sample this way.
    """
    h, w = image.shape[:2]
    if field.ndim == 2:
        field = cv2.merge([field, field, field])
    index = cv2.merge([field.reshape(h, w * 3), image.reshape(h, w * 3)])
    return lut16(index.view("<u2").reshape(h, w, 3), table)


def quantise(field: np.ndarray, lo: int = 0) -> np.ndarray:
    """Float field in [0, 1] -> uint8 levels round(255 f), at least ``lo``."""
    q = cv2.convertScaleAbs(field, alpha=255.0)
    return np.maximum(q, lo) if lo else q


@functools.lru_cache(maxsize=128)
def koschmieder_table(airlight: tuple[float, float, float],
                      gains: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> np.ndarray:
    """Table of I = (g J - A) t + A for every code J and transmission level t."""
    a = np.asarray(airlight).reshape(1, 1, 3)
    g = np.asarray(gains).reshape(1, 1, 3)
    return tabulate((_J_LIN * g - a) * _LEVEL + a)


def koschmieder(image: np.ndarray, transmission: np.ndarray, airlight, gains=(1.0, 1.0, 1.0)) -> np.ndarray:
    """Koschmieder scattering in linear light: I = (g * J) t + A (1 - t).

    ``transmission`` is the frame-sized uint8 field of :func:`transmission_field`
    (t = level / 255, levels 1..255 so t stays positive); ``airlight`` is linear
    RGB; ``gains`` tint the scene light J before scattering. Evaluated by table
    lookup, one pass over the frame.
    """
    a = tuple(float(x) for x in as_rgb3(airlight))
    g = tuple(float(x) for x in as_rgb3(gains))
    return apply_field_table(image, transmission, koschmieder_table(a, g))
