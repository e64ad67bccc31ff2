"""Declared image statistics that define the severity ladders.

Each statistic takes the corrupted image and the clean image (most ignore the
clean one) and returns one float. All work on display-encoded RGB uint8 values
scaled to [0, 1]; "luma" is Rec. 601 luma as computed by OpenCV (rounded to 8 bits),
except where a statistic follows the reference release's definition on unrounded luma
``0.299 r + 0.587 g + 0.114 b`` of the [0, 1] image (:func:`saturated_fraction`,
:func:`occluded_fraction`; elementwise float64, the same bits on every CPU).

>>> import numpy as np
>>> flat = np.full((8, 8, 3), 100, np.uint8)
>>> rms_contrast(flat, flat)
0.0
>>> saturated_fraction(np.full((2, 2, 3), 255, np.uint8), flat)
1.0
"""

from __future__ import annotations

import math

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np


def _luma(image: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)


def rms_contrast(image: np.ndarray, clean: np.ndarray | None = None) -> float:
    """Standard deviation of luma in [0, 1] (RMS contrast)."""
    _, sd = cv2.meanStdDev(_luma(image))
    return float(sd[0, 0]) / 255.0


def luma_unit(image: np.ndarray) -> np.ndarray:
    """Unrounded Rec. 601 luma of an RGB uint8 image scaled to [0, 1], as the reference release
    computes it (``0.299 r + 0.587 g + 0.114 b`` on ``r = R / 255``...), float64.

    >>> round(float(luma_unit(np.array([[[255, 128, 0]]], np.uint8))[0, 0]), 4)
    0.5937
    """
    x = image.astype(np.float64) / 255.0
    return 0.299 * x[..., 0] + 0.587 * x[..., 1] + 0.114 * x[..., 2]


def saturated_fraction(image: np.ndarray, clean: np.ndarray | None = None, level: float = 0.94) -> float:
    """Share of pixels whose unrounded luma exceeds ``level`` (0.94: the reference release's glare
    metric; blown-out highlights).

    >>> img = np.zeros((1, 4, 3), np.uint8); img[0, 0] = 240; img[0, 1] = 239
    >>> saturated_fraction(img)  # luma 0.9412 counts, 0.9373 does not
    0.25
    """
    return float(np.count_nonzero(luma_unit(image) > level)) / (image.shape[0] * image.shape[1])


def mean_rb_ratio(image: np.ndarray, clean: np.ndarray | None = None) -> float:
    """Mean red over mean blue (display values): colour temperature shift."""
    m = cv2.mean(image)
    return (m[0] + 1e-3) / (m[2] + 1e-3)


def mean_sobel(image: np.ndarray, clean: np.ndarray | None = None) -> float:
    """Mean Sobel gradient magnitude (3x3, unnormalised, reflect-101 border as OpenCV's) of
    luma in [0, 1].

    Exact integer gradients, then only correctly rounded float64 steps (square root,
    division) and an exactly rounded sum: the same bits on every CPU, thread count and load
    (OpenCV's float32 Sobel/magnitude drifted in the 11th digit between runs).

    >>> mean_sobel(np.zeros((4, 5, 3), np.uint8))
    0.0
    """
    p = np.pad(_luma(image).astype(np.int32), 1, mode="reflect")
    rows = p[:-2] + 2 * p[1:-1] + p[2:]            # [1 2 1] down the columns
    cols = p[:, :-2] + 2 * p[:, 1:-1] + p[:, 2:]   # [1 2 1] along the rows
    gx, gy = rows[:, 2:] - rows[:, :-2], cols[2:] - cols[:-2]
    mag = np.sqrt((gx * gx + gy * gy).astype(np.float64)) / 255.0
    return math.fsum(mag.ravel().tolist()) / mag.size


def mean_luminance(image: np.ndarray, clean: np.ndarray | None = None) -> float:
    """Mean luma in [0, 1]."""
    return float(cv2.mean(_luma(image))[0]) / 255.0


def occluded_fraction(image: np.ndarray, clean: np.ndarray, threshold: float = 0.08) -> float:
    """Share of pixels whose unrounded luma changed from the clean frame by more than
    ``threshold`` (in [0, 1]; the reference release's definition): the share of the scene
    hidden by water. A change of hue alone, at equal luma, is not counted.

    >>> a = np.zeros((1, 2, 3), np.uint8); b = a.copy(); b[0, 0] = 30
    >>> occluded_fraction(b, a)  # |d luma| 0.1176 > 0.08 on one pixel of two
    0.5
    """
    diff = np.abs(luma_unit(image) - luma_unit(clean))
    return float(np.count_nonzero(diff > threshold)) / (image.shape[0] * image.shape[1])


def streak_density(image: np.ndarray, clean: np.ndarray, delta: float = 0.05) -> float:
    """Fraction of pixels at least ``delta`` (luma in [0, 1]) brighter than the
    median corrupted luma of all pixels with the same clean luma.

    A veil (any per-pixel tone mapping of the clean frame) moves whole clean-luma
    classes together and scores zero; additive streaks lift a minority of each
    class above its median, so the score is the area the streaks cover.
    """
    c = _luma(clean).ravel()
    d = _luma(image).ravel()
    joint = np.bincount(c.astype(np.int32) * 256 + d, minlength=65536).reshape(256, 256)
    cum = np.cumsum(joint, axis=1)
    half = (cum[:, -1:] + 1) // 2
    median = np.argmax(cum >= np.maximum(half, 1), axis=1)  # per clean luma class
    lifted = d.astype(np.int16) - median[c].astype(np.int16)
    return float(np.count_nonzero(lifted > delta * 255.0)) / d.size


def edge_correlation(image: np.ndarray, clean: np.ndarray, sigma: float = 1.0) -> float:
    """Pearson correlation of the Sobel magnitude maps of corrupted and clean luma,
    both smoothed by a Gaussian of ``sigma`` px first (so pixel noise does not count
    as structure). 1: the scene's edges are all still there (up to a contrast
    scale); about 0: an opaque sheet. Defined as 0 when either map is constant.

    >>> import numpy as np
    >>> img = np.zeros((32, 32, 3), np.uint8); img[:, 16:] = 200
    >>> round(edge_correlation(img // 2, img), 3)
    1.0
    """
    def edges(x: np.ndarray) -> np.ndarray:
        g = cv2.GaussianBlur(_luma(x).astype(np.float32) * np.float32(1.0 / 255.0), (0, 0), sigma)
        gx = cv2.Sobel(g, cv2.CV_32F, 1, 0, ksize=3)
        gy = cv2.Sobel(g, cv2.CV_32F, 0, 1, ksize=3)
        return cv2.magnitude(gx, gy).ravel().astype(np.float64)

    a, b = edges(image), edges(clean)
    a -= a.mean()
    b -= b.mean()
    denom = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denom) if denom > 0 else 0.0


@dataclass(frozen=True)
class Statistic:
    name: str
    fn: Callable[[np.ndarray, np.ndarray], float]
    needs_clean: bool
    description: str


STATISTICS: dict[str, Statistic] = {
    s.name: s for s in (
        Statistic("saturated_fraction", saturated_fraction, False, "share of pixels with luma > 0.94"),
        Statistic("rms_contrast", rms_contrast, False, "std of luma in [0, 1]"),
        Statistic("occluded_fraction", occluded_fraction, True,
                  "share of pixels whose luma changed by > 0.08 from clean"),
        Statistic("mean_rb_ratio", mean_rb_ratio, False, "mean R / mean B"),
        Statistic("streak_density", streak_density, True,
                  "fraction of pixels brightened > 0.05 luma above the median brightening"),
        Statistic("mean_sobel", mean_sobel, False, "mean 3x3 Sobel magnitude of luma in [0, 1]"),
        Statistic("mean_luminance", mean_luminance, False, "mean luma in [0, 1]"),
        Statistic("edge_correlation", edge_correlation, True,
                  "correlation of smoothed Sobel maps of corrupted and clean luma"),
    )
}


def measure(statistic: str, image: np.ndarray, clean: np.ndarray) -> float:
    """Evaluate a named statistic on a corrupted image (and its clean original)."""
    return STATISTICS[statistic].fn(image, clean)
