"""Adapters on small generated folders in the exact layouts of real sets (HERIDAL, SARD,
VisDrone-DET, a thermal VOC set like HIT-UAV): ignore regions, coordinate base, official
split lists, per-image meta, and the bad-input refusals of these options."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from aegisbench.builders.adapters import SourceSpec, load_source
from aegisbench.builders.source_table import read_source_table, write_source_table
from aegisbench.builders.splits import assign_split
from aegisbench.errors import BadInput
from test_adapters import put, text  # shared folder writers
from aegisbench.hashing import rng_for

HITUAV_MAP = {"Person": "person", "Car": None, "Bicycle": None, "OtherVehicle": None,
              "DontCare": "ignore"}
HITUAV_META = r"^(?P<daylight>[01])_(?P<altitude>\d+)_(?P<angle>\d+)_"
VISDRONE_MAP = {"pedestrian": "person", "people": "person", **{n: None for n in (
    "bicycle", "car", "van", "truck", "tricycle", "awning-tricycle", "bus", "motor", "others")}}


def scene(key: str, h: int = 96, w: int = 128, gray: bool = False) -> np.ndarray:
    rng = rng_for("test_adapters_layouts", key)
    low = rng.integers(0, 256, (h // 8, w // 8, 1 if gray else 3)).astype(np.float32)
    img = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC).reshape(h, w, -1)
    return np.repeat(np.clip(img, 0, 255).astype(np.uint8), 3 if gray else 1, axis=2)


def voc_xml(filename: str, w: int, h: int, objects) -> str:
    """``objects``: (name, xmin, ymin, xmax, ymax[, difficult])."""
    objs = "".join(
        f"<object><name>{o[0]}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>{o[5] if len(o) > 5 else 0}</difficult><bndbox><xmin>{o[1]}</xmin>"
        f"<ymin>{o[2]}</ymin><xmax>{o[3]}</xmax><ymax>{o[4]}</ymax></bndbox></object>"
        for o in objects)
    return (f"<annotation><folder>x</folder><filename>{filename}</filename><size><width>{w}"
            f"</width><height>{h}</height><depth>3</depth></size>{objs}</annotation>")


def spec(name, fmt, path, class_map, **kw) -> SourceSpec:
    return SourceSpec(name, fmt, path, class_map, "person", **kw)


def raises(s: SourceSpec, *parts: str) -> str:
    with pytest.raises(BadInput) as info:
        load_source(s)
    msg = str(info.value)
    for p in parts:
        assert p in msg, msg
    return msg


# ---------------------------------------------------------------- layouts
@pytest.fixture()
def hituav(tmp_path) -> Path:
    """HIT-UAV: JPEGImages/, Annotations/ (0-based, DontCare), ImageSets/Main lists."""
    root = tmp_path / "hituav"
    frames = {"0_60_30_0_01609": ("train", [("Person", 0, 10, 12, 30), ("Car", 40, 40, 80, 70),
                                            ("DontCare", 100, 0, 128, 20)]),
              "1_100_30_0_03467": ("train", [("Person", 20, 20, 30, 40, 1)]),
              "0_120_60_0_05583": ("val", [("Person", 5, 5, 25, 35)]),
              "1_80_90_0_08202": ("test", [("Person", 50, 50, 128, 96), ("Bicycle", 1, 1, 9, 9)]),
              "0_70_40_0_09999": (None, [("Person", 5, 5, 25, 35)])}  # in no list
    for stem, (_, objs) in frames.items():
        put(root / "JPEGImages" / f"{stem}.jpg", scene(stem, gray=True))
        text(root / "Annotations" / f"{stem}.xml", voc_xml(f"{stem}.jpg", 128, 96, objs))
    for split in ("train", "val", "test"):
        text(root / "ImageSets" / "Main" / f"{split}.txt",
             "".join(f"{s}\n" for s, (sp, _) in frames.items() if sp == split))
    return root


def test_thermal_voc_lists_auto_base_ignore_and_meta(hituav, tmp_path):
    s = spec("hituav", "voc", hituav, HITUAV_MAP, split_mode="lists", meta_pattern=HITUAV_META)
    load = load_source(s)
    recs = {r.image_id: r for r in load.records}
    assert {k: r.split for k, r in recs.items()} == {
        "0_60_30_0_01609": "train", "1_100_30_0_03467": "train", "0_120_60_0_05583": "val",
        "1_80_90_0_08202": "test"}
    rep = load.report
    assert rep.unlisted == 1 and rep.coordinate_base == 0  # xmin 0 -> the set is 0-based
    a = recs["0_60_30_0_01609"]
    assert a.boxes.tolist() == [[0, 10, 12, 30]]  # 0-based: taken as edges, no shift
    assert a.ignore.tolist() == [[100, 0, 128, 20]]  # DontCare -> ignore region
    assert recs["1_100_30_0_03467"].ignore.tolist() == [[20, 20, 30, 40]]  # difficult
    assert len(recs["1_100_30_0_03467"].boxes) == 0
    assert a.meta == (("altitude", "60"), ("angle", "30"), ("daylight", "0"))
    assert recs["1_80_90_0_08202"].meta == (("altitude", "80"), ("angle", "90"), ("daylight", "1"))
    assert rep.ignored_regions == 2 and rep.dropped_annotations == {"Bicycle": 1, "Car": 1}
    assert rep.meta_columns == ("altitude", "angle", "daylight")
    d = rep.to_dict()
    assert d["coordinate_base"] == 0 and d["unlisted"] == 1
    # ignore and meta survive the real Parquet source table
    write_source_table(load.records, tmp_path / "hituav.parquet")
    back = {r.image_id: r for r in read_source_table(tmp_path / "hituav.parquet")}
    assert back["0_60_30_0_01609"].ignore.tolist() == [[100, 0, 128, 20]]
    assert back["1_80_90_0_08202"].meta == recs["1_80_90_0_08202"].meta


def test_thermal_voc_forced_one_based_names_file_object_and_flag(hituav):
    msg = raises(spec("hituav", "voc", hituav, HITUAV_MAP, split_mode="lists", coordinate_base=1),
                 "0_60_30_0_01609.xml", "object 0 (Person)", "xmin 0", "--coordinate-base 0")
    assert "\n" not in msg
    forced0 = load_source(spec("hituav", "voc", hituav, HITUAV_MAP, split_mode="lists",
                               coordinate_base="0"))
    assert forced0.report.coordinate_base == 0


def test_heridal_layout_auto_is_one_based_and_difficult_is_ignore(tmp_path):
    """HERIDAL: trainImages/ and testImages/ with VOC xml beside the JPGs, 1-based."""
    root = tmp_path / "HERIDAL"
    put(root / "trainImages" / "train_BRS_0001.JPG", scene("h1"))
    text(root / "trainImages" / "train_BRS_0001.xml", voc_xml("train_BRS_0001.JPG", 128, 96, [
        ("human", 11, 21, 40, 60), ("human", 60, 1, 128, 96, 1), ("human", 5, 70, 5, 80)]))
    put(root / "testImages" / "test_BRS_0002.JPG", scene("h2"))
    text(root / "testImages" / "test_BRS_0002.xml",
         voc_xml("test_BRS_0002.JPG", 128, 96, [("human", 1, 1, 128, 96)]))
    load = load_source(spec("heridal", "voc", root, {"human": "person"}, split_mode="folders"))
    recs = {r.image_id: r for r in load.records}
    assert load.report.coordinate_base == 1  # no 0: VOC's own 1-based convention
    tr = recs["train_BRS_0001"]
    assert tr.split == "train" and recs["test_BRS_0002"].split == "test"
    assert tr.boxes.tolist() == [[10, 20, 40, 60], [4, 69, 5, 80]]  # xmin == xmax: 1 px wide
    assert tr.ignore.tolist() == [[59, 0, 128, 96]]
    assert recs["test_BRS_0002"].boxes.tolist() == [[0, 0, 128, 96]]
    assert load.report.ignored_regions == 1


def test_sard_yolo_class_mapped_to_ignore(tmp_path):
    root = tmp_path / "SARD"
    names = ["Standing", "Walking", "Running", "Sitting", "Lying", "Not Defined"]
    text(root / "data.yaml", f"nc: 6\nnames: {json.dumps(names)}\n")
    put(root / "images" / "test" / "img_0001.jpg", scene("s1"))
    text(root / "labels" / "test" / "img_0001.txt", "0 0.5 0.5 0.25 0.25\n5 0.25 0.25 0.125 0.25\n")
    put(root / "images" / "train" / "img_0002.jpg", scene("s2"))
    # the ignore region overshoots the right edge by 0.25 px: clipped like a box
    text(root / "labels" / "train" / "img_0002.txt", "5 0.9375 0.5 0.12890625 0.25\n")
    cmap = {n: "person" for n in names[:5]} | {"Not Defined": "ignore"}
    recs = {r.image_id: r for r in load_source(spec("sard", "yolo", root, cmap,
                                                    split_mode="folders")).records}
    assert recs["img_0001"].boxes.tolist() == [[48, 36, 80, 60]]
    assert recs["img_0001"].ignore.tolist() == [[24, 12, 40, 36]]
    assert recs["img_0002"].ignore.tolist() == [[111.75, 36, 128, 60]]
    text(root / "labels" / "train" / "img_0002.txt", "5 0.9375 0.5 0.25 0.25\n")
    raises(spec("sard", "yolo", root, cmap, split_mode="folders"), "img_0002.txt",
           "line 1 (ignore region)", "outside the 128x96")
    with pytest.raises(BadInput, match="coordinate_base 1 is for VOC only"):
        SourceSpec.from_options("sard", "yolo", {"path": str(root), "class_map": cmap,
                                                 "target_label": "person", "coordinate_base": 1})


@pytest.fixture()
def visdrone_det(tmp_path) -> Path:
    root = tmp_path / "VisDrone2019-DET-train"
    rows = {"0000002_00005_d_0000014": "10,20,30,40,1,1,0,0\n0,0,30,20,0,0,0,0\n"
                                       "60,50,20,20,0,4,0,0\n70,10,10,10,0,2,0,0\n",
            "0000002_00005_d_0000015": "12,20,30,40,1,1,0,0\n",
            "0000002_00005_d_0000016": "14,20,30,40,1,2,0,0\n"}
    for seq in ("0000010_00100", "0000011_00200", "0000012_00300", "0000013_00400"):
        for f in (1, 2):
            rows[f"{seq}_d_{f:07d}"] = "5,5,10,10,1,1,0,0\n"
    for stem, content in rows.items():
        put(root / "images" / f"{stem}.jpg", scene(stem))
        text(root / "annotations" / f"{stem}.txt", content)
    return root


def test_visdrone_det_grouped_by_sequence_with_ignored_regions(visdrone_det):
    s = spec("visdrone", "visdrone", visdrone_det, VISDRONE_MAP, split_mode="hash",
             group_pattern=r"^(\d+_\d+)_d_(\d+)$", phash_max_distance=None)
    load = load_source(s)
    recs = {r.image_id: r for r in load.records}
    assert len(recs) == 11
    for r in recs.values():
        seq = r.image_id.rsplit("_d_", 1)[0]
        assert r.group_id == seq and r.frame_index == int(r.image_id[-7:])
        assert r.split == assign_split(seq, (0.7, 0.15, 0.15), "visdrone")
    a = recs["0000002_00005_d_0000014"]
    # category 0 always, score-0 "people" (kept class) -> ignore; score-0 car -> dropped
    assert a.boxes.tolist() == [[10, 20, 40, 60]]
    assert a.ignore.tolist() == [[0, 0, 30, 20], [70, 10, 80, 20]]
    assert load.report.ignored_regions == 2 and load.report.dropped_annotations == {"car": 1}
    assert load.report.coordinate_base == 0


def test_coco_image_fields_become_meta(tmp_path):
    root = tmp_path / "coco"
    put(root / "images" / "day_001.jpg", scene("c1"))
    put(root / "images" / "night_002.jpg", scene("c2"))
    data = {"images": [
        {"id": 1, "file_name": "day_001.jpg", "width": 128, "height": 96, "license": 1,
         "date_captured": "2020", "altitude": 60, "sensor": "rgb", "tags": ["a"], "ok": True},
        {"id": 2, "file_name": "night_002.jpg", "width": 128, "height": 96, "altitude": 80.5}],
        "annotations": [{"id": 1, "image_id": 2, "category_id": 1, "bbox": [1, 2, 10, 10],
                         "iscrowd": 1}],
        "categories": [{"id": 1, "name": "person"}]}
    text(root / "annotations" / "instances_test.json", json.dumps(data))
    s = spec("c", "coco", root, {"person": "person"}, split_mode="folders",
             meta_pattern=r"^(?P<time>day|night)_")
    recs = {r.image_id: r for r in load_source(s).records}
    assert recs["day_001"].meta == (("altitude", "60"), ("ok", "True"), ("sensor", "rgb"),
                                    ("time", "day"))
    assert recs["night_002"].meta == (("altitude", "80.5"), ("time", "night"))
    assert recs["night_002"].ignore.tolist() == [[1, 2, 11, 12]]
    clash = spec("c", "coco", root, {"person": "person"}, split_mode="folders",
                 meta_pattern=r"^(?P<sensor>day|night)_")
    raises(clash, "instances_test.json", "meta_pattern group 'sensor'")


# ---------------------------------------------------------------- bad input
def test_split_list_naming_a_missing_image(hituav):
    lst = hituav / "ImageSets" / "Main" / "val.txt"
    lst.write_text("0_120_60_0_05583\n\n1_1_1_0_00000\n")
    raises(spec("h", "voc", hituav, HITUAV_MAP, split_mode="lists"),
           f"{lst}: line 3", "'1_1_1_0_00000' names no image")
    lst.write_text("0_60_30_0_01609\n")  # also in train.txt
    raises(spec("h", "voc", hituav, HITUAV_MAP, split_mode="lists"), f"{lst}: line 1",
           "also listed for train")


def test_split_lists_option_and_missing_lists(hituav):
    text(hituav / "splits" / "tr.txt", "JPEGImages/0_60_30_0_01609.jpg\n1_100_30_0_03467\n")
    text(hituav / "splits" / "te.txt", "1_80_90_0_08202.jpg\n")
    s = SourceSpec.from_options("h", "voc", {
        "path": str(hituav), "class_map": HITUAV_MAP, "target_label": "person",
        "split_mode": "lists", "split_lists": "train=splits/tr.txt,test=splits/te.txt"})
    load = load_source(s)
    assert load.report.split_counts == {"train": 2, "val": 0, "test": 1}
    assert load.report.unlisted == 2
    missing = spec("h", "voc", hituav, HITUAV_MAP, split_mode="lists",
                   split_lists={"train": "splits/nope.txt"})
    raises(missing, "nope.txt", "split_lists train=splits/nope.txt")
    for f in (hituav / "ImageSets" / "Main").iterdir():
        f.unlink()
    raises(spec("h", "voc", hituav, HITUAV_MAP, split_mode="lists"), "ImageSets/Main",
           "split_lists")
    raises(spec("h", "voc", hituav, HITUAV_MAP, split_mode="folders"), "JPEGImages",
           "train/val/test folder")


def test_folders_mode_on_list_layout_suggests_lists(hituav):
    raises(spec("h", "voc", hituav, HITUAV_MAP, split_mode="folders"), "split_mode 'lists'")


def test_group_pattern_that_matches_nothing(visdrone_det):
    msg = raises(spec("v", "visdrone", visdrone_det, VISDRONE_MAP, group_pattern=r"^(uav\d+)_"),
                 "group_pattern", r"'^(uav\\d+)_'", "matches 0 of 11 image ids", ".jpg")
    assert "\n" not in msg


def test_meta_pattern_not_matching_an_image(hituav):
    raises(spec("h", "voc", hituav, HITUAV_MAP, split_mode="lists",
                meta_pattern=r"^(?P<daylight>0)_"), "1_100_30_0_03467.jpg",
           "meta_pattern", "does not match image id '1_100_30_0_03467'")


def test_class_map_leaving_a_class_unmapped(hituav):
    cmap = {k: v for k, v in HITUAV_MAP.items() if k != "DontCare"}
    raises(spec("h", "voc", hituav, cmap, split_mode="lists"), "0_60_30_0_01609.xml",
           "unknown class 'DontCare'", "'Bicycle', 'Car', 'OtherVehicle', 'Person'")


def test_coco_missing_key_lists_keys_found(tmp_path):
    root = tmp_path / "coco"
    put(root / "images" / "a.jpg", scene("a"))
    data = {"images": [{"id": 1, "file_name": "a.jpg", "width": 128, "height": 96}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "box": [1, 1, 5, 5]}],
            "categories": [{"id": 1, "name": "person"}]}
    jf = text(root / "instances_test.json", json.dumps(data))
    s = spec("c", "coco", root, {"person": "person"}, split_mode="folders")
    raises(s, "instances_test.json", "annotation 0: missing 'bbox'",
           "found keys: box, category_id, id, image_id")
    jf.write_text(json.dumps({"images": [], "anns": []}))
    raises(s, "instances_test.json", "no 'annotations'", "found keys: anns, images")
    jf.write_text(json.dumps({"info": {}}))
    raises(s, str(root), "no COCO instances JSON", "instances_test.json (info)")


@pytest.mark.parametrize("opts, match", [
    ({"split_mode": "random"}, "split_mode must be one of ('hash', 'folders', 'lists')"),
    ({"meta_pattern": r"^(day|night)_"}, "meta_pattern '^(day|night)_' has no named groups"),
    ({"meta_pattern": "(?P<x"}, "meta_pattern '(?P<x' is not a valid regex"),
    ({"group_pattern": r"seq_\d+"}, "group_pattern"),
    ({"coordinate_base": 2}, "coordinate_base must be 'auto', 0 or 1"),
    ({"coordinate_base": True}, "coordinate_base must be 'auto', 0 or 1"),
    ({"split_lists": {"train": "a.txt"}}, "split_lists is for split_mode 'lists'"),
    ({"split_mode": "lists", "split_lists": {"dev": "a.txt"}}, "split_lists must map"),
    ({"class_map": {"Person": "car"}}, "'none' or 'ignore'"),
    ({"target_label": "ignore"}, "target_label"),
])
def test_bad_options_are_one_line_naming_the_option(tmp_path, opts, match):
    base = {"path": str(tmp_path), "class_map": {"Person": "person", "Car": "none"},
            "target_label": "person"}
    with pytest.raises(BadInput) as info:
        SourceSpec.from_options("h", "voc", base | opts, where="--source-dir x")
    assert match in str(info.value) and "--source-dir x" in str(info.value)
    assert "\n" not in str(info.value)


def test_class_map_values_none_and_ignore_strings(tmp_path):
    s = SourceSpec.from_options("h", "voc", {
        "path": str(tmp_path), "target_label": "person", "fractions": "0.8,0.1,0.1",
        "class_map": {"Person": "person", "Car": "none", "DontCare": "ignore", "Bike": None}})
    assert s.class_map == {"Person": "person", "Car": None, "DontCare": "ignore", "Bike": None}
    assert s.fractions == (0.8, 0.1, 0.1) and s.coordinate_base == "auto"
