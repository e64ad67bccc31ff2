"""One vocabulary, one implementation: the words of aegisbench.vocab, the WARP entries of the
corruption registry, and the shared leaf helpers (fields, geometry, stats, atomic)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import aegisbench
import aegisbench.corruptions as C
from aegisbench import vocab as V
from aegisbench.staging import resumable_dir, staged_dir
from aegisbench.errors import BadInput
from aegisbench.fields import FieldError, FieldTypeError, check_bool, check_choice, check_float, check_int
from aegisbench.geometry import box_area, box_iou, iou_one_to_many, pair_iou
from aegisbench.hashing import rng_for
from aegisbench.stats import count_ratios, multiplicities, percentile_interval, resample_indices

PACKAGE = Path(aegisbench.__file__).resolve().parent
KEY = ("0.4.0", "synthetic_smoke", "img_1")


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    from aegisbench.corruptions.samples import synthetic_scene
    return synthetic_scene(120, 160, key=("vocab", 1))


# ------------------------------------------------------------------ grammar

@pytest.mark.parametrize("name, kind", [
    ("clean", V.CLEAN), ("low_light_s3", V.CORRUPTION), ("low_light_s2__inundation_s2", V.COMPOUND),
    ("low_light_s2+inundation_s2", V.COMPOUND), ("warp_noise_100", V.WARP_NOISE),
    ("firespread_s20", V.FIRESPREAD_ENSEMBLE), ("firespread_statistic", V.FIRESPREAD_STATISTIC),
    ("warp_patch", V.WARP_PATCH), ("low_light", None), ("warp_noise_x", None), ("", None), (3, None),
])
def test_config_kind_follows_the_grammar(name, kind):
    assert V.config_kind(name) == kind


def test_config_names_round_trip():
    for corruption in C.names():
        for s in V.SEVERITIES:
            assert V.parse_corruption_config(V.corruption_config(corruption, s)) == (corruption, s)
    for k in (0, 1, 210, 1000):
        assert V.parse_warp_noise_config(V.warp_noise_config(k / 1000)) == k / 1000
    for s in (0, 5, 100):
        assert V.parse_firespread_config(V.firespread_config(s)) == s
    assert V.parse_firespread_config(V.FIRESPREAD_STATISTIC_CONFIG) is None
    assert V.is_firespread_config(V.FIRESPREAD_STATISTIC_CONFIG) and not V.is_firespread_config("clean")
    assert V.config_to_condition(V.condition_to_config("a_s1+b_s2")) == "a_s1+b_s2"
    assert [V.parse_severity_key(k) for k in ("s2", 3, "x", "s")] == [2, 3, None, None]
    with pytest.raises(BadInput):
        V.warp_noise_config(0.2105)
    assert V.parse_warp_noise_config("warp_noise_1001") is None


def test_every_condition_helper_speaks_the_grammar():
    assert C.list_conditions() == [V.corruption_config(n, s) for n in C.names() for s in V.SEVERITIES]
    assert C.to_config_name("low_light_s2+inundation_s2") == V.condition_to_config("low_light_s2+inundation_s2")
    assert C.warp_level_name(0.4) == V.warp_noise_config(0.4)


# --------------------------------------------------- registry and families

def test_the_registry_and_the_vocabulary_agree_on_families():
    fams = C.corruption_families()
    assert list(fams) == C.names() and len(fams) == 9
    assert set(fams.values()) == set(V.FAMILIES)  # every family has a corruption, none other
    ranks = [V.family_rank(f) for f in fams.values()]
    assert ranks == sorted(ranks)  # table order is family order
    from aegisbench.leaderboard.results import FAMILY_OF
    assert FAMILY_OF == fams


def test_warp_perturbations_are_registry_entries_outside_the_nine():
    assert C.names(kind=V.WARP) == [V.WARP_NOISE, V.CLOUD_PATCH]
    assert not set(C.names(kind=V.WARP)) & set(C.names())
    for name in C.names(kind=V.WARP):
        spec = C.get_spec(name, kind=V.WARP)
        assert (spec.kind, spec.family) == (V.WARP, V.WARP_FAMILY) and not hasattr(spec, "severities")
        with pytest.raises(BadInput, match="unknown corruption"):
            C.get_spec(name)
    assert all(C.get_spec(n).kind == V.CORRUPTION for n in C.names())
    with pytest.raises(BadInput, match="no corruption named 'warp_noise'"):
        C.parse_condition("warp_noise_s1")
    with pytest.raises(BadInput, match="unknown corruption"):
        C.SeverityTable.from_dict({"warp_noise": {"severities": {}}})
    with pytest.raises(ValueError, match="corruptions register with @corruption"):
        C.perturbation("fog_patch", kind=V.CORRUPTION, family=V.WARP_FAMILY, params=object)


def test_warp_noise_has_the_corruption_contract(image):
    fn = C.get_spec(V.WARP_NOISE, kind=V.WARP).fn
    assert fn is C.warp_noise
    out = fn(image, rng_for("n"), a=0.2, px_per_kpx=3.0)  # geometry-free: px_per_kpx is ignored
    np.testing.assert_array_equal(out, fn(image, rng_for("n"), a=0.2))
    x = image.astype(np.float32)
    r = rng_for("n").standard_normal(x.shape, dtype=np.float32)
    expected = np.clip(np.rint(x * np.float32(0.8) + r * np.float32(0.2 * float(x.std()))), 0, 255)
    np.testing.assert_array_equal(out, expected.astype(np.uint8))
    with pytest.raises(TypeError):
        fn(image, np.random.RandomState(0), a=0.1)
    with pytest.raises(TypeError):
        fn(image, rng_for("n"), 0.1)  # parameters are keywords, as for every corruption
    with pytest.raises(BadInput, match=r"^warp_noise.a: must lie in \[0.0, 1.0\], got 1.5$"):
        fn(image, rng_for("n"), a=1.5)


def test_warp_noise_configs_apply_through_apply_condition(image):
    name = V.warp_noise_config(0.1)
    via_condition = C.apply_condition(name, image, key=KEY)
    direct = C.warp_noise(image, rng_for(*KEY, V.WARP_NOISE, name), a=0.1)
    np.testing.assert_array_equal(via_condition, direct)
    assert via_condition.tobytes() != image.tobytes()


def test_cloud_patch_entry_equals_the_variant_iterator(image):
    key = ("warp_patch",)
    variants = {i: (p.copy(), b) for i, _, _, p, b in C.cloud_patch_variants(image, grid=5, key=key)}
    for position in (0, 7, 24):
        out = C.cloud_patch(image, rng_for("warp", "cloud_sprite", *key), position=position, grid=5)
        np.testing.assert_array_equal(out, variants[position][0])
    with pytest.raises(BadInput, match="position"):
        C.cloud_patch(image, rng_for("x"), position=25, grid=5)
    with pytest.raises(BadInput, match="grid"):
        C.cloud_patch(image, rng_for("x"), grid=0)


# ------------------------------------------------------------------ fields

def test_field_checks():
    assert check_int(np.int64(3), "n", lo=1) == 3 and isinstance(check_int(np.int64(3), "n"), int)
    assert check_float(1, "x", 0.0, 1.0) == 1.0
    with pytest.raises(FieldTypeError, match="n must be an integer, got 3.0"):
        check_int(3.0, "n")
    with pytest.raises(TypeError):
        check_float("0.5", "x")
    with pytest.raises(ValueError, match=r"x must lie in \(0.0, 1.0\], got 0.0"):
        check_float(0.0, "x", 0.0, 1.0, lo_open=True)
    with pytest.raises(ValueError, match="finite"):
        check_float(float("nan"), "x")
    with pytest.raises(BadInput, match=r"^--grid: must be an integer >= 1, got 0$"):
        check_int(0, "grid", lo=1, error=BadInput, where="--grid")
    with pytest.raises(TypeError):
        check_bool(1, "flag")
    assert check_choice("b", "c", ("a", "b")) == "b"
    with pytest.raises(ValueError, match="must be one of"):
        check_choice("z", "c", ("a", "b"))
    try:
        check_float(2.0, "P.x", 0.0, 1.0)
    except FieldError as exc:
        assert (exc.field, exc.detail) == ("x", "must lie in [0.0, 1.0], got 2.0")


# ------------------------------------------------------- geometry and stats

def test_iou_is_one_implementation():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 50, (30, 2))
    b = np.concatenate([xy, xy + rng.uniform(1, 20, (30, 2))], axis=1)
    m = box_iou(b, b)
    assert np.allclose(np.diag(m), 1.0) and np.allclose(m, m.T)
    np.testing.assert_array_equal(iou_one_to_many(b[3], b), m[3])
    np.testing.assert_array_equal(pair_iou(b, box_area(b), b[::-1], box_area(b[::-1])), np.diag(m[:, ::-1]))
    from aegisbench.evaluation import matching
    assert matching.pair_iou is pair_iou and matching.box_iou is box_iou


def test_the_bootstrap_draw_and_its_interval():
    idx = resample_indices(7, ("k", 1), 50)
    np.testing.assert_array_equal(idx, rng_for("k", 1).integers(0, 7, (50, 7)))  # scipy.stats.bootstrap's call
    w = multiplicities(idx, 7)
    assert w.shape == (50, 7) and (w.sum(axis=1) == 7).all()
    assert percentile_interval([np.nan, 1.0, 3.0], (0, 100)) == (1.0, 3.0)
    assert all(np.isnan(percentile_interval([np.nan])))
    assert percentile_interval([np.nan], fallback=(0.5, 0.5)) == (0.5, 0.5)
    with pytest.raises(ValueError):
        resample_indices(0, ("k",))


def test_prf_is_one_implementation():
    from aegisbench import metrics as M
    from aegisbench.evaluation.bootstrap import count_statistics
    from aegisbench.evaluation.threshold import f1_curve
    from aegisbench.evaluation.matching import match_images

    assert count_statistics is count_ratios
    rng = np.random.default_rng(1)
    for counts in rng.integers(0, 9, (200, 3)).tolist() + [[0, 0, 0], [0, 3, 0], [0, 0, 4]]:
        r = count_ratios(counts)
        tp, fp, fn = counts
        dens = {"recall": tp + fn, "precision": tp + fp, "f1": 2 * tp + fp + fn}
        for name in ("recall", "precision", "f1"):
            got, want = float(r[name]), getattr(M, name)(counts)
            if dens[name] == 0:  # 0/0: the registered metric is undefined (nan -> null, "n/a"),
                assert np.isnan(want) and got == 0.0  # count_ratios keeps 0 for threshold picking
            else:
                assert got == want
    m = match_images([np.array([[0, 0, 10, 10], [20, 20, 30, 30.]])], [np.array([0.9, 0.4])],
                     [np.array([[0, 0, 10, 10.], [50, 50, 60, 60]])])
    curve = f1_curve(m, [0.3, 0.5])
    summed = np.stack([curve["tp"], curve["fp"], curve["fn"]], axis=1)
    for name, v in count_ratios(summed).items():
        np.testing.assert_array_equal(curve[name], v)


# ---------------------------------------------------------- staged writes

def test_staged_and_resumable_dirs(tmp_path):
    with pytest.raises(RuntimeError):
        with staged_dir(tmp_path / "out") as d:
            (d / "a").write_text("x")
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    work = resumable_dir(tmp_path / "run", "partial")
    (work / "done.json").write_text("{}")
    (work / ".part.parquet.abc.tmp").write_text("half")
    again = resumable_dir(tmp_path / "run", "partial")
    assert again == work and sorted(p.name for p in again.iterdir()) == ["done.json"]


# ------------------------------------------------------------- no copies

_SHARED = {"pair_iou", "box_iou", "box_area", "percentile_interval", "resample_indices", "multiplicities",
           "count_ratios", "staged_dir", "resumable_dir", "drop_partial_writes", "check_choice", "warp_noise_config", "parse_corruption_config"}
_HOME = {"aegisbench/geometry.py", "aegisbench/stats.py", "aegisbench/atomic.py", "aegisbench/staging.py", "aegisbench/fields.py",
         "aegisbench/vocab.py"}


def _sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def test_shared_logic_is_defined_once_in_a_leaf():
    defs = [(rel, node.name) for rel, tree in _sources() for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name in _SHARED]
    assert sorted(n for _, n in defs) == sorted(_SHARED), defs
    assert {rel for rel, _ in defs} <= _HOME, defs


@pytest.mark.parametrize("words", [V.TRACKS, V.DETECTION_TRACKS, V.FAMILIES, tuple(V.REQUIRED_FIELDS)])
def test_vocabulary_tuples_are_spelled_once(words):
    copies = [f"{rel}:{node.lineno}" for rel, tree in _sources() if rel != "aegisbench/vocab.py"
              for node in ast.walk(tree)
              if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == len(words)
              and all(isinstance(e, ast.Constant) for e in node.elts)
              and tuple(e.value for e in node.elts) == tuple(words)]
    assert not copies, f"{words} spelled by hand in {copies}: import it from aegisbench.vocab"


@pytest.mark.parametrize("text", ["\u00b2", "1\u00b9", "\u0663", "\uff11"])
def test_config_numbers_are_ascii_digits_only(text):
    """Superscripts are isdigit() but not int()-able; other scripts' digits are not our names."""
    assert V.parse_warp_noise_config(f"warp_noise_{text}") is None
    assert V.parse_firespread_config(f"firespread_s{text}") is None
    assert V.parse_severity_key(f"s{text}") is None
