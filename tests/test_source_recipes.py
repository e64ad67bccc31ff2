"""The README's `build --source-dir` recipes, run as written there, each on a small generated
folder in that dataset's layout, then `verify`: HERIDAL (VOC), SARD (YOLO), VisDrone-DET
(grouped by video) and a thermal VOC set in HIT-UAV's layout (split lists, 0-based boxes,
DontCare ignore regions, day/night in the file names)."""

from __future__ import annotations

import json
import re
import shlex
from collections import defaultdict
from pathlib import Path

import cv2
import datasets
import numpy as np
import pytest
import yaml

from aegisbench.dataset.manifest import load_manifest
from aegisbench.builders.splits import assign_split
from aegisbench.cli import main
from aegisbench.hashing import rng_for

ROOT = Path(__file__).resolve().parents[1]
CONDITION = {"rgb": "low_light_s1", "thermal": "motion_blur_s1"}
# a fire-spread section in the params: a --source-dir build must not build it
FIRESPREAD = {"grid": [16, 16], "realizations": 8, "s_levels": [0], "initial_conditions": 2,
              "test_initial_conditions": [1], "realizations_per_shard": 8,
              "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}


def readme_recipes() -> dict[str, list[str]]:
    """``--name`` -> argv (after ``aegisbench``) of each command in the README's Recipes block."""
    text = (ROOT / "README.md").read_text()
    block = text.split("#### Recipes", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    out = {}
    for cmd in block.replace("\\\n", " ").splitlines():
        if cmd.strip().startswith("aegisbench "):
            argv = shlex.split(cmd)[1:]
            out[argv[argv.index("--source") + 1]] = argv
    return out


def frame(key: str, h: int = 64, w: int = 64) -> np.ndarray:
    """A smooth random scene (BGR) unique to ``key``, its pHash far from every other key's."""
    low = rng_for("test_source_recipes", key).integers(0, 256, (8, 8, 3)).astype(np.uint8)
    return cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)


def put(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), img)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def voc_xml(filename: str, objects, w: int = 64, h: int = 64) -> str:
    objs = "".join(f"<object><name>{n}</name><difficult>0</difficult><bndbox><xmin>{a}</xmin>"
                   f"<ymin>{b}</ymin><xmax>{c}</xmax><ymax>{d}</ymax></bndbox></object>"
                   for n, a, b, c, d in objects)
    return (f"<annotation><filename>{filename}</filename><size><width>{w}</width><height>{h}</height>"
            f"<depth>3</depth></size>{objs}</annotation>")


def covering(ids, key: str) -> list[str]:
    """The first ids (at least 5) whose hash splits (default fractions, salt ``key``) cover
    train, val and test: a small folder that the default hash split can build."""
    chosen, seen = [], set()
    for i in ids:
        chosen.append(i)
        seen.add(assign_split(i, (0.7, 0.15, 0.15), key))
        if len(seen) == 3 and len(chosen) >= 5:
            return chosen
    raise AssertionError("no covering set of ids")


# ---------------------------------------------------------------- layouts
def heridal(root: Path) -> dict:
    """HERIDAL: trainImages/ and testImages/ with VOC XML in labels/ (1-based pixels)."""
    names = covering((f"train_{i:04d}" for i in range(1, 200)), "heridal")
    for name in names + ["test_0001"]:
        folder = root / ("testImages" if name.startswith("test") else "trainImages")
        put(folder / f"{name}.JPG", frame(name))
        write(folder / "labels" / f"{name}.xml", voc_xml(f"{name}.JPG", [("person", 11, 21, 40, 60)]))
    return {"images": len(names) + 1}


def sard(root: Path) -> dict:
    """SARD: data.yaml, images/{train,val,test}, labels/ in YOLO txt, six pose classes."""
    names = ["Standing", "Walking", "Running", "Sitting", "Lying", "Not Defined"]
    write(root / "data.yaml", f"train: images/train\nval: images/val\ntest: images/test\nnc: 6\n"
                              f"names: {json.dumps(names)}\n")
    counts = {"train": 3, "val": 2, "test": 2}
    for split, n in counts.items():
        for k in range(n):
            stem = f"{split}_{k}"
            put(root / "images" / split / f"{stem}.jpg", frame(stem))
            write(root / "labels" / split / f"{stem}.txt", f"{(k + 3) % 6} 0.375 0.5 0.25 0.5\n")
    return {"splits": counts}


def visdrone(root: Path) -> dict:
    """VisDrone-DET: VisDrone2019-DET-{train,val}/images + annotations (8 fields a row)."""
    videos = covering((f"{v:07d}" for v in range(1, 300)), "visdrone")
    for i, video in enumerate(videos):
        sub = root / ("VisDrone2019-DET-train" if i % 2 else "VisDrone2019-DET-val")
        for f, start in enumerate((0, 500)):
            stem = f"{video}_{start:05d}_d_{f + 1:07d}"
            put(sub / "images" / f"{stem}.jpg", frame(stem))
            write(sub / "annotations" / f"{stem}.txt",
                  "10,10,10,20,1,1,0,0\n40,40,10,10,1,4,0,0\n" + ("0,40,12,12,0,0,0,0\n" if f == 0 else ""))
    return {"videos": videos}


HITUAV_SPLITS = {"train": ["0_60_30_0_00001", "1_90_60_0_00002", "0_70_90_0_00003"],
                 "val": ["1_60_30_0_00004", "0_80_60_0_00005"],
                 "test": ["1_100_90_0_00006", "0_60_60_0_00007"]}


def hituav(root: Path) -> dict:
    """HIT-UAV: JPEGImages/, Annotations/ (0-based VOC, DontCare), ImageSets/Main lists."""
    for split, stems in HITUAV_SPLITS.items():
        write(root / "ImageSets" / "Main" / f"{split}.txt", "".join(f"{s}\n" for s in stems))
        for s in stems:
            put(root / "JPEGImages" / f"{s}.jpg", frame(s))
            write(root / "Annotations" / f"{s}.xml", voc_xml(f"{s}.jpg", [
                ("Person", 0, 8, 12, 30), ("Car", 30, 30, 50, 44), ("DontCare", 50, 2, 62, 14)]))
    put(root / "JPEGImages" / "0_60_30_0_09999.jpg", frame("unlisted"))  # in no list: left out
    return {"splits": HITUAV_SPLITS}


LAYOUTS = {"heridal": heridal, "sard": sard, "visdrone": visdrone, "hituav": hituav}


def _build(name: str, tmp_path: Path, monkeypatch) -> tuple[Path, dict]:
    argv = readme_recipes()[name]
    src = tmp_path / "folder" / name
    info = LAYOUTS[name](src)
    modality = argv[argv.index("--modality") + 1] if "--modality" in argv else "rgb"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"benchmark_version": "0.1.0", "firespread": FIRESPREAD,
                                      "build": {"rows_per_shard": 8, "conditions": [CONDITION[modality]]}}))
    argv[argv.index("--source-dir") + 1] = str(src)
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--params", str(params), "--out", str(tmp_path / "repo")]) == 0
    assert main(["verify", str(tmp_path / "repo")]) == 0
    manifest = load_manifest(tmp_path / "repo")
    assert list(manifest["sources"]) == [name]  # no fire-spread ensembles: not asked for
    assert sorted(manifest["configs"]) == ["clean", CONDITION[modality]]
    assert manifest["sources"][name]["modality"] == modality
    assert sorted(manifest["configs"]["clean"]["splits"]) == [name, f"{name}_val"]
    assert sorted(manifest["configs"][CONDITION[modality]]["splits"]) == [name]
    return tmp_path / "repo", info


def _rows(repo: Path, name: str) -> dict[str, list[dict]]:
    """The rows as ``datasets`` loads them, class ids turned back into the card's ClassLabel names."""
    ds = datasets.load_dataset(str(repo), "clean")
    names = ds[name].features["objects"]["label"].feature.int2str

    def named(row: dict) -> dict:
        return {**row, "objects": {**row["objects"], "label": [names(i) for i in row["objects"]["label"]]}}
    return {"val": [named(r) for r in ds[f"{name}_val"]], "test": [named(r) for r in ds[name]]}


def _report(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "data" / "sources" / f"{name}.report.json").read_text())


def test_readme_has_the_four_recipes():
    recipes = readme_recipes()
    assert sorted(recipes) == ["heridal", "hituav", "sard", "visdrone"]
    assert all(r[0] == "build" and "--source-dir" in r and "--source-format" in r for r in recipes.values())


def test_heridal_recipe(tmp_path, monkeypatch):
    repo, info = _build("heridal", tmp_path, monkeypatch)
    rows = _rows(repo, "heridal")
    report = _report(tmp_path, "heridal")
    assert sum(report["split_counts"].values()) == info["images"]
    assert report["coordinate_base"] == 1  # no 0 coordinate, none at the frame edge
    assert {tuple(b) for r in rows["test"] for b in r["objects"]["bbox"]} == {(10.0, 20.0, 40.0, 60.0)}


def test_sard_recipe(tmp_path, monkeypatch):
    repo, info = _build("sard", tmp_path, monkeypatch)
    rows = _rows(repo, "sard")
    assert {s: len(rows[s]) for s in rows} == {s: info["splits"][s] for s in ("val", "test")}
    assert _report(tmp_path, "sard")["split_counts"] == info["splits"]
    assert {lab for r in rows["val"] + rows["test"] for lab in r["objects"]["label"]} == {"person"}
    assert {r["image_id"] for r in rows["test"]} == {"test_0", "test_1"}


def test_visdrone_recipe_groups_by_video(tmp_path, monkeypatch):
    repo, info = _build("visdrone", tmp_path, monkeypatch)
    rows = _rows(repo, "visdrone")
    splits_of = defaultdict(set)
    for split, rs in rows.items():
        for r in rs:
            assert r["image_id"].startswith(r["group_id"] + "_")
            splits_of[r["group_id"]].add(split)
    assert all(len(s) == 1 for s in splits_of.values())
    report = _report(tmp_path, "visdrone")
    assert sum(report["split_counts"].values()) == 2 * len(info["videos"])  # both frames of every video
    by_video = {v: assign_split(v, (0.7, 0.15, 0.15), "visdrone") for v in info["videos"]}
    assert {g: s.pop() for g, s in splits_of.items()} == {v: s for v, s in by_video.items() if s != "train"}
    assert report["dropped_annotations"] == {"car": sum(report["split_counts"].values())}
    ignored = [r["ignore"] for rs in rows.values() for r in rs if r["image_id"].endswith("_0000001")]
    assert ignored and all(ig == [[0.0, 40.0, 12.0, 52.0]] for ig in ignored)  # category 0 regions


def test_thermal_voc_recipe_hituav_layout(tmp_path, monkeypatch):
    repo, info = _build("hituav", tmp_path, monkeypatch)
    rows = _rows(repo, "hituav")
    for split in ("val", "test"):
        assert sorted(r["image_id"] for r in rows[split]) == sorted(info["splits"][split])
    report = _report(tmp_path, "hituav")
    assert report["split_counts"] == {s: len(v) for s, v in info["splits"].items()}
    assert report["unlisted"] == 1 and report["coordinate_base"] == 0
    assert report["dropped_annotations"] == {"Car": 7}
    for r in rows["val"] + rows["test"]:
        t, alt, angle = re.match(r"^(\d)_(\d+)_(\d+)_", r["image_id"]).groups()
        assert {m["name"]: m["value"] for m in r["meta"]} == {"time": t, "altitude": alt, "angle": angle}
        assert r["objects"]["bbox"] == [[0.0, 8.0, 12.0, 30.0]]  # 0-based, kept as written
        assert r["ignore"] == [[50.0, 2.0, 62.0, 14.0]]  # DontCare


def test_visdrone_default_groups_are_videos_for_det_and_vid_names():
    from aegisbench.builders.source_flags import VISDRONE_GROUP_PATTERN
    from aegisbench.builders.splits import group_frames
    ids = ["0000002_00005_d_0000014", "0000002_00500_d_0000015", "0000003_00000_d_0000001",
           "sequences/uav0000086_00000_v/0000002", "sequences/uav0000086_00000_v/0000001",
           "uav0000086_00667_v/0000001", "uav0000117_02622_v/0000001"]
    got = group_frames([(i, i) for i in ids], VISDRONE_GROUP_PATTERN)
    assert {i: g for i, (g, _) in got.items()} == {
        ids[0]: "0000002", ids[1]: "0000002", ids[2]: "0000003", ids[3]: "uav0000086", ids[4]: "uav0000086",
        ids[5]: "uav0000086", ids[6]: "uav0000117"}
    # frames in time order within a video: clip start, then frame number
    assert [got[i][1] for i in ids[3:6]] == [1, 0, 2] and [got[i][1] for i in ids[:2]] == [0, 1]
