"""WARP perturbations: global noise and the cloud-patch grid."""

from __future__ import annotations

import numpy as np
import pytest

import aegisbench.corruptions as C
from aegisbench.corruptions.samples import synthetic_scene
from aegisbench.corruptions.warp import parse_warp_level
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return synthetic_scene(320, 400, key=("warp", 1))


def test_warp_noise_follows_the_formula(image):
    a = 0.2
    out = C.warp_noise(image, rng_for("n", a), a=a)
    x = image.astype(np.float64)
    sigma = x.std()
    r = rng_for("n", a).standard_normal(image.shape, dtype=np.float32)
    expected = np.clip(np.rint((1 - a) * x.astype(np.float32) + a * sigma * r), 0, 255)
    assert np.abs(out - expected).max() <= 1
    resid = out.astype(np.float64) - (1 - a) * x
    inside = (out > 0) & (out < 255)
    assert resid[inside].std() == pytest.approx(a * sigma, rel=0.05)
    assert abs(resid[inside].mean()) < 0.05 * a * sigma


def test_warp_noise_levels_and_determinism(image):
    np.testing.assert_array_equal(C.warp_noise(image, rng_for("z"), a=0.0), image)
    a = C.warp_noise(image, rng_for("k"), a=0.3)
    b = C.warp_noise(image, rng_for("k"), a=0.3)
    c = C.warp_noise(image, rng_for("k2"), a=0.3)
    assert a.tobytes() == b.tobytes() != c.tobytes()
    assert a.shape == image.shape and a.dtype == np.uint8
    # the perturbation is contextual: sigma comes from the image itself
    flat = np.full((64, 64, 3), 100, np.uint8)
    np.testing.assert_array_equal(C.warp_noise(flat, rng_for("f"), a=0.4), np.full_like(flat, 60))


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.2", True])
def test_warp_noise_rejects_bad_levels(bad, image):
    with pytest.raises(BadInput, match=r"warp_noise\.a: must (lie in \[0\.0, 1\.0\]|be a number)"):
        C.warp_noise(image, rng_for("x"), a=bad)


def test_warp_level_names_round_trip():
    assert C.warp_level_name(0.21) == "warp_noise_210"
    for k in (0, 1, 210, 400, 1000):
        assert parse_warp_level(C.warp_level_name(k / 1000)) == k / 1000
    with pytest.raises(BadInput):
        C.warp_level_name(0.2105)
    with pytest.raises(BadInput):
        parse_warp_level("warp_noise_x")


def test_cloud_sprite_is_deterministic_cumulus():
    s = C.cloud_sprite((60, 100), key=("cloud",))
    assert s.shape == (60, 100, 4) and s.dtype == np.uint8
    np.testing.assert_array_equal(s, C.cloud_sprite((60, 100), key=("cloud",)))
    assert s.tobytes() != C.cloud_sprite((60, 100), key=("other",)).tobytes()
    alpha = s[..., 3]
    assert alpha[0, 0] == alpha[-1, -1] == 0 and alpha.max() == 255
    ys, xs = np.nonzero(alpha > 128)
    assert xs.max() - xs.min() > ys.max() - ys.min()  # wider than tall
    opaque = s[..., :3][alpha == 255]
    assert opaque.mean() > 200  # bright cloud
    assert opaque[:, 0].mean() == pytest.approx(opaque[:, 2].mean(), abs=2)  # neutral white
    small = C.cloud_sprite(25, key=("cloud",))
    assert small.shape == (25, 25, 4)
    with pytest.raises(BadInput):
        C.cloud_sprite(0)


def test_grid_positions_are_slot_centres():
    boxes = C.grid_boxes((640, 640, 3), grid=25)
    assert boxes.shape == (625, 4)
    assert np.all(boxes[:, 2] - boxes[:, 0] == 25) and np.all(boxes[:, 3] - boxes[:, 1] == 25)
    cx = (boxes[:, 0] + boxes[:, 2]) / 2
    cy = (boxes[:, 1] + boxes[:, 3]) / 2
    slot = 640 / 25
    assert np.abs(cx - ((np.arange(625) % 25) + 0.5) * slot).max() <= 0.5
    assert np.abs(cy - ((np.arange(625) // 25) + 0.5) * slot).max() <= 0.5
    # scale rule: 25 px per 640 px of the longer side unless configured
    big = C.grid_boxes((3000, 4000, 3))
    assert big[0, 2] - big[0, 0] == round(25 * 4000 / 640)
    # slot centre (12.5, 12.5); a 10 x 6 patch starts at round-half-up(7.5, 9.5)
    assert C.grid_boxes((100, 100, 3), grid=4, patch=(6, 10))[0].tolist() == [8.0, 10.0, 18.0, 16.0]
    with pytest.raises(BadInput, match="grid"):
        C.grid_boxes((100, 100, 3), grid=0)


def test_cloud_patch_variants_cover_the_grid(image):
    seen = []
    for index, row, col, patched, box in C.cloud_patch_variants(image, grid=25, key=("c",)):
        assert index == row * 25 + col
        x0, y0, x1, y1 = box.astype(int)
        assert 0 <= x0 < x1 <= image.shape[1] and 0 <= y0 < y1 <= image.shape[0]
        diff = np.any(patched != image, axis=2)
        outside = diff.copy()
        outside[y0:y1, x0:x1] = False
        assert not outside.any()
        assert diff[y0:y1, x0:x1].any()
        seen.append(index)
    assert seen == list(range(625))


def test_cloud_patch_variants_reuse_buffer_matches_copies(image):
    copies = [(i, p.copy(), b) for i, _, _, p, b in C.cloud_patch_variants(image, grid=4, key=("c",))]
    for (i, p, b), (j, _, _, q, c) in zip(copies, C.cloud_patch_variants(
            image, grid=4, key=("c",), reuse_buffer=True)):
        assert i == j
        np.testing.assert_array_equal(p, q)
        np.testing.assert_array_equal(b, c)
    before = image.copy()
    list(C.cloud_patch_variants(image, grid=3))
    np.testing.assert_array_equal(image, before)


def test_cloud_patch_at_frame_edge_is_clipped():
    img = np.zeros((50, 50, 3), np.uint8)
    sprite = np.full((20, 20, 4), 255, np.uint8)
    out, box = C.paste_sprite(img, sprite, -10, 40)
    assert box.tolist() == [0.0, 40.0, 10.0, 50.0]
    assert out[40:, :10].min() == 255 and out[:40].max() == 0 and out[:, 10:].max() == 0
