"""One declared-parameter schema (aegisbench.schema): every parameter dataclass of the corruption
families, the fire-spread section, the fire-spread model and the reference detector's recipe
declares each field once (type, bounds, default, unit, doc) and is checked by one __post_init__."""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import aegisbench.corruptions  # noqa: F401  (registers every family)
from aegisbench.corruptions.registry import get_spec, names
from aegisbench.detectors.reference import ReferenceParams
from aegisbench.errors import BadInput
from aegisbench.fields import FieldError, FieldTypeError
from aegisbench.firespread.model import SeedModel
from aegisbench.params.firespread import FirespreadParams, ForecastParams
from aegisbench.schema import Declared, describe, main, param, param_of, parameter_lines


@dataclass(frozen=True)
class Toy(Declared, coerce=True):
    sigma: float = param(1.0, lo=0.0, hi=5.0, hi_open=True, unit="px", doc="blur")
    n: int = param(2, lo=1, doc="passes")
    mode: str = param("a", choices=("a", "b"))
    flag: bool = param(False)
    crop: int | None = param(None, type=int, lo=32)
    levels: tuple[int, ...] = param((0, 5), type=int, each=True, lo=0, hi=100, unit="%")


@dataclass(frozen=True)
class UserToy(Declared, where="params.yaml: toy"):
    n: int = param(1, lo=1, hi=5)
    x: float = param(0.5, lo=0.0, hi=1.0)


def test_declaration_lives_in_field_metadata():
    f = {f.name: f for f in dataclasses.fields(Toy)}
    assert f["sigma"].metadata["type"] is float and f["sigma"].metadata["bounds"] == (0.0, 5.0)
    assert (f["sigma"].metadata["unit"], f["sigma"].metadata["doc"]) == ("px", "blur")
    assert f["n"].metadata["type"] is int and f["mode"].metadata["type"] is str
    assert dict(Toy.BOUNDS) == {"sigma": (0.0, 5.0), "n": (1, None), "crop": (32, None), "levels": (0, 100)}


def test_one_post_init_checks_type_bounds_and_choices_naming_the_field():
    t = Toy(sigma=2, levels=[1, 2])
    assert t.sigma == 2.0 and type(t.sigma) is float and t.levels == (1, 2)  # coerce: ints stored as floats
    with pytest.raises(FieldTypeError, match=r"^Toy.n must be an integer, got True$"):
        Toy(n=True)  # a bool is not an int
    with pytest.raises(FieldTypeError, match="Toy.sigma must be a number"):
        Toy(sigma=True)
    with pytest.raises(FieldError, match=r"^Toy.sigma must lie in \[0.0, 5.0\), got 5.0$"):
        Toy(sigma=5.0)
    with pytest.raises(FieldError, match=r"Toy.mode must be one of \('a', 'b'\), got 'c'"):
        Toy(mode="c")
    with pytest.raises(TypeError, match="Toy.flag must be true or false"):
        Toy(flag=1)
    assert Toy(crop=None).crop is None and Toy(crop=64).crop == 64
    with pytest.raises(FieldError, match="Toy.crop must be an integer >= 32, got 16"):
        Toy(crop=16)
    with pytest.raises(FieldError, match=r"Toy.levels must lie in \[0, 100\], got 101"):
        Toy(levels=(5, 101))
    with pytest.raises(TypeError, match="Toy.levels must be a list"):
        Toy(levels=5)
    with pytest.raises(TypeError, match="Toy.mode must be text"):
        Toy(mode=3)


def test_user_input_classes_raise_badinput_at_their_location():
    with pytest.raises(BadInput, match=r"^params.yaml: toy.n: must lie in \[1, 5\], got 9$"):
        UserToy(n=9)
    with pytest.raises(BadInput, match=r"^params.yaml: toy.x: must be a number, got '1'$"):
        UserToy(x="1")
    assert UserToy(x=1).x == 1 and type(UserToy(x=1).x) is int  # no coerce: the value as given


def test_a_declaration_is_shared_not_repeated():
    @dataclass(frozen=True)
    class Copy(Declared):
        sigma: float = param_of(Toy, "sigma")

    assert Copy.BOUNDS == {"sigma": (0.0, 5.0)} and Copy().sigma == 1.0
    with pytest.raises(ValueError, match="not a declared parameter"):
        param_of(Toy, "nope")


def test_parameter_listing_reads_units_and_docs(capsys):
    assert parameter_lines(Toy)[0] == "sigma: float = 1.0, in [0.0, 5.0) px -- blur"
    assert [p.name for p in describe(Toy)] == [f.name for f in dataclasses.fields(Toy)]
    assert "levels: list of int = (0, 5), in [0, 100] %" in parameter_lines(Toy)
    assert main(["aegisbench.corruptions.storm"]) == 0
    out = capsys.readouterr().out
    assert "aegisbench.corruptions.storm.RainStreaksParams\n" in out
    assert "  length_px: float = 40.0, in [0.5, 1000.0] px per 1000 px -- mean streak length\n" in out
    assert main([]) == 2


def test_every_corruption_family_declares_its_parameters_once():
    modules = set()
    for kind in ("corruption", "warp"):
        for name in names(kind=kind):
            pt = get_spec(name, kind=kind).params_type
            assert issubclass(pt, Declared), name
            declared = {f.name for f in dataclasses.fields(pt) if "param" in f.metadata}
            assert declared == {f.name for f in dataclasses.fields(pt)}, name
            if kind == "corruption":
                assert set(pt.BOUNDS) == declared and all(d.doc or d.unit for d in describe(pt)), name
            modules.add(sys.modules[pt.__module__].__file__)
    assert len(modules) >= 5
    for path in map(Path, modules):  # the nine-times-repeated table and __post_init__ are gone
        text = path.read_text()
        assert not re.search(r"BOUNDS\s*[:=]|def __post_init__|check_fields", text), path.name


def test_corruption_parameters_still_coerce_and_refuse_as_before():
    p = get_spec("low_light").params_type(stops=2)
    assert p.stops == 2.0 and type(p.stops) is float
    with pytest.raises(FieldError, match=r"LowLightParams.stops must lie in \[0.0, 10.0\], got 12.5"):
        get_spec("low_light").params_type(stops=12.5)
    with pytest.raises(ValueError, match="mud colour must not be black"):
        get_spec("turbidity_cast").params_type(mud_r=0.0, mud_g=0.0, mud_b=0.0)
    image = np.full((8, 8, 3), 100, np.uint8)
    with pytest.raises(BadInput, match=r"^cloud_patch.position: must lie in \[0, 24\], got 25$"):
        get_spec("cloud_patch", kind="warp").fn(image, np.random.default_rng(0), position=25, grid=5)


def test_the_fire_spread_physics_is_declared_once():
    shared = ("q_threshold", "i_seed", "q_die", "ember_ticks", "max_steps")
    assert tuple(f.name for f in dataclasses.fields(SeedModel)) == shared
    for name in shared:
        assert SeedModel.BOUNDS[name] == FirespreadParams.BOUNDS[name]
        assert getattr(SeedModel(), name) == getattr(FirespreadParams(), name)
    assert FirespreadParams.BOUNDS["max_steps"] == (1, 32000)  # the tighter of the two former rules
    with pytest.raises(FieldError, match=r"^SeedModel.max_steps must lie in \[1, 32000\], got 32766$"):
        SeedModel(max_steps=32766)
    with pytest.raises(BadInput, match=r"^params.yaml: firespread.max_steps: must lie in \[1, 32000\]"):
        FirespreadParams(max_steps=32766)


def test_the_fire_spread_listing_gives_units(capsys):
    assert main(["aegisbench.params.firespread", "aegisbench.firespread.model"]) == 0
    out = capsys.readouterr().out
    assert "aegisbench.params.firespread.FirespreadParams\n" in out and "aegisbench.firespread.model.SeedModel\n" in out
    assert out.count("  max_steps: int = 2000, in [1, 32000] ticks -- ") == 2


@pytest.mark.parametrize("raw, where, fragment", [
    ({"grid": [2, 24]}, "firespread.grid", "must lie in [3, 4096], got 2"),
    ({"ember_ticks": True}, "firespread.ember_ticks", "must be an integer, got True"),
    ({"forest_density": 0.0}, "firespread.forest_density", "must lie in (0.0, 1.0], got 0.0"),
    ({"s_levels": [10, 5]}, "firespread.s_levels", "must be strictly increasing"),
    ({"s_levels": []}, "firespread.s_levels", "needs at least one S-level"),
    ({"test_initial_conditions": [12]}, "firespread.test_initial_conditions", "must lie in [0, 9], got 12"),
    ({"forecast": {"threshold": 1.0}}, "firespread.forecast.threshold", "must lie in [0.0, 1.0), got 1.0"),
    ({"forecast": {"ece_bins": 0}}, "firespread.forecast.ece_bins", "must lie in [1, 1000], got 0"),
])
def test_firespread_section_refusals_name_the_key(raw, where, fragment):
    with pytest.raises(BadInput) as err:
        FirespreadParams.from_dict(raw)
    assert err.value.where == f"params.yaml: {where}" and fragment in err.value.message


def test_integers_given_for_floats_stay_as_given_where_they_are_hashed():
    p = FirespreadParams.from_dict({"q_threshold": 5})
    assert p.to_dict()["q_threshold"] == 5 and type(p.q_threshold) is int
    assert ForecastParams(threshold=0).threshold == 0


@pytest.mark.parametrize("raw, where, fragment", [
    ({"imgsz": 16}, "reference_detector.imgsz", "must be an integer >= 32, got 16"),
    ({"crop": None}, None, None),
    ({"lr0": 1.0}, "reference_detector.lr0", "must lie in (0.0, 1.0), got 1.0"),
    ({"optimizer": "adamw"}, "reference_detector.optimizer", "must be one of"),
    ({"onednn": 1}, "reference_detector.onednn", "must be true or false, got 1"),
    ({"epochs": 2.0}, "reference_detector.epochs", "must be an integer, got 2.0"),
    ({"model": "net.pt"}, "reference_detector", "model must be an Ultralytics model YAML"),
])
def test_reference_recipe_refusals_name_the_key(raw, where, fragment):
    if where is None:
        assert ReferenceParams.from_dict(raw).crop is None
        return
    with pytest.raises(BadInput) as err:
        ReferenceParams.from_dict(raw)
    assert err.value.where == f"params.yaml: {where}" and fragment in err.value.message


def test_every_settings_dataclass_is_declared_and_refuses_naming_the_field():
    from aegisbench.detectors.tiling import TilingParams
    from aegisbench.evaluation.bootstrap import BootstrapParams
    from aegisbench.evaluation.evaluator import EvaluationParams
    from aegisbench.evaluation.submission import ValidationLimits
    from aegisbench.forecasters.convlstm import ConvLSTMConfig
    from aegisbench.params import BuildParams, WarpTestParams
    from aegisbench.service.rules import HostingRules, Phase

    for cls in (TilingParams, BootstrapParams, EvaluationParams, ValidationLimits, ConvLSTMConfig, BuildParams,
                WarpTestParams, HostingRules, Phase):
        assert issubclass(cls, Declared) and all("param" in f.metadata for f in dataclasses.fields(cls)), cls
    assert HostingRules.BOUNDS["max_attempts"] == (1, 20) and ConvLSTMConfig.BOUNDS["lr"] == (0.0, None)
    with pytest.raises(FieldError, match=r"^ConvLSTMConfig.crop must be an integer >= 0, got -1$"):
        ConvLSTMConfig(crop=-1)
    with pytest.raises(FieldError, match=r"^EvaluationParams.max_dets must be an integer >= 1, got 0$"):
        EvaluationParams(max_dets=0)
    with pytest.raises(FieldError, match=r"^TilingParams.overlap must lie in \[0, 511\], got 512$"):
        TilingParams(tile=512, overlap=512)
    with pytest.raises(BadInput, match=r"^params.yaml: build.workers: must be an integer >= 1, got 0$"):
        BuildParams(workers=0)
    with pytest.raises(BadInput, match=r"^params.yaml: hosting.phases\[1\].daily_limit: must lie in \[1, 10000\]"):
        HostingRules.from_dict({"phases": [{"name": "a", "closes": "2026-01-01"},
                                           {"name": "b", "opens": "2026-01-01", "daily_limit": 0}]})
    assert Phase("x", daily_limit=0).daily_limit == 0  # a phase alone is checked by its rules, where its place is known
    assert ValidationLimits(frame_tolerance_px=0).frame_tolerance_px == 0  # no coercion: hashed as given
