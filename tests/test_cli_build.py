"""`aegisbench build --source-dir` on real-format folders, and its bad-input behaviour."""

from __future__ import annotations

import json

import cv2
import datasets
import pytest

from aegisbench.builders.manifest import verify_repo
from aegisbench.cli import main
from test_adapters import heridal, sard, scene, put, text, voc_xml  # noqa: F401  (fixtures)

SARD_MAP = "0=person,1=person,2=person,3=person,4=person,5=person"


def _build(tmp_path, *extra):
    return main(["build", "--params", str(tmp_path / "no-params.yaml"), "--out",
                 str(tmp_path / "repo"), *extra])


def test_build_from_voc_folder(heridal, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = _build(tmp_path, "--source-dir", str(heridal), "--format", "voc", "--name", "heridal",
                "--class-map", "human=person,tree=none", "--split-mode", "folders")
    assert rc == 0, capsys.readouterr().err
    assert verify_repo(tmp_path / "repo").ok
    ds = datasets.load_dataset(str(tmp_path / "repo"), "clean")
    assert list(ds) == ["heridal"]  # no val folder in this fixture: only the test split
    row = ds["heridal"][0]
    assert row["objects"]["bbox"] == [[0.0, 0.0, 160.0, 120.0]]  # VOC 1-based inclusive
    report = json.loads((tmp_path / "data/sources/heridal.report.json").read_text())
    assert report["dropped_annotations"] == {"tree": 1}


def test_build_from_yolo_folder_maps_all_pose_classes(sard, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = _build(tmp_path, "--source-dir", str(sard), "--format", "yolo", "--name", "sard",
                "--class-map", SARD_MAP, "--split-mode", "folders")
    assert rc == 0, capsys.readouterr().err
    ds = datasets.load_dataset(str(tmp_path / "repo"), "clean")
    assert set(ds) == {"sard", "sard_val"}
    labels = [lab for row in ds["sard"] for lab in row["objects"]["label"]]
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
    rc = _build(tmp_path, "--source-dir", str(src), "--format", "yolo", "--name", "sard",
                "--class-map", SARD_MAP)
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "repo").exists()
    leftovers = [p for p in (tmp_path / "data").rglob("*")] if (tmp_path / "data").exists() else []
    assert not [p for p in leftovers if p.is_file()]


def test_bad_class_map_and_missing_params(tmp_path, capsys):
    rc = _build(tmp_path, "--source-dir", str(tmp_path), "--format", "voc", "--name", "x",
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
