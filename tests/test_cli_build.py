"""`aegisbench build --source-dir` on real-format folders, and its bad-input behaviour."""

from __future__ import annotations

import json
import shutil

import cv2
import datasets
import pytest
import yaml

from aegisbench.dataset.manifest import load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.cli import main
from test_adapters import heridal, sard, scene, put, text, voc_xml  # noqa: F401  (fixtures)

SARD_MAP = "0=person,1=person,2=person,3=person,4=person,5=person"


def _build(tmp_path, *extra):
    return main(["build", "--params", str(tmp_path / "no-params.yaml"), "--out",
                 str(tmp_path / "repo"), *extra])


def _nothing_written(tmp_path) -> bool:
    data = tmp_path / "data"
    return not (tmp_path / "repo").exists() and not (data.exists() and any(p.is_file() for p in data.rglob("*")))


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


def test_voc_folder_without_val_is_refused_then_builds_with_a_val_folder(heridal, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    flags = ["--source-dir", str(heridal), "--source-format", "voc", "--source", "heridal",
             "--class-map", "human=person,tree=none", "--split-mode", "folders", "--coordinate-base", "1"]
    capsys.readouterr()
    assert _build(tmp_path, *flags) == 2  # trainImages + testImages only: no val to freeze a threshold on
    err = _one_line(capsys)
    assert "source heridal: no val images (train 2, val 0, test 1)" in err
    assert _nothing_written(tmp_path)
    assert main(["sources", "--params", str(tmp_path / "no-params.yaml"), *flags]) == 2
    assert "source heridal: no val images" in _one_line(capsys) and _nothing_written(tmp_path)

    put(heridal / "valImages" / "val_0001.JPG", scene("h4"))
    text(heridal / "valImages" / "val_0001.xml", voc_xml("val_0001.JPG", 160, 120, [("human", 5, 5, 20, 30)]))
    rc = _build(tmp_path, *flags)
    assert rc == 0, capsys.readouterr().err
    assert verify_repo(tmp_path / "repo").ok
    ds = datasets.load_dataset(str(tmp_path / "repo"), "clean")
    assert sorted(ds) == ["heridal", "heridal_val"]
    assert ds["heridal"][0]["objects"]["bbox"] == [[0.0, 0.0, 160.0, 120.0]]  # --coordinate-base 1
    assert ds["heridal_val"][0]["objects"]["bbox"] == [[4.0, 4.0, 20.0, 30.0]]
    report = json.loads((tmp_path / "data/sources/heridal.report.json").read_text())
    assert report["dropped_annotations"] == {"tree": 1} and report["coordinate_base"] == 1


def test_build_from_yolo_folder_maps_all_pose_classes(sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = _build(tmp_path, "--source-dir", str(sard), "--source-format", "yolo", "--source", "sard",
                "--class-map", SARD_MAP, "--split-mode", "folders")
    assert rc == 0, capsys.readouterr().err
    ds = datasets.load_dataset(str(tmp_path / "repo"), "clean")
    assert set(ds) == {"sard", "sard_val"}
    names = ds["sard"].features["objects"]["label"].feature  # a ClassLabel declared by the card
    labels = [names.int2str(lab) for row in ds["sard"] for lab in row["objects"]["label"]]
    assert labels == ["person"]


@pytest.mark.parametrize("case", ["missing", "corrupt", "unknown_class", "bad_box"])
def test_build_bad_input_names_file_and_writes_nothing(case, sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = sard
    if case == "missing":
        src, needle = tmp_path / "no-such-folder", "no-such-folder"
    elif case == "corrupt":
        text(sard / "images" / "test" / "bad.jpg", "not an image")
        needle = "bad.jpg"
    elif case == "unknown_class":
        text(sard / "labels" / "test" / "s4.txt", "9 0.5 0.5 0.1 0.1\n")
        needle = "s4.txt"
    else:
        text(sard / "labels" / "test" / "s4.txt", "0 0.99 0.5 0.2 0.2\n")
        needle = "s4.txt"
    capsys.readouterr()
    rc = _build(tmp_path, "--source-dir", str(src), "--source-format", "yolo", "--source", "sard",
                "--class-map", SARD_MAP)
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "repo").exists()
    leftovers = [p for p in (tmp_path / "data").rglob("*")] if (tmp_path / "data").exists() else []
    assert not [p for p in leftovers if p.is_file()]


def test_bad_class_map_and_missing_params(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    rc = _build(tmp_path, "--source-dir", str(tmp_path / "src"), "--source-format", "voc", "--source", "x",
                "--class-map", "person")
    assert rc == 2 and "--class-map" in capsys.readouterr().err
    assert main(["sources", "--params", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    (tmp_path / "p.yaml").write_text("benchmark_version: 1.0\nsources: {}\n")
    assert main(["sources", "--params", str(tmp_path / "p.yaml")]) == 2
    assert "semantic" in capsys.readouterr().err
    (tmp_path / "p.yaml").write_text("benchmark_version: 1.0.0\nsources: {a: {track: sar, kind: tiff}}\n")
    assert main(["sources", "--params", str(tmp_path / "p.yaml")]) == 2
    assert "sources.a" in capsys.readouterr().err


SARD_FLAGS = ["--source-format", "yolo", "--source", "sard", "--class-map", SARD_MAP]


@pytest.mark.parametrize("extra, needles", [
    (["--split-mode", "random"], ["--split-mode:", "'random'"]),
    (["--fractions", "0.5,0.3,0.3"], ["--fractions:", "sum to 1"]),
    (["--fractions", "a,b,c"], ["--fractions:"]),
    (["--fractions", "0.5,0.5"], ["--fractions:", "2 values"]),
    (["--modality", "sonar"], ["--modality:", "'sonar'"]),
    (["--class-map", "0=person,1"], ["--class-map:", "'1'"]),
    (["--class-map", "0=car"], ["--class-map:", "'car'"]),
    (["--class-map", "0=person,0=none"], ["--class-map:", "twice"]),
    (["--coordinate-base", "2"], ["--coordinate-base:"]),
    (["--coordinate-base", "1"], ["--coordinate-base:", "VOC only"]),  # a YOLO folder
    (["--group-pattern", "seq"], ["--group-pattern:", "capturing group"]),
    (["--group-pattern", "("], ["--group-pattern:", "not a valid regex"]),
    (["--meta-pattern", "(day|night)"], ["--meta-pattern:", "no named groups"]),
    (["--split-lists", "train=a.txt"], ["--split-lists:", "'lists'"]),
    (["--split-mode", "lists", "--split-lists", "train"], ["--split-lists:", "KEY=VALUE"]),
    (["--phash-max-distance", "x"], ["--phash-max-distance:"]),
    (["--phash-max-distance", "99"], ["--phash-max-distance:"]),
    (["--tracks", "smoke"], ["--tracks:", "'sar'"]),
    (["--tracks", "sar,boats"], ["--tracks:", "'boats'"]),
    (["--track", "firespread"], ["--track:"]),
    (["--source-format", "tiff"], ["--source-format:", "'tiff'"]),
    (["--source", "Bad-Name"], ["--source:", "snake_case"]),
    (["--group-pattern", r"^(zzz)_"], ["group_pattern", "does not match image id"]),
])
def test_bad_source_options_are_one_line_and_write_nothing(extra, needles, sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    flags = SARD_FLAGS.copy()
    for i in range(0, len(extra), 2):  # a flag given in `extra` replaces the default one
        if extra[i] in flags:
            del flags[flags.index(extra[i]):flags.index(extra[i]) + 2]
    capsys.readouterr()
    for cmd in (["build", "--out", str(tmp_path / "repo")], ["sources"]):
        rc = main([*cmd, "--params", str(tmp_path / "no-params.yaml"), "--source-dir", str(sard), *flags, *extra])
        err = _one_line(capsys)
        assert rc == 2 and all(n in err for n in needles), err
        assert _nothing_written(tmp_path)


def test_split_list_naming_a_missing_image_is_one_line(sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    text(sard / "lists" / "train.txt", "s1\n")
    text(sard / "lists" / "val.txt", "s2\n")
    text(sard / "lists" / "test.txt", "s3\ns4\nnot_there\n")
    capsys.readouterr()
    rc = _build(tmp_path, "--source-dir", str(sard), *SARD_FLAGS, "--split-mode", "lists",
                "--split-lists", "train=lists/train.txt,val=lists/val.txt,test=lists/test.txt")
    err = _one_line(capsys)
    assert rc == 2 and "test.txt" in err and "not_there" in err
    assert _nothing_written(tmp_path)
    text(sard / "lists" / "test.txt", "s4\n")  # s3 is in no list: left out
    rc = _build(tmp_path, "--source-dir", str(sard), *SARD_FLAGS, "--split-mode", "lists",
                "--split-lists", "train=lists/train.txt,val=lists/val.txt,test=lists/test.txt")
    assert rc == 0, capsys.readouterr().err
    ds = datasets.load_dataset(str(tmp_path / "repo"), "clean")
    assert [r["image_id"] for r in ds["sard"]] == ["s4"] and [r["image_id"] for r in ds["sard_val"]] == ["s2"]
    assert json.loads((tmp_path / "data/sources/sard.report.json").read_text())["unlisted"] == 1


FIRESPREAD = {"grid": [16, 16], "realizations": 8, "s_levels": [0], "initial_conditions": 2,
              "test_initial_conditions": [1], "realizations_per_shard": 8,
              "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}


def _params_file(tmp_path) -> str:
    tiny = {"synthetic_sar": {"n_train": 0, "n_val": 1, "n_test": 1, "images_per_flight": 1,
                              "small_size": [160, 160], "large_size": [320, 240]},
            "synthetic_smoke": {"n_train": 0, "n_val": 1, "n_test": 1, "frames_per_sequence": 2}}
    raw = {"benchmark_version": "0.1.0", "paths": {"sources": "data/sources", "dataset": "repo"},
           "firespread": FIRESPREAD,
           "sources": {n: {"track": n.split("_")[1], "kind": n, "options": o} for n, o in tiny.items()}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    return str(tmp_path / "params.yaml")


def test_tracks_choose_what_is_built(sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    params = _params_file(tmp_path)
    assert main(["build", "--params", params, "--tracks", "sar"]) == 0, capsys.readouterr().err
    manifest = load_manifest(tmp_path / "repo")
    assert list(manifest["sources"]) == ["synthetic_sar"] and list(manifest["configs"]) == ["clean"]
    assert sorted(p.name for p in (tmp_path / "data/sources").glob("*.parquet")) == ["synthetic_sar.parquet"]
    assert main(["build", "--params", params, "--tracks", "firespread", "--out", "fs"]) == 0
    assert list(load_manifest(tmp_path / "fs")["sources"]) == ["firespread"]
    # --source-dir: its source's track only, unless --tracks names fire spread too
    assert main(["build", "--params", params, "--source-dir", str(sard), *SARD_FLAGS, "--split-mode", "folders",
                 "--tracks", "sar,firespread", "--out", "both"]) == 0, capsys.readouterr().err
    both = load_manifest(tmp_path / "both")
    assert sorted(both["sources"]) == ["firespread", "sard"] and "firespread_s0" in both["configs"]
    capsys.readouterr()
    assert main(["sources", "--params", params, "--tracks", "smoke"]) == 0
    assert sorted(p.name for p in (tmp_path / "data/sources").glob("*.parquet")) == [
        "sard.parquet", "synthetic_sar.parquet", "synthetic_smoke.parquet"]


def test_preview_shows_the_sources_of_a_source_dir_build(sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    params = _params_file(tmp_path)  # lists synthetic_sar/smoke, whose tables are never made here
    assert main(["build", "--params", params, "--source-dir", str(sard), *SARD_FLAGS, "--split-mode", "folders"]) == 0
    assert main(["preview", "--params", params, "--out", "prev"]) == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "prev").iterdir()) == ["sard.png"]
    assert cv2.imread(str(tmp_path / "prev" / "sard.png")) is not None
    (tmp_path / "data/sources/sard.parquet").unlink()
    capsys.readouterr()
    assert main(["preview", "--params", params, "--out", "prev2"]) == 2
    err = _one_line(capsys)
    assert "sard.parquet: source table not found for sard" in err and "tables there: none" in err
    shutil.rmtree(tmp_path / "repo")  # no repo built: the sources of params.yaml
    assert main(["preview", "--params", params, "--out", "prev2"]) == 2
    err = _one_line(capsys)
    assert "synthetic_sar.parquet: source table not found for synthetic_sar, synthetic_smoke" in err
    assert main(["preview", "--params", params, "--dataset", "nowhere"]) == 2
    assert "nowhere: dataset repo folder not found" in _one_line(capsys)
    assert not (tmp_path / "prev2").exists()
