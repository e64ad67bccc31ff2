"""WARP perturbations for smoke detectors (seed 000).

- Global sanity check: ``x' = (1 - a) x + a sigma r`` with ``r ~ N(0, 1)`` per
  element and ``sigma`` the standard deviation of the image itself, so the noise is
  contextualised to each image; ``a`` in [0, 1] (the paper sweeps 0..0.4 in steps
  of 0.001). Values are rounded and clipped to uint8.
- Local deception test: a cloud sprite (procedural cumulus with alpha, deterministic
  from a key) pasted at the centre of each slot of a 25 x 25 grid, one position per
  variant (625 variants per image). The paper used a 25 x 25 px patch on 640 px
  frames; by the engine's scale rule the default patch is 25 px per 640 px of the
  longer side (39.0625 px per 1000 px).

>>> import numpy as np
>>> img = np.full((100, 100, 3), 128, np.uint8)
>>> img[::2] = 0
>>> out = warp_noise(img, np.random.default_rng(0), 0.0)
>>> bool((out == img).all())
True
>>> sum(1 for _ in cloud_patch_variants(img, grid=5, patch=8))
25
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import cv2
import numpy as np

from aegisbench.corruptions.optics import check_image, fbm_grid
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for

PATCH_PX_PER_KPX = 25.0 * 1000.0 / 640.0
_SUPERSAMPLE = 4


def warp_noise(image: np.ndarray, rng: np.random.Generator, a: float) -> np.ndarray:
    """WARP global noise overlay ``(1 - a) x + a * std(x) * N(0, 1)``."""
    check_image(image)
    if isinstance(a, bool) or not isinstance(a, (int, float, np.floating)) or not 0.0 <= a <= 1.0:
        raise BadInput(f"noise level a must lie in [0, 1], got {a!r}", where="warp_noise")
    x = image.astype(np.float32)
    sigma = float(x.std())
    r = rng.standard_normal(x.shape, dtype=np.float32)
    out = x * np.float32(1.0 - a) + r * np.float32(a * sigma)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def warp_level_name(a: float) -> str:
    """Config name of a WARP noise level, in thousandths: ``warp_noise_210`` for a = 0.21."""
    k = round(float(a) * 1000)
    if not 0 <= k <= 1000 or abs(k - float(a) * 1000) > 1e-6:
        raise BadInput(f"WARP noise level must be a multiple of 0.001 in [0, 1], got {a!r}",
                       where="warp_noise")
    return f"warp_noise_{k:03d}"


def parse_warp_level(name: str) -> float:
    """Inverse of :func:`warp_level_name`."""
    prefix = "warp_noise_"
    tail = name[len(prefix):] if isinstance(name, str) and name.startswith(prefix) else ""
    if not tail.isdigit() or int(tail) > 1000:
        raise BadInput(f"not a WARP noise level name: {name!r}", where="condition")
    return int(tail) / 1000.0


def _size(size) -> tuple[int, int]:
    h, w = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if int(h) < 1 or int(w) < 1:
        raise BadInput(f"sprite size must be positive, got {size!r}", where="cloud_sprite")
    return int(h), int(w)


def cloud_sprite(size, key: tuple = ()) -> np.ndarray:
    """A procedural cumulus cloud as RGBA uint8 of shape (h, w, 4); ``size`` is int or (h, w).

    Puffs (soft discs, bigger toward the middle) sit on a flat base; fractal noise
    frays the edges; shading darkens the base slightly. The shape is defined in unit
    coordinates, so one key gives the same cloud at every size.

    >>> s = cloud_sprite(25, key=("demo",))
    >>> s.shape, s.dtype, bool(s[..., 3].max() == 255), bool(s[0, 0, 3] == 0)
    ((25, 25, 4), dtype('uint8'), True, True)
    """
    h, w = _size(size)
    rng = rng_for("warp", "cloud_sprite", *key)
    n = int(rng.integers(7, 12))
    xs = np.sort(rng.uniform(0.22, 0.78, n))
    dome = np.clip(1.0 - ((xs - 0.5) / 0.32) ** 2, 0.0, 1.0)
    radii = (0.09 + 0.19 * dome) * rng.uniform(0.85, 1.15, n)
    base = 0.80
    ys = base - radii * rng.uniform(0.6, 1.0, n)
    noise = fbm_grid(rng, 64, 64, 12, octaves=3)
    sh, sw = h * _SUPERSAMPLE, w * _SUPERSAMPLE
    yy, xx = np.mgrid[0:sh, 0:sw].astype(np.float32)
    u, v = (xx + 0.5) / sw, (yy + 0.5) / sh
    density = np.full((sh, sw), -1.0, np.float32)
    for cx, cy, r in zip(xs, ys, radii):
        density = np.maximum(density, 1.0 - np.sqrt((u - cx) ** 2 + (v - cy) ** 2) / r)
    fray = cv2.resize(noise, (sw, sh), interpolation=cv2.INTER_CUBIC) * np.float32(0.06)
    alpha = np.clip((density + fray) / 0.2, 0.0, 1.0) * (density > -0.12)
    alpha *= np.clip((base + 0.02 - v) / 0.04, 0.0, 1.0)  # flat base
    shade = np.clip(1.0 - 0.25 * (v - 0.45) / 0.35, 0.75, 1.0)
    premult = np.stack([alpha * shade] * 3 + [alpha], axis=-1)
    small = cv2.resize(premult, (w, h), interpolation=cv2.INTER_AREA)
    a = small[..., 3:]
    rgb = np.where(a > 1e-6, small[..., :3] / np.maximum(a, 1e-6), 0.0)
    return np.round(np.concatenate([rgb, a], axis=-1) * 255.0).clip(0, 255).astype(np.uint8)


def paste_sprite(image: np.ndarray, sprite: np.ndarray, x0: int, y0: int,
                 out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Alpha-composite an RGBA sprite with its top-left at (x0, y0), clipped to the frame.

    Returns (image, box_xyxy) where box is the visible sprite rectangle (float32).
    """
    H, W = image.shape[:2]
    h, w = sprite.shape[:2]
    ax0, ay0, ax1, ay1 = max(x0, 0), max(y0, 0), min(x0 + w, W), min(y0 + h, H)
    target = image.copy() if out is None else out
    if ax1 <= ax0 or ay1 <= ay0:
        return target, np.zeros(4, np.float32)
    sp = sprite[ay0 - y0:ay1 - y0, ax0 - x0:ax1 - x0].astype(np.float32)
    alpha = sp[..., 3:] / 255.0
    region = image[ay0:ay1, ax0:ax1].astype(np.float32)
    target[ay0:ay1, ax0:ax1] = np.rint(sp[..., :3] * alpha + region * (1.0 - alpha)).astype(np.uint8)
    return target, np.array([ax0, ay0, ax1, ay1], np.float32)


def grid_boxes(shape: tuple[int, ...], grid: int = 25, patch=None) -> np.ndarray:
    """Unclipped xyxy boxes (grid*grid, 4), row-major, of a patch centred in each grid slot."""
    if isinstance(grid, bool) or not isinstance(grid, (int, np.integer)) or grid < 1:
        raise BadInput(f"grid must be a positive integer, got {grid!r}", where="cloud_patch")
    H, W = shape[:2]
    ph, pw = _patch_size(shape, patch)
    rows, cols = np.divmod(np.arange(grid * grid), grid)
    x0 = np.floor((cols + 0.5) * W / grid - pw / 2.0 + 0.5)
    y0 = np.floor((rows + 0.5) * H / grid - ph / 2.0 + 0.5)
    return np.stack([x0, y0, x0 + pw, y0 + ph], axis=1).astype(np.float32)


def _patch_size(shape, patch) -> tuple[int, int]:
    if patch is None:
        side = max(1, int(math.floor(PATCH_PX_PER_KPX * max(shape[:2]) / 1000.0 + 0.5)))
        return side, side
    return _size(patch)


def cloud_patch_variants(image: np.ndarray, grid: int = 25, patch=None, *, key: tuple = (),
                         sprite: np.ndarray | None = None,
                         reuse_buffer: bool = False) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """Yield ``(index, row, col, patched_image, patch_box_xyxy)`` for every grid slot.

    ``index = row * grid + col``. The box is the visible patch rectangle in pixels.
    With ``reuse_buffer=True`` one array is patched in place and restored before the
    next slot (the caller must not keep it); otherwise every variant is a new array.
    """
    check_image(image)
    ph, pw = _patch_size(image.shape, patch)
    spr = cloud_sprite((ph, pw), key) if sprite is None else sprite
    if spr.ndim != 3 or spr.shape[2] != 4 or spr.dtype != np.uint8:
        raise BadInput("sprite must be RGBA uint8 (h, w, 4)", where="cloud_patch")
    boxes = grid_boxes(image.shape, grid, (spr.shape[0], spr.shape[1]))
    buffer = image.copy() if reuse_buffer else None
    for index, (x0, y0, _, _) in enumerate(boxes.tolist()):
        row, col = divmod(index, grid)
        if buffer is None:
            patched, box = paste_sprite(image, spr, int(x0), int(y0))
            yield index, row, col, patched, box
        else:
            patched, box = paste_sprite(image, spr, int(x0), int(y0), out=buffer)
            yield index, row, col, patched, box
            bx0, by0, bx1, by1 = (int(v) for v in box)
            buffer[by0:by1, bx0:bx1] = image[by0:by1, bx0:bx1]
