"""WARP perturbations for smoke detectors (seed 000).

- Global sanity check: ``x' = (1 - a) x + a sigma r`` with ``r ~ N(0, 1)`` per
  element and ``sigma`` the standard deviation of the image itself, so the noise is
  contextualised to each image; ``a`` in [0, 1] (the paper sweeps 0..0.4 in steps
  of 0.001). Values are rounded and clipped to uint8.
- Local deception test: a cloud sprite pasted at the centre of each slot of a
  25 x 25 grid, one position per variant (625 variants per image). The paper pasted
  an opaque cloud image filling a 25 x 25 px patch on 640 px frames; our sprite is a
  procedural cumulus (deterministic from a key) whose visible part fills its box
  (the tight box of alpha >= 0.5 has IoU >= 0.8 with the sprite box, mean alpha
  ~0.77), so a detection drawn around the visible cloud matches the patch box that
  deception is scored against. By the engine's scale rule the default patch is 25
  px per 640 px of the longer side (39.0625 px per 1000 px). :func:`grid_boxes` is
  the one source of patch positions: the engine pastes at its boxes and the
  evaluator (``aegisbench.evaluation.warp_eval.patch_boxes``) scores against them,
  clipped to the frame.

Both are registered in the corruption registry as ``kind="warp"`` entries (family
``warp``) with the corruptions' contract ``fn(image, rng, *, px_per_kpx=None, **params)``:
``warp_noise(image, rng, a=...)`` and ``cloud_patch(image, rng, position=..., grid=...,
patch_px=...)`` (the sprite is drawn from ``rng``; ``rng_for("warp", "cloud_sprite",
*key)`` gives :func:`cloud_sprite`'s cloud). Their geometry follows the seed's frame
rule, so ``px_per_kpx`` is accepted and ignored. :func:`cloud_patch_variants` is the
fast path over all grid slots (one sprite, one buffer).

>>> import numpy as np
>>> img = np.full((100, 100, 3), 128, np.uint8)
>>> img[::2] = 0
>>> out = warp_noise(img, np.random.default_rng(0), a=0.0)
>>> bool((out == img).all())
True
>>> sum(1 for _ in cloud_patch_variants(img, grid=5, patch=8))
25
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from aegisbench.corruptions.optics import check_image, fbm_grid
from aegisbench.corruptions.registry import perturbation
from aegisbench.errors import BadInput
from aegisbench.fields import check_int, is_int
from aegisbench.hashing import rng_for
from aegisbench.schema import Declared, param
from aegisbench.vocab import CLOUD_PATCH, MODALITIES, WARP, WARP_FAMILY, WARP_GRID, WARP_NOISE, \
    parse_warp_noise_config, warp_noise_config

PATCH_PX_PER_KPX = 25.0 * 1000.0 / 640.0
_SUPERSAMPLE = 4
# Cloud geometry, in unit coordinates of the sprite box.
_MARGIN = 0.012   # the extreme puffs and the base stop this far inside the box edges
_EDGE = 0.025     # half-width of the soft alpha ramp across the silhouette
_FRAY = 0.02      # amplitude of the fractal noise that frays the silhouette
_BLEND = 0.08     # smooth-union radius: no holes or notches where puffs meet
_LIGHT = np.array([-0.35, -0.65, 0.67]) / np.linalg.norm([-0.35, -0.65, 0.67])  # from the upper left


@dataclass(frozen=True)
class WarpNoiseParams(Declared, where=WARP_NOISE):
    """The WARP global noise level ``a`` in [0, 1] (seed 000 sweeps 0..0.4)."""

    a: float = param(0.0, lo=0.0, hi=1.0, doc="noise level: x' = (1 - a) x + a sigma r")


@perturbation(WARP_NOISE, kind=WARP, family=WARP_FAMILY, params=WarpNoiseParams, modalities=MODALITIES,
              modality_note="a statistical perturbation of the pixel array (noise scaled by the frame's own "
                            "standard deviation), not a model of one band's physics: it holds for any sensor")
def warp_noise(image: np.ndarray, rng: np.random.Generator, p: WarpNoiseParams, px_per_kpx: float) -> np.ndarray:
    """WARP global noise overlay ``(1 - a) x + a * std(x) * N(0, 1)``."""
    a = p.a
    x = image.astype(np.float32)
    sigma = float(x.std())
    r = rng.standard_normal(x.shape, dtype=np.float32)
    out = x * np.float32(1.0 - a) + r * np.float32(a * sigma)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


#: Config name of a WARP noise level, in thousandths: ``warp_noise_210`` for a = 0.21.
warp_level_name = warp_noise_config


def parse_warp_level(name: str) -> float:
    """Inverse of :func:`warp_level_name` (BadInput for any other name)."""
    level = parse_warp_noise_config(name)
    if level is None:
        raise BadInput(f"not a WARP noise level name: {name!r}", where="condition")
    return level


def _size(size) -> tuple[int, int]:
    h, w = (size, size) if is_int(size) else tuple(size)
    if int(h) < 1 or int(w) < 1:
        raise BadInput(f"sprite size must be positive, got {size!r}", where="cloud_sprite")
    return int(h), int(w)


def _smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _smooth_min(a: np.ndarray, b: np.ndarray, k: float) -> np.ndarray:
    """Polynomial smooth minimum of two signed distances (a smooth union)."""
    h = np.clip(0.5 + 0.5 * (b - a) / k, 0.0, 1.0)
    return b + (a - b) * h - k * h * (1.0 - h)


def _cloud_puffs(rng: np.random.Generator) -> list[tuple[float, float, float]]:
    """Puffs ``(cx, cy, r)`` in unit coordinates: two side puffs touching the left and
    right edges, a shoulder row of three, a crown touching the top edge and a smaller
    puff beside it, so the silhouette reaches every edge of the box."""
    m = _MARGIN
    rs, ys = rng.uniform(0.18, 0.23, 2), rng.uniform(0.56, 0.66, 2)
    puffs = [(m + rs[0], ys[0], rs[0]), (1.0 - m - rs[1], ys[1], rs[1])]
    xs = np.array([0.3, 0.5, 0.7]) + rng.uniform(-0.04, 0.04, 3)
    puffs += zip(xs, rng.uniform(0.42, 0.5, 3), rng.uniform(0.21, 0.26, 3))
    rt, xt = rng.uniform(0.2, 0.25), rng.uniform(0.42, 0.58)
    puffs.append((xt, m + rt, rt))
    r2 = rng.uniform(0.14, 0.18)
    side = 1.0 if xt < 0.5 else -1.0
    puffs.append((xt + side * rng.uniform(0.15, 0.22), m + rng.uniform(0.1, 0.18) + r2, r2))
    return [(float(x), float(y), float(r)) for x, y, r in puffs]


def cloud_sprite(size, key: tuple = ()) -> np.ndarray:
    """A procedural cumulus cloud as RGBA uint8 of shape (h, w, 4) drawn from
    ``rng_for("warp", "cloud_sprite", *key)``; see :func:`sprite_from_rng`.

    >>> s = cloud_sprite(25, key=("demo",))
    >>> s.shape, s.dtype, bool(s[..., 3].max() == 255), bool(s[0, 0, 3] == 0)
    ((25, 25, 4), dtype('uint8'), True, True)
    >>> ys, xs = np.nonzero(s[..., 3] >= 128)
    >>> (int(xs.max() + 1 - xs.min()) * int(ys.max() + 1 - ys.min())) / 625 >= 0.8
    True
    """
    return sprite_from_rng(size, rng_for("warp", "cloud_sprite", *key))


def sprite_from_rng(size, rng: np.random.Generator) -> np.ndarray:
    """A procedural cumulus cloud (RGBA uint8, (h, w, 4); ``size`` is int or (h, w)) drawn
    from ``rng``.

    Like the opaque cloud image of seed 000, the visible cloud fills its box: a flat
    base spanning the width, side puffs touching the left and right edges and a
    domed crown of puffs touching the top edge, merged by a smooth union of signed
    distances (opaque inside, no holes). Fractal noise frays the silhouette within a
    soft ramp; each puff is lit from the upper left and the base is shaded darker.
    The tight box of the pixels with alpha >= 0.5 has IoU >= 0.8 with the sprite box
    (about 0.99 typically) and the mean alpha over the box is about 0.77, so a box
    drawn around the visible cloud matches the patch box. The shape is defined in
    unit coordinates, so one key gives the same cloud at every size; the transparent
    top corners keep its outline rounded.
    """
    h, w = _size(size)
    m = _MARGIN
    puffs = _cloud_puffs(rng)
    base_top = float(rng.uniform(0.55, 0.62))
    noise = fbm_grid(rng, 64, 64, 10, octaves=3)
    grain = fbm_grid(rng, 64, 64, 5, octaves=2)
    sh, sw = h * _SUPERSAMPLE, w * _SUPERSAMPLE
    yy, xx = np.mgrid[0:sh, 0:sw].astype(np.float32)
    u, v = (xx + 0.5) / sw, (yy + 0.5) / sh
    # flat base: the box [m, 1-m] x [base_top, 1-m] with slightly rounded corners
    cy, hx, hy, rad = (base_top + 1.0 - m) / 2, 0.5 - m, (1.0 - m - base_top) / 2, 0.08
    qx, qy = np.abs(u - 0.5) - hx + rad, np.abs(v - cy) - hy + rad
    dist = (np.sqrt(np.maximum(qx, 0) ** 2 + np.maximum(qy, 0) ** 2)
            + np.minimum(np.maximum(qx, qy), 0) - rad).astype(np.float32)
    light = np.zeros_like(u)
    for px, py, r in puffs:
        du, dv = (u - px) / r, (v - py) / r
        rr = du * du + dv * dv
        nz = np.sqrt(np.clip(1.0 - rr, 0.0, 1.0))
        lam = np.clip(_LIGHT[0] * du + _LIGHT[1] * dv + _LIGHT[2] * nz, 0.0, 1.0)
        light = np.maximum(light, lam * _smoothstep(1.0, 0.6, np.sqrt(rr)))
        dist = _smooth_min(dist, (np.sqrt(rr) - 1.0) * r, _BLEND)
    fray = _upsample(noise, sh, sw) * np.float32(_FRAY) * (1.0 - 0.7 * _smoothstep(0.75, 1.0, v))
    alpha = np.clip(0.5 - (dist + fray) / (2.0 * _EDGE), 0.0, 1.0)
    shade = (0.78 + 0.22 * light) * (1.0 - 0.18 * _smoothstep(0.6, 1.0, v)) + 0.03 * _upsample(grain, sh, sw)
    shade = np.clip(shade, 0.0, 1.0)
    premult = np.stack([alpha * shade] * 3 + [alpha], axis=-1).astype(np.float32)
    small = cv2.resize(premult, (w, h), interpolation=cv2.INTER_AREA)
    a = small[..., 3:]
    rgb = np.where(a > 1e-6, small[..., :3] / np.maximum(a, 1e-6), 0.0)
    return np.round(np.concatenate([rgb, a], axis=-1) * 255.0).clip(0, 255).astype(np.uint8)


def _upsample(grid: np.ndarray, h: int, w: int) -> np.ndarray:
    return cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC)


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


def grid_boxes(shape: tuple[int, ...], grid: int = WARP_GRID, patch=None, *, clip: bool = False) -> np.ndarray:
    """xyxy boxes (grid*grid, 4) float32, row-major (``index = row * grid + col``), of a
    patch centred in each grid slot: the one source of patch positions.

    ``patch`` is the patch side or (h, w) in pixels (None: the scale rule). Unclipped
    boxes give the sprite's top-left corner; ``clip=True`` clips them to the frame,
    which is the visible patch rectangle that :func:`cloud_patch_variants` yields and
    the WARP evaluator scores deception against.

    >>> grid_boxes((512, 640), grid=25)[0].tolist(), grid_boxes((512, 640), grid=25, clip=True)[0].tolist()
    ([0.0, -2.0, 25.0, 23.0], [0.0, 0.0, 25.0, 23.0])
    """
    check_int(grid, "grid", lo=1, error=BadInput, where=f"{CLOUD_PATCH}.grid")
    H, W = shape[:2]
    ph, pw = _patch_size(shape, patch)
    rows, cols = np.divmod(np.arange(grid * grid), grid)
    x0 = np.floor((cols + 0.5) * W / grid - pw / 2.0 + 0.5)
    y0 = np.floor((rows + 0.5) * H / grid - ph / 2.0 + 0.5)
    boxes = np.stack([x0, y0, x0 + pw, y0 + ph], axis=1)
    if clip:
        boxes = np.clip(boxes, 0.0, np.array([W, H, W, H], np.float64))
    return boxes.astype(np.float32)


def _patch_size(shape, patch) -> tuple[int, int]:
    if patch is None:
        side = max(1, int(math.floor(PATCH_PX_PER_KPX * max(shape[:2]) / 1000.0 + 0.5)))
        return side, side
    return _size(patch)


def cloud_patch_variants(image: np.ndarray, grid: int = WARP_GRID, patch=None, *, key: tuple = (),
                         sprite: np.ndarray | None = None,
                         reuse_buffer: bool = False) -> Iterator[tuple[int, int, int, np.ndarray, np.ndarray]]:
    """Yield ``(index, row, col, patched_image, patch_box_xyxy)`` for every grid slot.

    ``index = row * grid + col``. The sprite's top-left corner is the slot's
    :func:`grid_boxes` box and the yielded box is that box clipped to the frame
    (``grid_boxes(..., clip=True)``, float32), the visible patch rectangle in pixels.
    With ``reuse_buffer=True`` one array is patched in place and restored before the
    next slot (the caller must not keep it); otherwise every variant is a new array.
    """
    check_image(image)
    ph, pw = _patch_size(image.shape, patch)
    spr = cloud_sprite((ph, pw), key) if sprite is None else sprite
    if spr.ndim != 3 or spr.shape[2] != 4 or spr.dtype != np.uint8:
        raise BadInput("sprite must be RGBA uint8 (h, w, 4)", where="cloud_patch")
    size = (spr.shape[0], spr.shape[1])
    boxes = grid_boxes(image.shape, grid, size)
    visible = grid_boxes(image.shape, grid, size, clip=True)
    buffer = image.copy() if reuse_buffer else None
    for index, ((x0, y0, _, _), box) in enumerate(zip(boxes.tolist(), visible)):
        row, col = divmod(index, grid)
        patched, _ = paste_sprite(image, spr, int(x0), int(y0), out=buffer)
        yield index, row, col, patched, box.copy()
        if buffer is not None:
            bx0, by0, bx1, by1 = (int(v) for v in box)
            buffer[by0:by1, bx0:bx1] = image[by0:by1, bx0:bx1]


@dataclass(frozen=True)
class CloudPatchParams(Declared, where=CLOUD_PATCH):
    """One slot of the WARP patch grid: ``position = row * grid + col``; ``patch_px`` is
    the sprite side in pixels (None: 25 px per 640 px of the longer image side)."""

    position: int = param(0, lo=0, doc="grid slot, row * grid + col (below grid**2)")
    grid: int = param(WARP_GRID, lo=1, unit="slots per side", doc="side of the patch grid")
    patch_px: int | None = param(None, type=int, lo=1, unit="px", doc="sprite side (none: 25 px per 640 px)")

    def cross_check(self) -> None:
        check_int(self.position, "position", 0, self.grid * self.grid - 1, error=BadInput,
                  where=f"{CLOUD_PATCH}.position")


@perturbation(CLOUD_PATCH, kind=WARP, family=WARP_FAMILY, params=CloudPatchParams, modalities=MODALITIES,
              modality_note="a deception test of the detector (a cloud sprite pasted into the frame), "
                            "not a model of one band's physics: it holds for any sensor")
def cloud_patch(image: np.ndarray, rng: np.random.Generator, p: CloudPatchParams, px_per_kpx: float) -> np.ndarray:
    """WARP local deception: a procedural cloud (drawn from ``rng``) pasted at one grid slot."""
    ph, pw = _patch_size(image.shape, p.patch_px)
    x0, y0 = grid_boxes(image.shape, p.grid, (ph, pw))[p.position, :2].tolist()
    out, _ = paste_sprite(image, sprite_from_rng((ph, pw), rng), int(x0), int(y0))
    return out
