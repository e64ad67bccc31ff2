"""motion_blur's banded line blur writes the bytes of the whole-frame algorithm it replaced.

The old algorithm (one LUT, one box filter, one encode over the whole sheared canvas) is
kept here verbatim; the library now runs the same steps in row bands (overlapping by the
box radius when the box runs down the columns) to bound its memory, and in each band only
over the canvas columns the inverse warp reads (plus the box radius along the rows). Outputs
must be equal byte for byte at every angle class, length and frame size, including bands
smaller than the box (with no safety margin around the columns read the bytes still match;
two pixels fewer and they do not).
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from aegisbench.corruptions import storm
from aegisbench.corruptions.optics import ENCODE_LUT, lut16
from aegisbench.corruptions.samples import synthetic_scene
from aegisbench.hashing import rng_for


def _old_sheared_box(image: np.ndarray, n: float, slope: float, horizontal: bool) -> np.ndarray:
    k = max(1, int(round((n - 1.0) / 2.0)))
    sigma = (2 * k + 1) / n
    h, w = image.shape[:2]
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
    lin = cv2.blur(cv2.LUT(canvas, storm._DECODE_U16), ksize, borderType=cv2.BORDER_REPLICATE)
    return cv2.warpAffine(lut16(lin, ENCODE_LUT), inv, (w, h), flags=flags, borderMode=cv2.BORDER_REPLICATE)


def _old_line_blur(image: np.ndarray, length_px: float, theta: float) -> np.ndarray:
    c, s = abs(math.cos(theta)), math.sin(theta)
    if math.cos(theta) < 0:
        s = -s
    horizontal = c >= abs(s)
    major, minor = (c, s) if horizontal else (abs(s), c if s >= 0 else -c)
    n = length_px * major
    if n <= 1.0:
        return image.copy()
    return _old_sheared_box(image, n, minor / major, horizontal)


def _frames():
    rng = rng_for("test", "line_blur_bands")
    yield synthetic_scene(97, 131, key=("test", "bands", "small"))
    yield rng.integers(0, 256, (211, 157, 3), dtype=np.uint8)  # noise: every rounding case of the box
    yield synthetic_scene(300, 420, key=("test", "bands", "mid"))


@pytest.mark.parametrize("band_rows", [1, 7, 64, None])
def test_banded_blur_is_byte_identical(monkeypatch, band_rows):
    if band_rows is not None:
        monkeypatch.setattr(storm, "BAND_ROWS", band_rows)
    rng = rng_for("test", "line_blur_bands", "angles", band_rows or 0)
    thetas = [0.0, math.pi / 4, math.pi / 2, 3 * math.pi / 4, *rng.uniform(0, math.pi, 6)]
    for img in _frames():
        for length in (1.5, 6.0, 23.4, 61.0):
            for theta in thetas:
                new, old = storm.line_blur(img, length, theta), _old_line_blur(img, length, theta)
                assert new.dtype == old.dtype and new.shape == old.shape
                assert np.array_equal(new, old), (img.shape, length, theta, band_rows)


def test_motion_blur_condition_unchanged_on_a_tall_frame():
    """The registered corruption at every severity, through its seeded generator."""
    import dataclasses

    import aegisbench.corruptions as C

    spec = C.get_spec("motion_blur")
    img = synthetic_scene(640, 480, key=("test", "bands", "tall"))
    for sev, p in spec.severities.items():
        theta = rng_for("bands", sev).uniform(0.0, math.pi)
        new = spec.fn(img, rng_for("bands", sev), **dataclasses.asdict(p))
        old = _old_line_blur(img, p.length * max(img.shape[:2]) / 1000.0, theta)
        assert np.array_equal(new, old), sev
