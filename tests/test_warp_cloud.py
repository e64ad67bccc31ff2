"""WARP local deception test: the cloud fills its patch box, and one patch-box source.

Seed 000 pastes an opaque cloud image that fills a 25 x 25 patch; a detection counts
as deceived when it matches the patch box (IoU >= 0.5). So the visible cloud must
fill the box that :func:`grid_boxes` gives, and the engine and the evaluator must use
those very boxes.
"""

from __future__ import annotations

import numpy as np
import pytest

import aegisbench.corruptions as C
from aegisbench.evaluation.warp_eval import patch_boxes

SIZES = [25, (25, 25), 16, 39, 64, 100, (60, 100), (40, 25)]
KEYS = [(), ("warp_patch",), ("demo",), ("cloud",)] + [("k", i) for i in range(12)]
SPRITE_KEY = ("warp_patch",)  # the runner's key (aegisbench.detectors.warp_runner.SPRITE_KEY)


def _tight(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


@pytest.mark.parametrize("size", SIZES, ids=str)
def test_visible_cloud_fills_its_box(size):
    for key in KEYS:
        s = C.cloud_sprite(size, key)
        h, w = s.shape[:2]
        alpha = s[..., 3].astype(np.float64) / 255.0
        assert _iou(_tight(alpha >= 0.5), (0, 0, w, h)) >= 0.8, key
        assert alpha.mean() >= 0.7, key  # mostly opaque, like seed 000's cloud image
        assert (alpha == 1.0).mean() >= 0.5, key  # a solid body, not a haze


def test_cloud_still_looks_like_a_cumulus():
    for key in KEYS:
        s = C.cloud_sprite(100, key).astype(np.float64)
        alpha, rgb = s[..., 3] / 255.0, s[..., :3]
        assert alpha[0, 0] == alpha[0, -1] == 0  # rounded, domed top: transparent top corners
        top, bottom = (alpha[2] >= 0.5).sum(), (alpha[-3] >= 0.5).sum()
        assert top < 0.6 * bottom  # crown narrower than the flat base
        assert ((alpha > 0.05) & (alpha < 0.95)).mean() > 0.03  # frayed, soft edges
        solid = alpha == 1.0
        upper, base = solid.copy(), solid.copy()
        upper[50:], base[:80] = False, False
        assert rgb[..., 0][base].mean() < rgb[..., 0][upper].mean() - 10  # shaded base
        assert rgb[solid].mean() > 200  # a bright cloud
        np.testing.assert_array_equal(rgb[..., 0], rgb[..., 2])  # neutral grey/white


def test_one_key_gives_the_same_cloud_at_every_size():
    import cv2
    big = C.cloud_sprite(100, ("warp_patch",))[..., 3].astype(np.float32)
    small = C.cloud_sprite(25, ("warp_patch",))[..., 3].astype(np.float32)
    shrunk = cv2.resize(big, (25, 25), interpolation=cv2.INTER_AREA)
    assert np.abs(shrunk - small).mean() < 8
    other = C.cloud_sprite(25, ("k", 3))[..., 3].astype(np.float32)
    assert np.abs(shrunk - other).mean() > np.abs(shrunk - small).mean()


FRAMES = [(640, 640), (512, 640), (1080, 1920), (640, 480)]  # (H, W)
SLOTS = [(0, 0), (0, 24), (24, 0), (24, 24), (0, 12), (12, 0), (24, 12), (12, 24), (12, 12), (7, 19)]


@pytest.mark.parametrize("hw", FRAMES, ids=str)
def test_box_around_visible_cloud_matches_the_patch_box(hw):
    """Independent of the engine's box: recover alpha from the patched black and white
    frames (difference from the clean frame), box the alpha >= 0.5 pixels, compare."""
    H, W = hw
    black, white = np.zeros((H, W, 3), np.uint8), np.full((H, W, 3), 255, np.uint8)
    unclipped = C.grid_boxes((H, W), 25)
    clipped = np.clip(unclipped, 0, [W, H, W, H])
    wanted = {r * 25 + c for r, c in SLOTS}
    on_black = {i: p[..., 0].astype(np.int16)
                for i, _, _, p, _ in C.cloud_patch_variants(black, key=SPRITE_KEY, reuse_buffer=True) if i in wanted}
    for i, _, _, p, _ in C.cloud_patch_variants(white, key=SPRITE_KEY, reuse_buffer=True):
        if i not in wanted:
            continue
        # black: c*a; white: c*a + 255(1-a)  =>  1 - a = (white - black) / 255
        alpha = 1.0 - (p[..., 0].astype(np.int16) - on_black[i]) / 255.0
        box = _tight(alpha >= 0.5)
        assert _iou(box, clipped[i]) >= 0.8, (i, box, clipped[i])
        if (unclipped[i] == clipped[i]).all():
            assert _iou(box, unclipped[i]) >= 0.8
        # a detection drawn around the cloud deceives (IoU >= 0.5 with the scored box)
        assert _iou(box, patch_boxes(W, H, 25)[i]) >= 0.5


@pytest.mark.parametrize("hw", [(640, 640), (512, 640)], ids=str)
@pytest.mark.parametrize("patch_px", [None, 40])
def test_patch_boxes_and_variant_boxes_are_grid_boxes(hw, patch_px):
    H, W = hw
    grid = C.grid_boxes((H, W), 25, patch_px).astype(np.float64)
    clipped = np.clip(grid, 0, [W, H, W, H])
    if patch_px is None:
        assert (grid[:, 2] - grid[:, 0] == 25).all()  # 25 px per 640 px of the longer side
    assert ((grid < 0) | (grid > [W, H, W, H])).any() == (H == 512 or patch_px == 40)  # edges clip
    np.testing.assert_array_equal(C.grid_boxes((H, W), 25, patch_px, clip=True), clipped)
    np.testing.assert_array_equal(patch_boxes(W, H, 25, patch_px), clipped)
    side = 25 if patch_px is None else patch_px
    opaque = np.full((side, side, 4), 255, np.uint8)  # pasted region == box, exactly
    frame = np.zeros((H, W, 3), np.uint8)
    seen = []
    for sprite in (None, opaque):
        boxes = []
        for i, r, c, p, box in C.cloud_patch_variants(frame, 25, patch_px, key=SPRITE_KEY, sprite=sprite,
                                                      reuse_buffer=True):
            assert (r, c) == divmod(i, 25)
            boxes.append(box)
            if sprite is not None:
                changed = p[..., 0] != 0
                x0, y0, x1, y1 = _tight(changed)
                assert changed[y0:y1, x0:x1].all()
                assert [x0, y0, x1, y1] == clipped[i].tolist()
        np.testing.assert_array_equal(np.array(boxes, np.float64), clipped)
        seen.append(len(boxes))
    assert seen == [625, 625]
