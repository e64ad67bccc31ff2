"""Contract tests over the whole corruption registry."""

from __future__ import annotations

import dataclasses
import doctest
import importlib

import numpy as np
import pytest

import aegisbench.corruptions as C
from aegisbench.corruptions.registry import corruption, unregister
from aegisbench.corruptions.samples import synthetic_scene
from aegisbench.corruptions.statistics import measure
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for
from aegisbench.vocab import MODALITIES

KEY = ("0.1.0", "synthetic_sar", "img_0001")

# Every registered corruption needs an entry here (checked below). ``identity`` are
# parameters under which the model must return the input unchanged, up to
# ``tolerance`` DN.
SETTINGS = {
    "water_glare": {"identity": {"coverage": 0.0}, "tolerance": 0},
    "turbidity_cast": {"identity": {"turbidity": 0.0, "chroma": 0.0}, "tolerance": 0},
    "inundation": {"identity": {"coverage": 0.0}, "tolerance": 0},
    "smoke_haze": {"identity": {"optical_depth": 0.0}, "tolerance": 0},
    "fire_warm_tint": {"identity": {"optical_depth": 0.0, "cct_k": 6504.0}, "tolerance": 0},
    "rain_streaks": {"identity": {"density": 0.0, "veil": 0.0}, "tolerance": 0},
    "motion_blur": {"identity": {"length": 0.0}, "tolerance": 0},
    "low_light": {"identity": {"stops": 0.0, "wb_r": 1.0, "wb_b": 1.0, "read_noise": 0.0,
                               "shot_noise": 0.0}, "tolerance": 0},
    "dust_haze": {"identity": {"optical_depth": 0.0}, "tolerance": 0},
}


def _textured(h: int, w: int, seed: int) -> np.ndarray:
    """Procedural texture: stripes + blobs + noise, unlike the scene generator."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 0.5 + 0.25 * np.sin(xx / (5 + seed)) * np.cos(yy / (7 + seed))
    img = np.stack([base * c for c in rng.uniform(0.6, 1.2, 3)], axis=-1)
    img += rng.normal(0, 0.06, img.shape)
    return np.clip(img * 255, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def sample() -> dict[str, np.ndarray]:
    return {
        "scene_a": synthetic_scene(256, 320, key=("contract", 1)),
        "scene_b": synthetic_scene(320, 256, key=("contract", 2)),
        "texture": _textured(288, 288, 3),
    }


@pytest.fixture(scope="module")
def image(sample) -> np.ndarray:
    return sample["scene_a"]


def test_every_registered_corruption_has_test_settings():
    assert set(SETTINGS) == set(C.names()), "every registered corruption needs its SETTINGS entry, and only those"


def test_registry_families_and_declarations():
    families = {C.get_spec(n).family for n in C.names()}
    assert families == {"flood", "wildfire", "storm", "earthquake"}
    for name in C.names():
        spec = C.get_spec(name)
        assert spec.fn.__name__ == name
        assert spec.statistic in C.STATISTICS
        assert set(spec.severities) == {1, 2, 3}


@pytest.mark.parametrize("name", sorted(SETTINGS) + ["warp_noise", "cloud_patch"])
def test_every_unit_declares_the_modalities_its_physics_holds_for(name):
    spec = C.get_spec(name, kind=None)
    assert isinstance(spec.modalities, tuple) and spec.modalities, name
    assert set(spec.modalities) <= set(MODALITIES) and len(set(spec.modalities)) == len(spec.modalities)
    assert spec.modality_note.strip() and spec.modality_note == spec.modality_note.strip()
    assert set(C.names(kind=None)) == set(SETTINGS) | {"warp_noise", "cloud_patch"}  # no unit escapes this test


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_shape_dtype_kept_and_input_untouched(name, image):
    before = image.copy()
    out = C.apply_condition(f"{name}_s3", image, key=KEY)
    assert out.shape == image.shape and out.dtype == np.uint8
    assert out is not image
    np.testing.assert_array_equal(image, before)
    assert np.abs(out.astype(int) - image.astype(int)).mean() > 0.5  # it does something


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_same_key_same_bytes_different_key_different_noise(name, image):
    a = C.apply_condition(f"{name}_s2", image, key=KEY)
    b = C.apply_condition(f"{name}_s2", image, key=KEY)
    c = C.apply_condition(f"{name}_s2", image, key=("0.1.0", "synthetic_sar", "img_0002"))
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_statistic_strictly_monotone_across_severities(name, sample):
    spec = C.get_spec(name)
    means = []
    for s in C.SEVERITIES:
        vals = [measure(spec.statistic, C.apply_condition(f"{name}_s{s}", img, key=("t", k)), img)
                for k, img in sample.items()]
        means.append(np.mean(vals))
    assert np.all(np.diff(means) * spec.direction > 0), (name, means)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_identity_parameters_return_the_input(name, image):
    spec = C.get_spec(name)
    params = dataclasses.asdict(spec.severities[2])
    params.update(SETTINGS[name]["identity"])
    out = spec.fn(image, rng_for("identity"), **params)
    assert np.abs(out.astype(int) - image.astype(int)).max() <= SETTINGS[name]["tolerance"]


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_boxes_unchanged_and_geometry_only_moves_spatial_models(name, image):
    boxes = np.array([[10, 12, 30, 40], [100, 100, 118, 126], [200, 50, 210, 66]], np.float32)
    before = boxes.copy()
    frame = C.apply_condition(f"{name}_s3", image, key=KEY, boxes=boxes)
    target = C.apply_condition(f"{name}_s3", image, key=KEY, boxes=boxes, geometry="target-relative")
    np.testing.assert_array_equal(boxes, before)
    if C.get_spec(name).spatial:
        assert frame.tobytes() != target.tobytes()
    else:
        assert frame.tobytes() == target.tobytes()


def test_scale_rule_motion_blur_kernel():
    length = C.default_table().params("motion_blur", 3).length
    assert length * C.px_per_kpx((3000, 4000, 3)) == pytest.approx(100.0)
    assert length * C.px_per_kpx((640, 640, 3)) == pytest.approx(16.0)
    assert C.px_per_kpx((640, 640, 3), "target-relative", target_size=40.0) == pytest.approx(1.0)
    boxes = np.array([[0, 0, 20, 20], [0, 0, 30, 30], [0, 0, 60, 60]], np.float32)
    assert C.median_target_size(boxes) == pytest.approx(30.0)
    # no targets: target-relative falls back to the frame
    assert C.px_per_kpx((640, 480, 3), "target-relative", boxes=np.zeros((0, 4))) == 0.64


def test_list_and_names_round_trip():
    conds = C.list_conditions()
    assert len(conds) == len(C.names()) * len(C.SEVERITIES) == len(set(conds))
    assert {c.rsplit("_s", 1)[0] for c in conds} == set(C.names())
    for c in conds:
        assert C.parse_condition(c) == ((c.rsplit("_s", 1)[0], int(c[-1])),)
        assert C.from_config_name(C.to_config_name(c)) == c
    comp = "low_light_s2+inundation_s2"
    assert C.to_config_name(comp) == "low_light_s2__inundation_s2"
    assert C.from_config_name("low_light_s2__inundation_s2") == comp
    assert C.parse_condition("clean") == ()


def test_compound_applies_in_order(image):
    both = C.apply_condition("low_light_s2+inundation_s2", image, key=KEY)
    first = C.apply_condition("low_light_s2", image, key=KEY)
    then = C.apply_condition("inundation_s2", first, key=KEY)
    np.testing.assert_array_equal(both, then)
    other = C.apply_condition("inundation_s2+low_light_s2", image, key=KEY)
    assert other.tobytes() != both.tobytes()


def test_clean_is_a_copy(image):
    out = C.apply_condition("clean", image, key=KEY)
    np.testing.assert_array_equal(out, image)
    assert out is not image


@pytest.mark.parametrize("bad, fragment", [
    ("fog_s1", "fog"), ("low_light_s4", "low_light_s4"), ("low_light", "low_light"),
    ("low_light_s2+fog_s1", "fog"), ("smoke_haze_s1+smoke_haze_s2", "smoke_haze"), ("", "non-empty"),
])
def test_unknown_conditions_raise_badinput_naming_them(bad, fragment, image):
    with pytest.raises(BadInput, match=fragment):
        C.apply_condition(bad, image, key=KEY)


@pytest.mark.parametrize("bad", [
    np.zeros((32, 32), np.uint8), np.zeros((32, 32, 4), np.uint8), np.zeros((32, 32, 3), np.float32),
    np.zeros((0, 32, 3), np.uint8), [[1, 2, 3]],
])
def test_bad_images_raise_badinput(bad):
    with pytest.raises(BadInput):
        C.apply_condition("smoke_haze_s1", bad, key=KEY)
    with pytest.raises(BadInput):
        C.smoke_haze(bad, rng_for("x"))


def test_unknown_corruption_severity_and_geometry(image):
    with pytest.raises(BadInput, match="fog"):
        C.get_spec("fog")
    with pytest.raises(BadInput, match="severity"):
        C.default_table().params("smoke_haze", 0)
    with pytest.raises(BadInput, match="geometry"):
        C.apply_condition("smoke_haze_s1", image, key=KEY, geometry="altitude")
    with pytest.raises(BadInput, match="key"):
        C.apply_condition("smoke_haze_s1", image, key=())


def test_parameters_are_validated(image):
    with pytest.raises(ValueError, match="optical_depth"):
        C.smoke_haze(image, rng_for("x"), optical_depth=-1.0)
    with pytest.raises(TypeError):
        C.smoke_haze(image, rng_for("x"), optical_depth="thick")
    with pytest.raises(TypeError):
        C.smoke_haze(image, rng_for("x"), density=3.0)  # a field of another corruption
    with pytest.raises(TypeError):
        C.smoke_haze(image, np.random.RandomState(0))


def test_registry_rejects_duplicates_and_name_mismatch():
    spec = C.get_spec("motion_blur")
    decl = dict(family="storm", params=spec.params_type, severities=dict(spec.severities),
                statistic=spec.statistic, targets=spec.targets, direction=spec.direction,
                fit_param=spec.fit_param, fit_bounds=spec.fit_bounds, modalities=spec.modalities,
                modality_note=spec.modality_note)
    with pytest.raises(ValueError, match="already registered"):
        @corruption("motion_blur", **decl)
        def motion_blur(image, rng, p, px):  # noqa: F811
            return image
    with pytest.raises(ValueError, match="must equal"):
        @corruption("shake_blur", **decl)
        def other(image, rng, p, px):
            return image
    with pytest.raises(ValueError, match="monotone"):
        corruption("flat_blur", **{**decl, "targets": (1.0, 1.0, 0.5)})
    with pytest.raises(TypeError, match="declare modalities"):
        corruption("bare_blur", **{k: v for k, v in decl.items() if k != "modalities"})
    unregister("shake_blur")
    assert "shake_blur" not in C.names()


@pytest.mark.parametrize("module", ["optics", "registry", "statistics", "flood", "wildfire", "storm",
                                    "earthquake", "conditions", "calibrate", "warp", "samples"])
def test_module_doctests(module):
    mod = importlib.import_module(f"aegisbench.corruptions.{module}")
    result = doctest.testmod(mod)
    assert result.failed == 0 and result.attempted > 0


def test_numpy_lookup_fallback_matches_opencv():
    """OpenCV 4.x cannot look up 16-bit indices; the NumPy fallback must agree byte for byte."""
    from aegisbench.corruptions import optics

    rng = np.random.default_rng(0)
    index = rng.integers(0, 65536, (17, 23, 3), dtype=np.uint16)
    per_channel = rng.integers(0, 256, (65536, 1, 3), dtype=np.uint8)
    single = rng.integers(0, 256, 65536, dtype=np.uint8)
    for table in (per_channel, single):
        expected = np.stack([table.reshape(65536, -1)[index[..., c], c if table.ndim == 3 else 0]
                             for c in range(3)], axis=-1)
        np.testing.assert_array_equal(optics._lut16_numpy(index, table), expected)
        np.testing.assert_array_equal(optics.lut16(index, table), expected)
