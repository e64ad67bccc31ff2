"""Contract tests over every registry but corruptions' (tests/test_corruptions_contract.py) and
metrics' (tests/test_metrics_contract.py): tracks, detector adapters, source formats, synthetic
kinds and config families (their declarations and their planners).

Each registry has a table of test settings here, one entry per registered unit; the first test
checks that a table's keys are the registry's names exactly, so a new unit without settings
fails, naming it and this file. Every unit is then exercised through its public path, driven
by its settings: a track reads a tiny valid submission (``validate_submission``), an adapter
loads a small checkpoint by name and predicts, a source format reads a tiny folder of its format
into the expected boxes, a synthetic kind generates frames of its declared size twice alike, a
config family's built shards carry the Arrow schema of its declared features and are read back by
the shard reader without a problem.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from _detkit import TINY_YOLO, trained_checkpoint
from _evalkit import gt_table, write_submission
from test_adapters import put, scene, text, voc_xml
from test_detectors import RTDETR_TINY
from aegisbench.builders.adapters import SourceSpec, load_source
from aegisbench.builders.families import PLANNERS
from aegisbench.builders.source_kinds import SOURCE_FORMATS, SYNTHETIC_KINDS
from aegisbench.dataset.families import FAMILIES, features_of, row_kind, schema_of
from aegisbench.dataset.images import decode_image
from aegisbench.dataset.index import DatasetIndex
from aegisbench.dataset.schema import KIND_FEATURES, features_schema
from aegisbench.dataset.shard_content import shard_facts
from aegisbench.detectors.interface import DETECTORS, Detector, DetectorOptions, load_detector
from aegisbench.evaluation.submission import validate_submission
from aegisbench.evaluation.tracks import TRACKS_REGISTRY
from aegisbench.hashing import pixel_sha256

HERE = "tests/test_registry_contracts.py"
FIRESPREAD_TINY = {"grid": [16, 16], "realizations": 24, "s_levels": [0, 30], "initial_conditions": 4,
                   "test_initial_conditions": [2, 3], "realizations_per_shard": 10,
                   "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}


@pytest.fixture(scope="module")
def firespread_repo(tmp_path_factory) -> Path:
    from aegisbench.builders.firespread import build_firespread_repo

    root = tmp_path_factory.mktemp("contract_firespread") / "repo"
    build_firespread_repo(FIRESPREAD_TINY, "0.1.0", root)
    return root


# ---------------------------------------------------------------- settings per unit

def _detection_submission(track: str):
    def make(tmp: Path, repo: Path, fs_repo: Path) -> tuple[Path, Path]:
        index = DatasetIndex(repo)
        return write_submission(tmp / f"contract_{track}", index, track, gt_table(index, track)), repo
    return make


def _firespread_submission(tmp: Path, repo: Path, fs_repo: Path) -> tuple[Path, Path]:
    from aegisbench.forecasters.baselines import write_baselines

    (folder,) = write_baselines(fs_repo, tmp / "subs", names=("spread_heuristic",))
    return folder, fs_repo


#: track -> (its kind, a writer of a tiny valid submission: (tmp, detection repo, fire-spread repo) -> (folder, repo))
TRACK_SETTINGS = {
    "sar": ("detection", _detection_submission("sar")),
    "smoke": ("detection", _detection_submission("smoke")),
    "firespread": ("forecast", _firespread_submission),
}


def _ultralytics(kind: str):
    def make(tmp: Path) -> Path:
        cfg = TINY_YOLO
        if kind == "rtdetr":
            cfg = tmp / "rtdetr_tiny.yaml"
            cfg.write_text(RTDETR_TINY)
        return trained_checkpoint(cfg, tmp / f"{kind}.pt", kind=kind)  # from the model YAML, one epoch, offline
    return make


def _fasterrcnn(tmp: Path) -> Path:
    import torch
    from torchvision.models.detection import fasterrcnn_resnet50_fpn

    from aegisbench.detectors.torchvision_adapter import save_fasterrcnn

    torch.manual_seed(0)
    save_fasterrcnn(fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=2), tmp / "frcnn.pt",
                    ["person"])
    return tmp / "frcnn.pt"


#: detector -> (adapter class name, a writer of a small local checkpoint: tmp -> weights)
DETECTOR_SETTINGS = {
    "yolo": ("UltralyticsDetector", _ultralytics("yolo")),
    "rtdetr": ("UltralyticsDetector", _ultralytics("rtdetr")),
    "fasterrcnn": ("FasterRCNNDetector", _fasterrcnn),
}


def _voc(root: Path) -> None:
    put(root / "trainImages" / "a.jpg", scene("va"))
    text(root / "trainImages" / "labels" / "a.xml", voc_xml("a.jpg", 160, 120, [("human", 11, 21, 40, 60),
                                                                                 ("tree", 1, 1, 30, 30)]))
    put(root / "testImages" / "b.jpg", scene("vb"))
    text(root / "testImages" / "b.xml", voc_xml("b.jpg", 160, 120, [("human", 1, 1, 160, 120)]))


def _yolo(root: Path) -> None:
    text(root / "data.yaml", "names: [person, car]\n")
    put(root / "images" / "train" / "a.jpg", scene("ya", 128, 160))
    text(root / "labels" / "train" / "a.txt", "0 0.5 0.25 0.25 0.125\n1 0.1 0.1 0.1 0.1\n")
    put(root / "images" / "test" / "b.jpg", scene("yb", 128, 160))
    text(root / "labels" / "test" / "b.txt", "0 0.9375 0.5 0.125 0.25\n")


def _coco(root: Path) -> None:
    put(root / "images" / "a.jpg", scene("ca"))
    put(root / "images" / "b.jpg", scene("cb"))
    cats = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}]
    for split, name, bbox in (("train", "a.jpg", [10.5, 20, 30, 40]), ("test", "b.jpg", [100, 60, 60, 60])):
        doc = {"images": [{"id": 1, "file_name": name, "width": 160, "height": 120}], "categories": cats,
               "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": bbox, "iscrowd": 0},
                               {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 10, 10], "iscrowd": 0}]}
        text(root / "annotations" / f"instances_{split}.json", json.dumps(doc))


def _visdrone(root: Path) -> None:
    put(root / "VisDrone2019-DET-val" / "images" / "a.jpg", scene("da"))
    text(root / "VisDrone2019-DET-val" / "annotations" / "a.txt", "10,20,30,40,1,1,0,0\n60,60,10,10,1,4,0,0\n")
    put(root / "VisDrone2019-DET-test-dev" / "images" / "b.jpg", scene("db"))
    text(root / "VisDrone2019-DET-test-dev" / "annotations" / "b.txt", "100,70,50,40,1,2,1,0\n")


#: source format -> (folder writer, class map, image id -> (split, xyxy boxes of the target label))
SOURCE_FORMAT_SETTINGS = {
    "voc": (_voc, {"human": "person", "tree": None},
            {"a": ("train", [[10, 20, 40, 60]]), "b": ("test", [[0, 0, 160, 120]])}),
    "yolo": (_yolo, {"person": "person", "car": None},
             {"a": ("train", [[60, 24, 100, 40]]), "b": ("test", [[140, 48, 160, 80]])}),
    "coco": (_coco, {"person": "person", "car": None},
             {"a": ("train", [[10.5, 20, 40.5, 60]]), "b": ("test", [[100, 60, 160, 120]])}),
    "visdrone": (_visdrone, {"1": "person", "2": "person", **{str(i): None for i in range(3, 12)}},
                 {"a": ("val", [[10, 20, 40, 60]]), "b": ("test", [[100, 70, 150, 110]])}),
}

#: synthetic kind -> (tiny options, the frame sizes (width, height) its options declare)
SYNTHETIC_SETTINGS = {
    "synthetic_sar": ({"n_train": 1, "n_val": 1, "n_test": 2, "small_size": (320, 320), "large_size": (480, 400),
                       "images_per_flight": 1, "person_size_px": (16, 64)}, {(320, 320), (480, 400)}),
    "synthetic_smoke": ({"n_train": 0, "n_val": 1, "n_test": 1, "frames_per_sequence": 2, "size": (192, 144)},
                        {(192, 144)}),
}

#: config family -> the built repo holding its configs ("detection": the session's tiny repo)
FAMILY_SETTINGS = {"image": "detection", "firespread": "firespread"}
#: config family planner -> the family it plans (every family needs one)
PLANNER_SETTINGS = {"image": "image", "firespread": "firespread"}

TABLES = {"track": (TRACK_SETTINGS, TRACKS_REGISTRY), "detector": (DETECTOR_SETTINGS, DETECTORS),
          "source format": (SOURCE_FORMAT_SETTINGS, SOURCE_FORMATS),
          "synthetic kind": (SYNTHETIC_SETTINGS, SYNTHETIC_KINDS), "config family": (FAMILY_SETTINGS, FAMILIES),
          "config family planner": (PLANNER_SETTINGS, PLANNERS)}


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_every_registered_unit_has_test_settings(kind):
    table, registry = TABLES[kind]
    names = set(registry.names())
    assert not names - set(table), f"add test settings for {kind}(s) {sorted(names - set(table))} to {HERE}"
    assert not set(table) - names, f"{HERE} has settings for unregistered {kind}(s) {sorted(set(table) - names)}"


# ---------------------------------------------------------------- behaviour per unit

@pytest.mark.parametrize("name", sorted(TRACK_SETTINGS))
def test_track_reads_a_tiny_valid_submission(name, tmp_path, repo, firespread_repo):
    kind, make = TRACK_SETTINGS[name]
    track = TRACKS_REGISTRY.get(name)
    assert track.kind == kind and track.contents.strip()
    folder, dataset = make(tmp_path, repo, firespread_repo)
    sub = validate_submission(folder, DatasetIndex(dataset))  # submission.yaml, then the track's own read
    assert sub.meta.track == name and sub.predictions is not None
    line = track.summary(sub)
    assert isinstance(line, str) and line.strip() and "\n" not in line


@pytest.mark.parametrize("name", sorted(DETECTOR_SETTINGS))
def test_detector_adapter_loads_by_name_and_predicts(name, tmp_path):
    cls_name, make = DETECTOR_SETTINGS[name]
    cls = DETECTORS.get(name)
    assert issubclass(cls, Detector) and cls.__name__ == cls_name
    det = load_detector(name, make(tmp_path), DetectorOptions(conf=0.0, max_det=20, max_det_frame=20))
    assert type(det) is cls and det.name == name and det.names
    frame = np.random.default_rng(0).integers(0, 256, (64, 96, 3), np.uint8)
    (out,) = det.predict([frame])
    assert len(out) <= 20 and det.describe()["detector"] == name
    if len(out):
        assert out.xyxy[:, 2].max() <= 96 and out.xyxy[:, 3].max() <= 64 and out.score.min() >= 0


@pytest.mark.parametrize("name", sorted(SOURCE_FORMAT_SETTINGS))
def test_source_format_reads_a_tiny_folder(name, tmp_path):
    write, class_map, expected = SOURCE_FORMAT_SETTINGS[name]
    write(tmp_path / name)
    load = load_source(SourceSpec(name, name, tmp_path / name, class_map, "person", split_mode="folders"))
    got = {r.image_id: (r.split, r.boxes.tolist()) for r in load.records}
    assert got == expected
    for r in load.records:
        assert decode_image(r.png).shape == (r.height, r.width, 3) and r.sha256 == pixel_sha256(decode_image(r.png))


@pytest.mark.parametrize("name", sorted(SYNTHETIC_SETTINGS))
def test_synthetic_kind_generates_frames_of_its_size_deterministically(name):
    options, sizes = SYNTHETIC_SETTINGS[name]
    unit = SYNTHETIC_KINDS.get(name)
    config = unit.config(**options)
    first = list(unit.generate(config, "0.1.0"))
    again = list(unit.generate(unit.config(**options), "0.1.0"))
    assert first and [(r.image_id, r.sha256) for r in first] == [(r.image_id, r.sha256) for r in again]
    for r in first:
        img = decode_image(r.png)
        assert (r.width, r.height) in sizes and img.shape == (r.height, r.width, 3), (r.image_id, img.shape)
        assert pixel_sha256(img) == r.sha256
    assert {r.split for r in first} <= {"train", "val", "test"}


@cache
def _shards(root: Path) -> dict[str, list[Path]]:
    """config -> its shards in a built repo (``<config>/*.parquet``)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(root.glob("*/*.parquet")):
        out.setdefault(p.parent.name, []).append(p)
    return out


@pytest.mark.parametrize("name", sorted(FAMILY_SETTINGS))
def test_config_family_features_match_its_shards_and_reader(name, repo, firespread_repo):
    family = FAMILIES.get(name)
    assert PLANNERS.get(name) is not None  # the builder's half of the family
    shards = _shards(repo if FAMILY_SETTINGS[name] == "detection" else firespread_repo)
    mine = {c: paths for c, paths in shards.items() if row_kind(c) in family.kinds.values()}
    assert set(family.kinds.values()) == {row_kind(c) for c in mine}, "every row kind it declares is built"
    for config, paths in mine.items():
        kind = row_kind(config)
        want = features_schema(KIND_FEATURES[kind])
        assert features_of(config) == KIND_FEATURES[kind] and schema_of(config).equals(want, check_metadata=True)
        for path in paths[:2]:
            got = pq.ParquetFile(path).schema_arrow  # compared as the shard reader compares it
            assert got.equals(want, check_metadata=False) and got.metadata == want.metadata, (config, path.name)
            facts = shard_facts(path.read_bytes(), config, path.name)  # the shard reader, with the family's row key
            assert facts.ok and facts.rows > 0, (config, path.name, facts.problems)


@pytest.mark.parametrize("name", sorted(PLANNER_SETTINGS))
def test_every_planner_plans_a_declared_family(name):
    assert PLANNER_SETTINGS[name] in FAMILIES and callable(PLANNERS.get(name))
