"""Storm family: rain streaks, wind platform shake, low light.

- ``rain_streaks``: additive directional streaks plus veil. Drops falling during the
  exposure image as thin bright streaks along the (wind-tilted) fall direction; they
  add radiance, ``I = J (1 - v) + v A + b S``, where the veil ``v`` (scattering by
  the rain volume toward a grey airlight A) lowers contrast and S is the streak
  layer (anti-aliased segments, random lengths and brightness). Ladder parameter:
  the streak density (streaks per 1000 x 1000 px of frame); declared statistic: the
  fraction of pixels brightened well above the veil (``streak_density``).
- ``motion_blur``: wind-induced platform shake during the exposure integrates
  radiance along a line: convolution, in linear light, with a linear kernel of
  length ``length`` (px per 1000 px) in a uniformly random direction. Implemented
  as shear -> 1-D box -> unshear (exact along the line, sub-pixel resampling across
  it); a fractional length blends the two nearest odd box sizes, so the blur is
  continuous in the length. Ladder parameter: the length.
- ``low_light``: dusk / heavy overcast as a linear photometric pipeline, with the
  reference's exposure ladder (gain 0.330 / 0.130 / 0.045 = 1.60 / 2.94 / 4.47 stops).
  Decode gamma 2.2; scale by 2^-stops; twilight white balance (r 0.92, b 1.06,
  luminance-normalised so the loss in linear luminance is exactly ``stops``); add
  Poisson-Gaussian sensor noise, variance ``shot_noise * lin + read_noise^2`` (shot
  noise scales with the signal, read noise does not, and the two independent sources
  add in variance); clip; re-encode. The reference adds the two SDs instead
  (sqrt(k lin) + c, k 0.012 / 0.020 / 0.030, c 0.010 / 0.018 / 0.028); our k and c
  are the reference's times one conversion-gain factor per severity (1.19 / 1.33 /
  1.41), chosen so a flat code-200 patch has the reference's per-pixel SD (18.0 /
  32.3 / 35.4 codes) while the shot/read ratio stays the reference's. The noisy
  output for every (input code, noise draw) pair is tabulated once, so the frame
  pass is one lookup.

Sources: K. Garg and S. K. Nayar, "Photorealistic rendering of rain streaks",
SIGGRAPH 2006, and "Vision and rain", IJCV 75 (2007); A. Foi et al., "Practical
Poissonian-Gaussian noise modeling and fitting for single-image raw-data", IEEE TIP
17 (2008); S. W. Hasinoff, "Photon, Poisson noise" (Computer Vision encyclopedia,
2014); D. Hendrycks and T. Dietterich, ImageNet-C (ICLR 2019) for motion blur as a
line kernel; the AegisBench paper (seed 004).

>>> import numpy as np
>>> img = np.full((32, 32, 3), 150, np.uint8)
>>> int(low_light(img, np.random.default_rng(0), stops=4.47).mean()) < 60
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cv2
import numpy as np

from aegisbench.corruptions.optics import (
    ENCODE_LUT, GAMMA, LUMA, NORMAL_LUT, apply_field_table, decode_lut, field_axes, lut16,
    luminance_normalised, tabulate, uniform_bytes, upsample,
)
from aegisbench.corruptions.registry import corruption
from aegisbench.schema import Declared, param
from aegisbench.vocab import RGB, THERMAL

_DECODE_U16 = decode_lut(dtype=np.uint16)


@dataclass(frozen=True)
class RainStreaksParams(Declared, coerce=True):
    density: float = param(400.0, lo=0.0, hi=1e5, unit="per 1000 x 1000 px", doc="streak density (ladder parameter)")
    length_px: float = param(40.0, lo=0.5, hi=1000.0, unit="px per 1000 px", doc="mean streak length")
    width_px: float = param(1.2, lo=0.1, hi=100.0, unit="px per 1000 px", doc="streak width")
    tilt_deg: float = param(20.0, lo=0.0, hi=80.0, unit="deg", doc="maximum wind tilt from vertical")
    brightness: float = param(0.3, lo=0.0, hi=4.0, unit="linear", doc="added radiance of a streak core")
    veil: float = param(0.12, lo=0.0, hi=1.0, doc="veil strength 1 - t")
    airlight: float = param(0.55, lo=0.0, hi=1.0, unit="linear", doc="grey airlight of the rain volume")


@corruption("rain_streaks", family="storm", params=RainStreaksParams,
            severities={1: RainStreaksParams(density=341.0, veil=0.08),
                        2: RainStreaksParams(density=812.0, veil=0.14),
                        3: RainStreaksParams(density=1640.0, veil=0.20)},
            statistic="streak_density", targets=(0.04, 0.09, 0.17), direction=1,
            fit_param="density", fit_bounds=(0.0, 20000.0),
            spatial=("length_px", "width_px"),
            modalities=(RGB, THERMAL),
            modality_note=("drops are opaque emitters at thermal wavelengths and the rain volume attenuates "
                           "the path, so streaks and veil appear in thermal frames as well (drawn brighter "
                           "than the scene)"))
def rain_streaks(image: np.ndarray, rng: np.random.Generator, p: RainStreaksParams,
                 px_per_kpx: float) -> np.ndarray:
    """Rain: additive wind-tilted streaks over a grey veil."""
    h, w = image.shape[:2]
    cell = max(1.0, p.width_px * px_per_kpx)  # one work pixel per streak width
    hw, ww = max(1, math.ceil(h / cell)), max(1, math.ceil(w / cell))
    tilt = math.radians(p.tilt_deg) * (2.0 * rng.random() - 1.0)
    area = (h / (1000.0 * px_per_kpx)) * (w / (1000.0 * px_per_kpx))
    n = int(p.density * area)
    drops = rng.random((n, 5))  # row i depends only on i: denser rain adds streaks
    layer = np.zeros((hw, ww), np.uint8)
    if n:
        length = p.length_px * px_per_kpx / cell * (0.5 + drops[:, 2])
        ang = tilt + math.radians(4.0) * (drops[:, 3] - 0.5)
        dx, dy = length * np.sin(ang) / 2, length * np.cos(ang) / 2
        cx, cy = drops[:, 0] * ww, drops[:, 1] * hw
        seg = np.stack([np.stack([cx - dx, cy - dy], 1), np.stack([cx + dx, cy + dy], 1)], 1)
        seg = np.round(seg * 16.0).astype(np.int32)  # 4 fractional bits
        level = np.minimum((drops[:, 4] * 3).astype(int), 2)
        for k, value in enumerate((110, 180, 255)):
            sel = seg[level == k]
            if len(sel):
                cv2.polylines(layer, list(sel), False, value, 1, cv2.LINE_AA, shift=4)
    streaks = upsample(layer, h, w)
    return apply_field_table(image, streaks, _rain_table(p.veil, p.airlight, p.brightness))


@functools.lru_cache(maxsize=64)
def _rain_table(veil: float, airlight: float, brightness: float) -> np.ndarray:
    j, s = field_axes()
    return tabulate(np.broadcast_to(j * (1.0 - veil) + veil * airlight + brightness * s, (256, 256, 3)))


@dataclass(frozen=True)
class MotionBlurParams(Declared, coerce=True):
    length: float = param(15.0, lo=0.0, hi=500.0, unit="px per 1000 px",
                          doc="kernel length (ladder parameter)")


@corruption("motion_blur", family="storm", params=MotionBlurParams,
            severities={1: MotionBlurParams(length=9.0),
                        2: MotionBlurParams(length=17.0),
                        3: MotionBlurParams(length=25.0)},
            statistic="mean_sobel", targets=(0.0764, 0.0572, 0.0472), direction=-1,
            fit_param="length", fit_bounds=(0.0, 200.0), spatial=("length",),
            modalities=(RGB, THERMAL),
            modality_note=("geometric: platform motion during the exposure (a microbolometer's integration "
                           "time) smears the image of any sensor"))
def motion_blur(image: np.ndarray, rng: np.random.Generator, p: MotionBlurParams,
                px_per_kpx: float) -> np.ndarray:
    """Platform shake: linear-light line kernel in a random direction."""
    theta = rng.uniform(0.0, math.pi)
    return line_blur(image, p.length * px_per_kpx, theta)


def line_blur(image: np.ndarray, length_px: float, theta: float) -> np.ndarray:
    """Blur ``image`` in linear light along direction ``theta`` (radians, x right, y down).

    The frame is sheared (and stretched along the major axis by sigma) so that lines
    of direction ``theta`` become rows (or columns) sampled so that an odd box of
    2k+1 samples spans exactly ``length_px`` pixels; one box filter in linear light,
    then the inverse warp. Continuous in ``length_px``; lengths <= 1 px are identity.

    >>> import numpy as np
    >>> img = np.zeros((9, 9, 3), np.uint8); img[4, 4] = 255
    >>> out = line_blur(img, 5.0, 0.0)
    >>> bool(out[4, 2:7].min() > 0 and out[2].max() == 0)
    True
    """
    c, s = abs(math.cos(theta)), math.sin(theta)
    if math.cos(theta) < 0:
        s = -s
    horizontal = c >= abs(s)
    major, minor = (c, s) if horizontal else (abs(s), c if s >= 0 else -c)
    n = length_px * major  # box length, in samples along the major axis
    if n <= 1.0:
        return image.copy()
    return _sheared_box(image, n, minor / major, horizontal)


def _sheared_box(image: np.ndarray, n: float, slope: float, horizontal: bool) -> np.ndarray:
    """Box of ``n`` samples along lines of ``slope`` (minor per major) via shear."""
    k = max(1, int(round((n - 1.0) / 2.0)))
    sigma = (2 * k + 1) / n
    h, w = image.shape[:2]
    # Replicate-pad the source across the line direction by what the box can reach,
    # so the forward warp can use the (much faster) constant border.
    pad = math.ceil(abs(slope) * n / 2.0) + 2
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    if horizontal:
        src = cv2.copyMakeBorder(image, pad, pad, 2, 2, cv2.BORDER_REPLICATE)
        span = abs(slope) * (w - 1)
        off = (span if slope > 0 else 0.0) + 1.0
        size = (max(1, math.ceil(w * sigma)), h + math.ceil(span) + 2)
        fwd = np.float32([[1 / sigma, 0, 2], [slope / sigma, 1, pad - off]])
        inv = np.float32([[sigma, 0, 0], [-slope, 1, off]])
        ksize = (2 * k + 1, 1)
    else:
        src = cv2.copyMakeBorder(image, 2, 2, pad, pad, cv2.BORDER_REPLICATE)
        span = abs(slope) * (h - 1)
        off = (span if slope > 0 else 0.0) + 1.0
        size = (w + math.ceil(span) + 2, max(1, math.ceil(h * sigma)))
        fwd = np.float32([[1, slope / sigma, pad - off], [0, 1 / sigma, 2]])
        inv = np.float32([[1, -slope, off], [0, sigma, 0]])
        ksize = (1, 2 * k + 1)
    canvas = cv2.warpAffine(src, fwd, size, flags=flags, borderMode=cv2.BORDER_CONSTANT)
    del src
    _banded_box(canvas, ksize, 0 if horizontal else k, inv, (w, h))
    return cv2.warpAffine(canvas, inv, (w, h), flags=flags, borderMode=cv2.BORDER_REPLICATE)


#: rows of the sheared canvas decoded, blurred and re-encoded at a time (at least 4 box radii)
BAND_ROWS = 256
#: canvas pixels of safety around what the inverse warp reads (its fixed-point rounding)
_READ_MARGIN = 2


def read_columns(inv: np.ndarray, out_wh: tuple[int, int], r0: int, r1: int) -> tuple[int, int] | None:
    """``(c0, c1)``: the canvas columns (c1 exclusive, with a safety margin, not clipped to the
    canvas) that the
    bilinear inverse warp ``inv`` (output -> canvas) reads in canvas rows ``[r0, r1)``
    for an output of ``out_wh``; None if it reads none of them.

    The output pixels whose taps fall in the band form the output rectangle cut by the
    slab ``r0 - 1 <= Y < r1`` (a convex polygon); a linear map is extreme at its vertices.

    >>> import numpy as np
    >>> read_columns(np.float32([[1, 0, 0], [0, 1, 0]]), (10, 5), 0, 2)
    (-2, 13)
    >>> read_columns(np.float32([[1, 0, 0], [0, 1, 0]]), (10, 5), 9, 12) is None
    True
    """
    w, h = out_wh
    m = _READ_MARGIN
    poly = [(0.0, 0.0), (w - 1.0, 0.0), (w - 1.0, h - 1.0), (0.0, h - 1.0)]
    a, b, c = (float(v) for v in inv[1])
    for sign, bound in ((1.0, r0 - 1.0 - m), (-1.0, -(r1 + m))):  # sign * Y >= bound
        poly = _clip(poly, lambda x, y, s=sign: s * (a * x + b * y + c), bound)
        if not poly:
            return None
    xs = [float(inv[0][0]) * x + float(inv[0][1]) * y + float(inv[0][2]) for x, y in poly]
    return math.floor(min(xs)) - m, math.floor(max(xs)) + 2 + m


def _clip(poly: list, f, bound: float) -> list:
    """Sutherland-Hodgman: the part of convex ``poly`` where ``f(x, y) >= bound``."""
    out = []
    for (x0, y0), (x1, y1) in zip(poly, poly[1:] + poly[:1]):
        f0, f1 = f(x0, y0) - bound, f(x1, y1) - bound
        if f0 >= 0:
            out.append((x0, y0))
        if (f0 >= 0) != (f1 >= 0):
            t = f0 / (f0 - f1)
            out.append((x0 + t * (x1 - x0), y0 + t * (y1 - y0)))
    return out


def _banded_box(canvas: np.ndarray, ksize: tuple[int, int], reach: int, inv: np.ndarray,
                out_wh: tuple[int, int]) -> None:
    """``canvas = encode(box(decode(canvas)))`` in place where the inverse warp reads it,
    a band of rows at a time.

    ``reach``: rows the box spans above and below a row (0 for a box along the rows). Each
    band is filtered with ``reach`` unfiltered context rows on either side and, for a box
    along the rows, ``ksize[0] // 2`` context columns (the replicate border applies only
    at the canvas edges), so every written pixel sums exactly the pixels the
    whole-canvas filter summed: the bytes read back are those of one whole-canvas pass.
    Only the columns :func:`read_columns` names are filtered (the sheared canvas is
    mostly empty corners at steep angles), and the uint16 buffers hold one band.
    """
    rows, cols = canvas.shape[:2]
    step = max(1, BAND_ROWS, 4 * reach)
    kx = ksize[0] // 2
    tail = canvas[:0]  # unfiltered rows just above the band, full width (overwritten in canvas)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        span = read_columns(inv, out_wh, r0, r1)
        if reach:
            nxt = canvas[max(0, r1 - reach):r1].copy() if r1 < rows else tail
        if span is not None:
            c0, c1 = max(0, span[0]), min(cols, span[1])
            s0, s1 = max(0, c0 - kx), min(cols, c1 + kx)  # context columns of a row box
            if reach:
                src = np.concatenate([tail[:, s0:s1], canvas[r0:min(rows, r1 + reach), s0:s1]])
                a = r0 - len(tail)  # canvas row of src[0]
                lin = cv2.blur(cv2.LUT(src, _DECODE_U16), ksize, borderType=cv2.BORDER_REPLICATE)[r0 - a:r1 - a]
            else:
                lin = cv2.blur(cv2.LUT(canvas[r0:r1, s0:s1], _DECODE_U16), ksize, borderType=cv2.BORDER_REPLICATE)
            canvas[r0:r1, c0:c1] = lut16(lin[:, c0 - s0:c1 - s0], ENCODE_LUT)
        if reach:
            tail = nxt


@dataclass(frozen=True)
class LowLightParams(Declared, coerce=True):
    stops: float = param(3.0, lo=0.0, hi=10.0, unit="stops",
                         doc="exposure loss, gain 2^-stops (ladder parameter)")
    shot_noise: float = param(0.035, lo=0.0, hi=1.0, unit="per unit linear signal",
                              doc="shot-noise variance (1 / electrons at 1.0)")
    read_noise: float = param(0.024, lo=0.0, hi=0.5, unit="linear",
                              doc="signal-independent noise SD (read + dark + ADC)")
    wb_r: float = param(0.92, lo=0.5, hi=2.0, doc="twilight white balance, red gain (luminance-normalised)")
    wb_b: float = param(1.06, lo=0.5, hi=2.0, doc="twilight white balance, blue gain (luminance-normalised)")


@corruption("low_light", family="storm", params=LowLightParams,
            severities={1: LowLightParams(stops=1.60, shot_noise=0.017, read_noise=0.012),
                        2: LowLightParams(stops=2.94, shot_noise=0.035, read_noise=0.024),
                        3: LowLightParams(stops=4.47, shot_noise=0.060, read_noise=0.039)},
            statistic="mean_luminance", targets=(0.2355, 0.1533, 0.1175), direction=-1,
            fit_param="stops", fit_bounds=(0.0, 10.0),
            modalities=(RGB,),
            modality_note=("photon scaling of reflected light, twilight white balance (blue shift) and the "
                           "shot noise of a visible-band sensor; a thermal camera images emitted radiation "
                           "and is not darker at dusk"))
def low_light(image: np.ndarray, rng: np.random.Generator, p: LowLightParams,
              px_per_kpx: float) -> np.ndarray:
    """Low light: exposure loss, twilight white balance, shot + read noise, in linear light.

    ``lin = decode(J) * 2^-stops * wb``; ``out = encode(clip(lin + sd * z))`` with
    ``sd^2 = shot_noise * lin + read_noise^2`` (Poisson-Gaussian: shot noise grows
    with the signal, read noise does not) and z standard normal per sample. Default
    ladder: the reference's exposure gains 0.330 / 0.130 / 0.045 (1.60 / 2.94 / 4.47
    stops of linear luminance) and its noise magnitude: a flat code-200 patch comes
    out at mean 120 / 73 / 44 with per-pixel SD 18.0 / 32.3 / 35.4 codes.
    """
    h, w = image.shape[:2]
    return apply_field_table(image, uniform_bytes(rng, (h, w, 3)), _low_light_table(p))


def low_light_gains(p: LowLightParams) -> np.ndarray:
    """Linear channel gains: exposure loss times the luminance-normalised white balance.

    >>> g = low_light_gains(LowLightParams(stops=1.0))
    >>> round(float(g @ np.array(LUMA)), 6)
    0.5
    """
    return (2.0 ** -p.stops) * luminance_normalised(np.array([p.wb_r, 1.0, p.wb_b]))


@functools.lru_cache(maxsize=64)
def _low_light_table(p: LowLightParams) -> np.ndarray:
    """uint8 output for index code * 256 + noise byte, per channel: (65536, 1, 3)."""
    linear = ((np.arange(256) / 255.0) ** GAMMA)[:, None] * low_light_gains(p)[None, :]  # (256, 3)
    sd = np.sqrt(p.shot_noise * linear + p.read_noise ** 2)
    z = NORMAL_LUT.astype(np.float64)
    noisy = linear[:, None, :] + sd[:, None, :] * z[None, :, None]  # (code, byte, channel)
    out = np.round(255.0 * np.clip(noisy, 0.0, 1.0) ** (1.0 / GAMMA)).astype(np.uint8)
    out = np.ascontiguousarray(out.reshape(65536, 1, 3))
    out.flags.writeable = False  # cached and shared
    return out


__all__ = ["rain_streaks", "motion_blur", "low_light", "low_light_gains", "line_blur"]
