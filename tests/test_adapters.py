"""Source adapters on realistic fixture folders built here (VOC/HERIDAL, YOLO/SARD, COCO, VisDrone)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from aegisbench.builders.adapters import SourceSpec, load_source, stream_source
from aegisbench.builders.source_table import read_source_table, write_source_table
from aegisbench.dataset.images import decode_image
from aegisbench.builders.splits import assign_split
from aegisbench.errors import BadInput
from aegisbench.hashing import pixel_sha256, rng_for

# SARD's six pose classes (Sambolek & Ivasic-Kos, SARD dataset description).
SARD_NAMES = ["Standing", "Walking", "Running", "Sitting", "Lying", "Not Defined"]
VISDRONE_IDS = {"1": "person", "2": "person", **{str(i): None for i in range(3, 12)}}


def scene(key: str, h: int = 120, w: int = 160) -> np.ndarray:
    """Smooth textured BGR image, different for every ``key``."""
    rng = rng_for("test_adapters", key)
    low = rng.integers(0, 256, (max(h // 10, 2), max(w // 10, 2), 3)).astype(np.float32)
    img = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)


def put(path: Path, img: np.ndarray, quality: int = 92) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if path.suffix.lower() in (".jpg", ".jpeg") else []
    assert cv2.imwrite(str(path), img, params)
    return path


def text(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    return path


def voc_xml(filename: str, w: int, h: int, objects) -> str:
    objs = "".join(
        f"<object><name>{n}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>0</difficult><bndbox><xmin>{a}</xmin><ymin>{b}</ymin><xmax>{c}</xmax>"
        f"<ymax>{d}</ymax></bndbox></object>" for n, a, b, c, d in objects)
    return (f"<annotation><folder>images</folder><filename>{filename}</filename>"
            f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>"
            f"<segmented>0</segmented>{objs}</annotation>")


def by_id(load) -> dict:
    return {r.image_id: r for r in load.records}


def spec(name, fmt, path, class_map, **kw) -> SourceSpec:
    kw.setdefault("split_mode", "folders")
    return SourceSpec(name, fmt, path, class_map, "person", **kw)


# ---------------------------------------------------------------- fixtures
@pytest.fixture()
def heridal(tmp_path) -> Path:
    root = tmp_path / "heridal"
    put(root / "trainImages" / "train_0001.JPG", scene("h1"))
    text(root / "trainImages" / "labels" / "train_0001.xml", voc_xml(
        "train_0001.JPG", 160, 120,
        [("human", 11, 21, 40, 60), ("human", 100, 50, 100, 55), ("tree", 1, 1, 30, 30)]))
    put(root / "trainImages" / "train_0002.JPG", scene("h2"))  # no xml: negative
    put(root / "testImages" / "test_0001.JPG", scene("h3"))
    text(root / "testImages" / "test_0001.xml", voc_xml("test_0001.JPG", 160, 120,
                                                        [("human", 1, 1, 160, 120)]))
    return root


@pytest.fixture()
def sard(tmp_path) -> Path:
    root = tmp_path / "sard"
    text(root / "data.yaml", "path: .\ntrain: images/train\nval: images/val\ntest: images/test\n"
         f"nc: 6\nnames: {json.dumps(SARD_NAMES)}\n")
    put(root / "images" / "train" / "s1.jpg", scene("s1", 128, 160))
    text(root / "labels" / "train" / "s1.txt", "0 0.5 0.25 0.25 0.125\n3 0.125 0.75 0.125 0.25\n")
    put(root / "images" / "val" / "s2.png", scene("s2", 128, 160))
    text(root / "labels" / "val" / "s2.txt", "")  # empty label file: negative
    put(root / "images" / "test" / "s3.jpg", scene("s3", 128, 160))  # no label file: negative
    put(root / "images" / "test" / "s4.jpg", scene("s4", 128, 160))
    text(root / "labels" / "test" / "s4.txt", "5 0.9375 0.5 0.125 0.25\n")
    return root


@pytest.fixture()
def coco(tmp_path) -> Path:
    root = tmp_path / "coco"
    for n in ("c1", "c2", "c3"):
        put(root / "images" / f"{n}.jpg", scene(n))
    cats = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
    train = {"images": [{"id": 1, "file_name": "c1.jpg", "width": 160, "height": 120},
                        {"id": 2, "file_name": "c2.jpg", "width": 160, "height": 120}],
             "annotations": [
                 {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10.5, 20, 30, 40], "iscrowd": 0},
                 {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 10, 10], "iscrowd": 0},
                 {"id": 3, "image_id": 1, "category_id": 1, "bbox": [50, 50, 20, 20], "iscrowd": 1}],
             "categories": cats}
    test = {"images": [{"id": 1, "file_name": "c3.jpg", "width": 160, "height": 120}],
            "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [100, 60, 60, 60]}],
            "categories": cats}
    text(root / "annotations" / "instances_train.json", json.dumps(train))
    text(root / "annotations" / "instances_test.json", json.dumps(test))
    return root


@pytest.fixture()
def visdrone(tmp_path) -> Path:
    root = tmp_path / "visdrone"
    val = root / "VisDrone2019-DET-val"
    put(val / "images" / "0000001_00000_d_0000001.jpg", scene("v1"))
    text(val / "annotations" / "0000001_00000_d_0000001.txt",
         "10,20,30,40,1,1,0,0\n5,5,10,10,1,2,0,1\n50,50,20,20,0,0,0,0\n0,0,5,5,0,1,0,0\n"
         "60,60,10,10,1,4,0,0,\n")
    test = root / "VisDrone2019-DET-test-dev"
    put(test / "images" / "0000002_00000_d_0000001.jpg", scene("v2"))
    text(test / "annotations" / "0000002_00000_d_0000001.txt", "100,70,50,40,1,1,1,0\n")
    return root


# ---------------------------------------------------------------- happy paths
def test_voc_heridal_layout(heridal):
    load = load_source(spec("heridal", "voc", heridal, {"human": "person", "tree": None}))
    recs = by_id(load)
    assert set(recs) == {"train_0001", "train_0002", "test_0001"}
    r = recs["train_0001"]
    assert r.split == "train" and r.source == "heridal" and (r.width, r.height) == (160, 120)
    # 1-based inclusive VOC pixels -> 0-based continuous edges; xmin == xmax is 1 px wide
    assert r.boxes.dtype == np.float32
    assert r.boxes.tolist() == [[10, 20, 40, 60], [99, 49, 100, 55]]
    assert r.labels == ("person", "person")
    assert recs["test_0001"].split == "test"
    assert recs["test_0001"].boxes.tolist() == [[0, 0, 160, 120]]
    assert len(recs["train_0002"].boxes) == 0
    rep = load.report
    assert rep.dropped_annotations == {"tree": 1}
    assert rep.split_counts == {"train": 2, "val": 0, "test": 1}
    assert rep.box_counts == {"train": 2, "val": 0, "test": 1}
    assert rep.negative_counts == {"train": 1, "val": 0, "test": 0}
    assert rep.excluded == () and rep.ignored_regions == 0
    # JPEG decoded once, stored losslessly; sha256 of the decoded pixels
    orig = cv2.cvtColor(cv2.imread(str(heridal / "trainImages" / "train_0001.JPG")), cv2.COLOR_BGR2RGB)
    assert np.array_equal(decode_image(r.png), orig)
    assert r.sha256 == pixel_sha256(orig)
    assert r.group_id == "train_0001" and r.frame_index == -1


def test_voc_standard_layout_with_imagesets_and_zero_based(tmp_path):
    root = tmp_path / "voc"
    for n, split in (("a", "train"), ("b", "val"), ("c", "test")):
        put(root / "JPEGImages" / f"{n}.jpg", scene(f"voc{n}"))
        text(root / "Annotations" / f"{n}.xml", voc_xml(f"{n}.jpg", 160, 120, [("person", 10, 20, 40, 60)]))
        text(root / "ImageSets" / "Main" / f"{split}.txt", f"{n}\n")
    load = load_source(spec("voc", "voc", root, {"person": "person"}, split_mode="lists",
                            coordinate_base=0))
    recs = by_id(load)
    assert {k: r.split for k, r in recs.items()} == {"a": "train", "b": "val", "c": "test"}
    assert recs["a"].boxes.tolist() == [[10, 20, 40, 60]]


def test_yolo_sard_layout(sard):
    load = load_source(spec("sard", "yolo", sard, {n: "person" for n in SARD_NAMES}))
    recs = by_id(load)
    assert {k: r.split for k, r in recs.items()} == {"s1": "train", "s2": "val", "s3": "test",
                                                     "s4": "test"}
    # 160x128 frame: (0.5, 0.25, 0.25, 0.125) -> cx 80, cy 32, w 40, h 16
    assert recs["s1"].boxes.tolist() == [[60, 24, 100, 40], [10, 80, 30, 112]]
    assert recs["s4"].boxes.tolist() == [[140, 48, 160, 80]]
    assert len(recs["s2"].boxes) == 0 and len(recs["s3"].boxes) == 0
    assert load.report.negative_counts == {"train": 0, "val": 1, "test": 1}
    # test split first (needed for de-duplication), then val, then train
    assert [r.split for r in load.records] == ["test", "test", "val", "train"]


def test_yolo_class_map_by_id_dict_names_and_dropping(sard):
    text(sard / "data.yaml", "names:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(SARD_NAMES)))
    by_num = load_source(spec("sard", "yolo", sard, {str(i): "person" for i in range(6)}))
    assert by_id(by_num)["s4"].boxes.tolist() == [[140, 48, 160, 80]]
    cmap = {n: "person" for n in SARD_NAMES} | {"Not Defined": None}
    dropped = load_source(spec("sard", "yolo", sard, cmap))
    assert len(by_id(dropped)["s4"].boxes) == 0
    assert dropped.report.dropped_annotations == {"Not Defined": 1}


def test_yolo_roboflow_layout_and_subpixel_overshoot_is_clipped(tmp_path):
    root = tmp_path / "rf"
    put(root / "train" / "images" / "x.jpg", scene("rf", 128, 160))
    # x extends 0.2 px past both edges (within the 0.5 px tolerance) -> clipped
    text(root / "train" / "labels" / "x.txt", "0 0.5 0.5 1.0025 0.5\n")
    put(root / "valid" / "images" / "y.jpg", scene("rf2", 128, 160))
    load = load_source(spec("rf", "yolo", root, {"0": "person"}))
    recs = by_id(load)
    assert recs["x"].split == "train" and recs["y"].split == "val"
    assert recs["x"].boxes.tolist() == [[0, 32, 160, 96]]


def test_coco_instances(coco):
    load = load_source(spec("coco_src", "coco", coco, {"person": "person", "car": None}))
    recs = by_id(load)
    assert {k: r.split for k, r in recs.items()} == {"c1": "train", "c2": "train", "c3": "test"}
    assert recs["c1"].boxes.tolist() == [[10.5, 20, 40.5, 60]]  # [x, y, w, h] -> xyxy
    assert recs["c3"].boxes.tolist() == [[100, 60, 160, 120]]
    assert len(recs["c2"].boxes) == 0
    assert load.report.dropped_annotations == {"car": 1}
    assert load.report.ignored_regions == 1  # the iscrowd person region, kept as ignore
    assert recs["c1"].ignore.tolist() == [[50, 50, 70, 70]] and len(recs["c3"].ignore) == 0


def test_visdrone(visdrone):
    load = load_source(spec("visdrone", "visdrone", visdrone, VISDRONE_IDS))
    recs = by_id(load)
    a, b = recs["0000001_00000_d_0000001"], recs["0000002_00000_d_0000001"]
    assert (a.split, b.split) == ("val", "test")
    # pedestrian (1) and people (2) -> person; ignored region (0) and score-0 box dropped
    assert a.boxes.tolist() == [[10, 20, 40, 60], [5, 5, 15, 15]]
    assert a.labels == ("person", "person")
    assert b.boxes.tolist() == [[100, 70, 150, 110]]
    assert load.report.ignored_regions == 2  # category 0 region and score-0 pedestrian
    assert a.ignore.tolist() == [[50, 50, 70, 70], [0, 0, 5, 5]] and len(b.ignore) == 0
    assert load.report.dropped_annotations == {"car": 1}
    by_name = {"pedestrian": "person", "people": "person", "car": None}
    assert by_id(load_source(spec("visdrone", "visdrone", visdrone, by_name)))[
        "0000001_00000_d_0000001"].boxes.tolist() == [[10, 20, 40, 60], [5, 5, 15, 15]]


# ---------------------------------------------------------------- splits and groups
def _sequences(root: Path, groups: str, frames: int = 3) -> None:
    for g in groups:
        for f in range(1, frames + 1):
            put(root / "images" / f"seq{g}_{f:04d}.jpg", scene(f"seq{g}{f}", 48, 64))


def test_hash_split_keeps_groups_whole_and_is_deterministic(tmp_path):
    root = tmp_path / "pyro"
    _sequences(root, "ABCDEFGHIJ")
    s = spec("pyro", "yolo", root, {"0": "person"}, split_mode="hash", fractions=(0.5, 0.25, 0.25),
             group_pattern=r"^(seq[A-Z])_(\d+)$")
    first, second = load_source(s), load_source(s)
    assert [(r.image_id, r.split, r.sha256) for r in first.records] == \
           [(r.image_id, r.split, r.sha256) for r in second.records]
    splits_of: dict[str, set] = {}
    for r in first.records:
        splits_of.setdefault(r.group_id, set()).add(r.split)
        assert r.split == assign_split(r.group_id, (0.5, 0.25, 0.25), "pyro")
        assert r.frame_index == int(r.image_id[-4:])
    assert len(splits_of) == 10 and all(len(v) == 1 for v in splits_of.values())
    assert len({next(iter(v)) for v in splits_of.values()}) > 1  # not all in one split
    assert first.report.excluded == ()
    # without a frame group, frames are ranked within their group
    ranked = load_source(spec("pyro", "yolo", root, {"0": "person"}, split_mode="hash",
                              group_pattern=r"^(seq[A-Z])_"))
    assert sorted(r.frame_index for r in ranked.records if r.group_id == "seqC") == [0, 1, 2]


def test_hash_mode_ignores_dataset_folders(sard):
    s = spec("sard", "yolo", sard, {n: "person" for n in SARD_NAMES}, split_mode="hash",
             fractions=(0.5, 0.25, 0.25), split_key="salt1")
    load = load_source(s)
    assert {r.image_id: r.split for r in load.records} == {
        i: assign_split(i, (0.5, 0.25, 0.25), "salt1") for i in ("s1", "s2", "s3", "s4")}
    assert by_id(load)["s1"].boxes.tolist() == [[60, 24, 100, 40], [10, 80, 30, 112]]


def test_folders_mode_reports_groups_straddling_splits(tmp_path):
    root = tmp_path / "st"
    put(root / "images" / "train" / "seqA_0001.jpg", scene("st1", 48, 64))
    put(root / "images" / "test" / "seqA_0002.jpg", scene("st2", 48, 64))
    load = load_source(spec("st", "yolo", root, {"0": "person"}, group_pattern=r"^(seq\w)_"))
    assert load.report.straddling_groups == ("seqA",)


# ---------------------------------------------------------------- near-duplicates
def test_near_duplicate_of_test_is_excluded_from_train_and_val_only_when_asked(tmp_path):
    root = tmp_path / "dup"
    base = scene("dupbase")
    put(root / "images" / "test" / "t1.jpg", base)
    brighter = np.clip(base.astype(np.int16) + 14, 0, 255).astype(np.uint8)
    put(root / "images" / "train" / "seqB_0001.jpg", brighter, quality=70)  # re-JPEG'd copy
    put(root / "images" / "train" / "seqB_0002.jpg", scene("unrelated1"))  # same group, distinct
    put(root / "images" / "val" / "v1.png", base)
    put(root / "images" / "train" / "u2.jpg", scene("unrelated2"))
    official = load_source(spec("dup", "yolo", root, {"0": "person"}, group_pattern=r"^(seqB|t1|v1|u2)"))
    # the dataset's own folders are used as they are: both pairs reported, nothing excluded
    assert len(official.records) == 5 and official.report.excluded == ()
    assert official.report.near_duplicate_policy == "report"
    assert {(e.image_id, e.test_id) for e in official.report.near_duplicates} == {("seqB_0001", "t1"), ("v1", "t1")}
    assert [d["image_id"] for d in official.report.to_dict()["near_duplicates"]] == ["seqB_0001", "v1"]
    s = spec("dup", "yolo", root, {"0": "person"}, group_pattern=r"^(seqB|t1|v1|u2)", near_duplicates="exclude")
    load = load_source(s)
    ids = {r.image_id for r in load.records}
    assert ids == {"t1", "seqB_0002", "u2"}  # only the near-duplicate frame leaves its group
    ex = {e.image_id: e for e in load.report.excluded}
    assert set(ex) == {"seqB_0001", "v1"}
    assert ex["seqB_0001"].test_id == "t1" and ex["seqB_0001"].split == "train"
    assert ex["v1"].distance == 0 and ex["v1"].split == "val"
    assert 0 <= ex["seqB_0001"].distance <= 6
    assert load.report.split_counts == {"train": 2, "val": 0, "test": 1}
    assert load.report.to_dict()["excluded"][0]["image_id"] == "seqB_0001"
    assert load.report.near_duplicates == load.report.excluded
    hashed = load_source(spec("dup", "yolo", root, {"0": "person"}, split_mode="hash", group_pattern=r"^(seqB|t1|v1|u2)"))
    assert hashed.report.near_duplicate_policy == "exclude"  # our own hash split: excluded by default
    assert {e.image_id for e in hashed.report.excluded} == {e.image_id for e in hashed.report.near_duplicates}
    kept_all = load_source(spec("dup", "yolo", root, {"0": "person"}, phash_max_distance=None,
                                near_duplicates="exclude"))
    assert len(kept_all.records) == 5 and kept_all.report.excluded == () == kept_all.report.near_duplicates
    with pytest.raises(ValueError, match="near_duplicates must be one of"):
        spec("dup", "yolo", root, {"0": "person"}, near_duplicates="drop")


# ---------------------------------------------------------------- streaming and round trip
def test_stream_and_source_table_round_trip(sard, tmp_path):
    stream = stream_source(spec("sard", "yolo", sard, {n: "person" for n in SARD_NAMES}))
    assert len(stream) == 4
    with pytest.raises(RuntimeError):
        _ = stream.report
    n = write_source_table(stream, tmp_path / "sard.parquet")
    assert n == 4 and stream.report.split_counts == {"train": 1, "val": 1, "test": 2}
    with pytest.raises(RuntimeError):
        iter(stream)
    back = {r.image_id: r for r in read_source_table(tmp_path / "sard.parquet")}
    assert back["s1"].boxes.tolist() == [[60, 24, 100, 40], [10, 80, 30, 112]]
    assert back["s1"].sha256 == pixel_sha256(back["s1"].image())


# ---------------------------------------------------------------- spec validation
@pytest.mark.parametrize("kw, err", [
    ({"name": "Bad-Name"}, ValueError), ({"format": "kitti"}, ValueError),
    ({"split_mode": "random"}, ValueError), ({"fractions": (0.5, 0.5, 0.5)}, ValueError),
    ({"class_map": {"human": "car"}}, ValueError), ({"class_map": {}}, TypeError),
    ({"group_pattern": "seq_\\d+"}, ValueError), ({"group_pattern": "("}, ValueError),
    ({"phash_max_distance": 65}, ValueError),
])
def test_spec_validation(tmp_path, kw, err):
    args = dict(name="x", format="voc", path=tmp_path, class_map={"human": "person"},
                target_label="person") | kw
    with pytest.raises(err):
        SourceSpec(**args)


def test_spec_from_options_and_int_keys(tmp_path):
    s = SourceSpec.from_options("sard", "yolo", {"path": str(tmp_path), "class_map": {0: "person", 1: None},
                                                 "target_label": "person", "fractions": [0.8, 0.1, 0.1]})
    assert s.class_map == {"0": "person", "1": None} and s.fractions == (0.8, 0.1, 0.1)
    with pytest.raises(BadInput, match="sources.sard"):
        SourceSpec.from_options("sard", "kitti", {"path": str(tmp_path), "class_map": {0: "person"},
                                                  "target_label": "person"})


# ---------------------------------------------------------------- bad input
def _raises(s: SourceSpec, fname: str, match: str | None = None) -> BadInput:
    with pytest.raises(BadInput) as info:
        load_source(s)
    assert fname in str(info.value)
    if match:
        assert match in str(info.value)
    return info.value


def test_missing_folder(tmp_path):
    _raises(spec("x", "voc", tmp_path / "nowhere", {"human": "person"}), "nowhere", "not found")


def test_bad_voc_files(heridal):
    cmap = {"human": "person", "tree": None}
    s = spec("heridal", "voc", heridal, cmap)
    xml = heridal / "testImages" / "test_0001.xml"
    cases = [
        ("<annotation><object><name>human</name>", "malformed XML"),
        (voc_xml("t", 160, 120, [("human", 11, 21, 200, 60)]), "object 0"),  # outside 160 px
        (voc_xml("t", 160, 120, [("human", 50, 21, 48, 60)]), "zero or negative area"),
        (voc_xml("t", 160, 120, [("tree", 1, 1, 5, 5), ("dog", 1, 1, 5, 5)]), "object 1: unknown class 'dog'"),
        (voc_xml("t", 160, 120, [("human", "ten", 1, 5, 5)]), "'ten' is not a number"),
        (voc_xml("t", 200, 120, [("human", 1, 1, 5, 5)]), "annotation says 200x120"),
    ]
    for content, match in cases:
        xml.write_text(content)
        _raises(s, "test_0001.xml", match)
    xml.write_text(voc_xml("t", 160, 120, []))
    text(heridal / "testImages" / "ghost.xml", voc_xml("ghost.JPG", 160, 120, []))
    _raises(s, "ghost.xml", "no matching image")


def test_bad_images(sard):
    s = spec("sard", "yolo", sard, {n: "person" for n in SARD_NAMES})
    bad = text(sard / "images" / "train" / "broken.jpg", "this is not a JPEG")
    _raises(s, "broken.jpg", "cannot decode")
    good = cv2.imencode(".jpg", scene("trunc"))[1].tobytes()
    bad.write_bytes(good[: len(good) // 2])
    _raises(s, "broken.jpg", "truncated")
    bad.unlink()
    put(sard / "loose.jpg", scene("loose"))  # not inside a split folder
    _raises(s, "loose.jpg", "train/val/test folder")


def test_bad_yolo_files(sard):
    s = spec("sard", "yolo", sard, {n: "person" for n in SARD_NAMES})
    label = sard / "labels" / "test" / "s4.txt"
    cases = [("5 0.9 0.5 0.1\n", "line 1: expected 5 fields"),
             ("\n0 0.5 0.5 0.1 0.1 0.9\n", "line 2: expected 5 fields"),
             ("0 0.5 abc 0.1 0.1\n", "'abc' is not a number"),
             ("7 0.5 0.5 0.1 0.1\n", "class id 7"),
             ("0 0.5 0.5 0 0.1\n", "zero or negative area"),
             ("0 0.95 0.5 0.2 0.1\n", "outside the 160x128 image")]
    for content, match in cases:
        label.write_text(content)
        _raises(s, "s4.txt", match)
    label.write_text("")
    text(sard / "labels" / "test" / "orphan.txt", "0 0.5 0.5 0.1 0.1\n")
    _raises(s, "orphan.txt", "no matching image")
    (sard / "labels" / "test" / "orphan.txt").unlink()
    text(sard / "data.yaml", "names: [a, b\n")
    _raises(s, "data.yaml", "malformed YAML")
    text(sard / "data.yaml", "nc: 3\nnames: [a, b]\n")
    _raises(s, "data.yaml", "nc=3")


def test_yolo_unknown_class_and_duplicate_ids_and_group_mismatch(sard):
    _raises(spec("sard", "yolo", sard, {n: "person" for n in SARD_NAMES[:5]}), "s4.txt",
            "unknown class 'Not Defined'")
    cmap = {n: "person" for n in SARD_NAMES}
    _raises(spec("sard", "yolo", sard, cmap, group_pattern=r"^(s[34])"), "s1.jpg", "group_pattern")
    put(sard / "images" / "val" / "s1.jpg", scene("dupe", 128, 160))
    _raises(spec("sard", "yolo", sard, cmap), "s1.jpg", "image id 's1'")


def test_bad_coco_files(coco):
    s = spec("coco_src", "coco", coco, {"person": "person", "car": None})
    jf = coco / "annotations" / "instances_train.json"
    good = json.loads(jf.read_text())

    def variant(mutate, match):
        data = json.loads(json.dumps(good))
        mutate(data)
        jf.write_text(json.dumps(data))
        _raises(s, "instances_train.json", match)

    variant(lambda d: d["annotations"][0].update(image_id=99), "missing image id 99")
    variant(lambda d: d["images"][1].update(file_name="nope.jpg"), "'nope.jpg' not found")
    variant(lambda d: d["annotations"][0].update(category_id=9), "category id 9")
    variant(lambda d: d["categories"].append({"id": 9, "name": "bicycle"})
            or d["annotations"][0].update(category_id=9), "unknown class 'bicycle'")
    variant(lambda d: d["annotations"][0].update(bbox=[10, 20, 0, 40]), "annotation 0")
    variant(lambda d: d["annotations"][0].update(bbox=[150, 20, 30, 40]), "outside the 160x120")
    variant(lambda d: d["images"][0].update(width=200), "annotation says 200x120")
    variant(lambda d: d["annotations"][0].pop("bbox"), "missing 'bbox'")
    jf.write_text(json.dumps(good)[:-20])
    _raises(s, "instances_train.json", "malformed JSON")


def test_bad_visdrone_files(visdrone):
    s = spec("visdrone", "visdrone", visdrone, VISDRONE_IDS)
    ann = visdrone / "VisDrone2019-DET-test-dev" / "annotations" / "0000002_00000_d_0000001.txt"
    for content, match in [("1,1,5,5,1,1,0,0\n1,1,5,5,1,1,0\n", "line 2: expected 8"),
                           ("1,1,5,5,1,12,0,0\n", "unknown class '12'"),
                           ("1,x,5,5,1,1,0,0\n", "'x' is not a number"),
                           ("150,70,50,40,1,1,0,0\n", "outside the 160x120"),
                           ("10,10,0,5,1,1,0,0\n", "zero or negative area")]:
        ann.write_text(content)
        _raises(s, "0000002_00000_d_0000001.txt", match)
    ann.write_text("")
    text(ann.parent / "0000009_00000_d_0000001.txt", "1,1,5,5,1,1,0,0\n")
    _raises(s, "0000009_00000_d_0000001.txt", "no matching image")
