"""Corrupted, compound and WARP configs materialized through the repo writer."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

from aegisbench.builders.build import build_repo
from aegisbench.builders.sources import materialize_source
from aegisbench.dataset.manifest import load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.cli import main
from aegisbench.errors import BadInput
from aegisbench.params import Params

TINY = {
    "synthetic_sar": {"n_train": 0, "n_val": 1, "n_test": 2, "images_per_flight": 1,
                      "small_size": [256, 256], "large_size": [400, 300]},
    "synthetic_smoke": {"n_train": 0, "n_val": 1, "n_test": 1, "frames_per_sequence": 2,
                        "size": [192, 144]},
}


def params_for(tmp, **build) -> Params:
    return Params.from_dict({
        "benchmark_version": "0.1.0",
        "paths": {"sources": str(tmp / "sources"), "dataset": str(tmp / "repo")},
        "build": {"rows_per_shard": 2, **build},
        "sources": {name: {"track": "sar" if name.endswith("sar") else "smoke", "kind": name,
                           "license": "mit", "options": opts} for name, opts in TINY.items()},
    })


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cond")
    params = params_for(tmp, conditions=["low_light_s3", "motion_blur_s1"],
                        compound=["low_light_s2+inundation_s2"])
    for src in params.sources:
        materialize_source(src, params.benchmark_version, params.sources_dir)
    build_repo(params, progress=False)
    return tmp / "repo", params


def test_configs_meta_and_splits(repo):
    path, _ = repo
    m = load_manifest(path)
    assert sorted(m["configs"]) == ["clean", "low_light_s2__inundation_s2", "low_light_s3", "motion_blur_s1"]
    assert m["configs"]["low_light_s3"]["meta"] == {
        "kind": "corruption", "corruption": "low_light", "family": "storm", "severity": 3,
        "components": ["low_light_s3"], "warp_level": None}
    assert m["configs"]["low_light_s2__inundation_s2"]["meta"]["components"] == [
        "low_light_s2", "inundation_s2"]
    # corrupted configs have test splits only; WARP is not built (warp-detect runs it on clean frames)
    assert set(m["configs"]["low_light_s3"]["splits"]) == {"synthetic_sar", "synthetic_smoke"}
    # rgb sources (the default modality): recorded, and every condition is physical for them
    assert {s["modality"] for n, s in m["sources"].items()} == {"rgb"}
    assert not any("not_physical" in c for c in m["configs"].values())
    assert verify_repo(path).ok


def test_config_modalities_are_the_parts_intersection(tmp_path):
    from aegisbench.builders.conditions import config_specs, not_physical
    params = params_for(tmp_path, conditions=["low_light_s3", "motion_blur_s1"],
                        compound=["motion_blur_s1+inundation_s2", "motion_blur_s1+smoke_haze_s1"])
    mods = {s.name: s.modalities for s in config_specs(params)}
    assert mods == {"clean": ("rgb", "thermal"), "low_light_s3": ("rgb",), "motion_blur_s1": ("rgb", "thermal"),
                    "motion_blur_s1__inundation_s2": ("rgb", "thermal"), "motion_blur_s1__smoke_haze_s1": ("rgb",)}
    raw = dict(params.raw)
    raw["sources"] = {**raw["sources"], "synthetic_smoke": {**raw["sources"]["synthetic_smoke"], "modality": "thermal"}}
    skipped = not_physical(Params.from_dict(raw), config_specs(params))
    assert skipped == {"low_light_s3": {"synthetic_smoke": "thermal"},
                       "motion_blur_s1__smoke_haze_s1": {"synthetic_smoke": "thermal"}}


def test_pixels_change_boxes_do_not(repo):
    path, _ = repo
    clean = datasets.load_dataset(str(path), "clean")["synthetic_sar"]
    dark = datasets.load_dataset(str(path), "low_light_s3")["synthetic_sar"]
    assert clean["image_id"] == dark["image_id"]
    for c, d in zip(clean, dark):
        assert c["objects"] == d["objects"] and c["sha256"] != d["sha256"]
        a, b = np.asarray(c["image"], np.float32), np.asarray(d["image"], np.float32)
        assert a.shape == b.shape and b.mean() < 0.5 * a.mean()  # 4.47 stops darker
        assert d["condition"] == "low_light_s3"


def test_same_key_same_bytes(repo, tmp_path):
    path, params = repo
    raw = dict(params.raw, paths={"sources": params.sources_dir, "dataset": str(tmp_path / "again")})
    again = build_repo(Params.from_dict(raw), progress=False)
    assert again["dataset_digest"] == load_manifest(path)["dataset_digest"]


@pytest.mark.parametrize("build, needle", [
    ({"conditions": ["fog_s1"]}, "fog"),
    ({"conditions": ["low_light_s4"]}, "low_light"),
    ({"compound": ["low_light_s2+snow_s1"]}, "snow"),
    ({"conditions": ["clean"]}, "clean"),
])
def test_unknown_conditions_are_bad_input(tmp_path, build, needle, capsys):
    with pytest.raises(BadInput, match=needle):
        from aegisbench.builders.conditions import config_specs
        config_specs(params_for(tmp_path, **build))
    (tmp_path / "p.yaml").write_text(f"benchmark_version: 0.1.0\nbuild: {build}\nsources: {{}}\n")
    assert main(["build", "--params", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "r")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
