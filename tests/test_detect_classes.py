"""Class mapping in ``detect`` and the refusals around it, with real Ultralytics and
torchvision models (built from their definitions, the Ultralytics ones trained for one
epoch on a generated folder; nothing downloaded): a class named like the track's label
is mapped by name, ``--classes`` maps names or ids, other classes never reach the NMS
or the file; multi-class models without a map, unknown classes, bare YAMLs and
untrained checkpoints are refused; ``validate`` refuses any other label; and
``train-reference`` trains on a source built from a ``--source-dir`` folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from _detkit import TINY_YOLO, framework_kernels, trained_checkpoint
from _evalkit import gt_table, rewrite_rows, rows_of, write_submission
from aegisbench.cli import main
from aegisbench.detectors.interface import DetectorOptions, load_detector
from aegisbench.detectors.runner import run_key
from aegisbench.errors import BadInput
from aegisbench.predictions import PREDICTION_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--conf", "0", "--batch", "4", "--no-progress"]
FRAME = np.random.default_rng(5).integers(0, 256, (160, 224, 3), np.uint8)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Trained checkpoints with several classes, and an untrained one (built from its YAML, saved)."""
    root = tmp_path_factory.mktemp("classes")
    trained_checkpoint(TINY_YOLO, root / "named.pt", names=("car", "dog", "Person"))
    trained_checkpoint(TINY_YOLO, root / "multi.pt", names=("pedestrian", "car", "people"))
    from ultralytics import YOLO
    YOLO(str(TINY_YOLO)).save(root / "untrained.pt")
    return root


def _detect(repo, weights, out, track="sar", *extra):
    return main(["detect", "--detector", "yolo", "--weights", str(weights), "--dataset", str(repo),
                 "--track", track, "--out", str(out), "--team", "test team", *FAST, *extra])


def _framework(weights, classes):
    """Ultralytics' own predict on FRAME with only ``classes`` (one class among them)."""
    from ultralytics import YOLO

    with framework_kernels():
        r = YOLO(str(weights)).predict([np.ascontiguousarray(FRAME[..., ::-1])], imgsz=224, conf=0.0, iou=0.7,
                                       max_det=300, classes=classes, agnostic_nms=True, verbose=False)[0].boxes
    xyxy = r.xyxy.numpy().astype(np.float32)
    return xyxy[np.lexsort(xyxy.T[::-1])]


def _sorted(det):
    return det.xyxy[np.lexsort(det.xyxy.T[::-1])]


def test_the_class_named_like_the_target_is_mapped_by_name(models, repo, index, tmp_path):
    raw = load_detector("yolo", models / "named.pt", DetectorOptions(conf=0.0))
    (unmapped,) = raw.predict([FRAME])
    assert {"car", "dog"} & set(unmapped.label)  # the model does see other classes
    cm = raw.map_classes("person")
    assert (cm.ids, cm.names, cm.record()) == ((2,), ("Person",), {"Person": "person"})
    (mapped,) = raw.predict([FRAME])
    assert len(mapped) > 0 and set(mapped.label) == {"person"}
    np.testing.assert_array_equal(_sorted(mapped), _framework(models / "named.pt", [2]))

    out = tmp_path / "subs" / "named"
    assert _detect(repo, models / "named.pt", out) == 0
    meta = yaml.safe_load((out / "submission.yaml").read_text())
    assert meta["classes"] == {"Person": "person"} and meta["detector"]["class_ids"] == [2]
    assert set(pq.read_table(out / "predictions.parquet").column("label").to_pylist()) == {"person"}
    assert main(["validate", str(out), "--dataset", str(repo)]) == 0


def test_classes_by_id_and_several_names(models, repo, tmp_path):
    det = load_detector("yolo", models / "multi.pt", DetectorOptions(conf=0.0))
    manifest = json.loads((repo / "manifest.json").read_text())
    assert det.map_classes("person", "0").record() == {"pedestrian": "person"}
    key_one = run_key(det, manifest, "sar")
    cm = det.map_classes("person", "pedestrian,PEOPLE")
    assert cm.ids == (0, 2) and cm.record() == {"pedestrian": "person", "people": "person"}
    assert run_key(det, manifest, "sar") != key_one  # the map is part of the resume key
    (d,) = det.predict([FRAME])
    assert set(d.label) == {"person"}
    np.testing.assert_array_equal(_sorted(d), _framework(models / "multi.pt", [0, 2]))

    out = tmp_path / "subs" / "ids"
    assert _detect(repo, models / "multi.pt", out, "smoke", "--classes", "2") == 0
    meta = yaml.safe_load((out / "submission.yaml").read_text())
    assert meta["classes"] == {"people": "smoke"} and meta["track"] == "smoke"
    assert set(pq.read_table(out / "predictions.parquet").column("label").to_pylist()) == {"smoke"}
    assert main(["validate", str(out), "--dataset", str(repo)]) == 0


@pytest.mark.parametrize("weights, extra, message", [
    ("multi.pt", [], "3 classes and none is named 'person'"),
    ("multi.pt", ["--classes", "truck"], "'truck' names no class of the model"),
    ("multi.pt", ["--classes", "pedestrian,"], "empty entry"),
    ("multi.pt", ["--classes", "7"], "'7' names no class of the model"),
    ("untrained.pt", [], "checkpoint holds no trained weights"),
    (TINY_YOLO, [], "a model YAML builds an untrained network"),
])
def test_refusals_exit_2_with_one_line_and_write_nothing(models, repo, tmp_path, capsys, weights, extra, message):
    subs = tmp_path / "subs"
    rc = _detect(repo, models / weights, subs / "x", "sar", *extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
    if "empty" not in message and weights == "multi.pt":  # the model's classes are named
        assert "0=pedestrian, 1=car, 2=people" in err[0]
    assert not subs.exists()


def test_fasterrcnn_keeps_only_the_mapped_classes(tmp_path):
    import torch
    from torchvision.models.detection import fasterrcnn_resnet50_fpn
    from torchvision.ops import box_iou

    from aegisbench.detectors.torchvision_adapter import save_fasterrcnn

    torch.manual_seed(0)
    save_fasterrcnn(fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=4),
                    tmp_path / "frcnn.pt", ["car", "person", "dog"])
    opts = DetectorOptions(conf=0.0, max_det=1000)
    (raw,) = load_detector("fasterrcnn", tmp_path / "frcnn.pt", opts).predict([FRAME])
    det = load_detector("fasterrcnn", tmp_path / "frcnn.pt", opts)
    assert det.map_classes("person").ids == (2,)
    (mapped,) = det.predict([FRAME])
    person = raw.label == "person"
    assert 0 < person.sum() < len(raw) and set(mapped.label) == {"person"}
    np.testing.assert_array_equal(_sorted(mapped), raw.xyxy[person][np.lexsort(raw.xyxy[person].T[::-1])])
    det.map_classes("smoke", "car,dog")
    (both,) = det.predict([FRAME])
    boxes = torch.tensor(both.xyxy)
    iou = box_iou(boxes, boxes).fill_diagonal_(0)
    assert len(both) > 0 and set(both.label) == {"smoke"} and float(iou.max()) <= 0.5  # one NMS across both


def test_validate_refuses_labels_other_than_the_tracks(repo, index, tmp_path, capsys):
    folder = write_submission(tmp_path / "gt", index, "sar", gt_table(index, "sar"))
    assert main(["validate", str(folder), "--dataset", str(repo)]) == 0  # null labels are no label
    rows = rows_of(folder)
    for r in rows:
        r["label"] = "person"
    rewrite_rows(folder, rows, PREDICTION_SCHEMA)
    assert main(["validate", str(folder), "--dataset", str(repo)]) == 0
    rows[2]["label"], rows[5]["label"] = "car", "dog"
    rewrite_rows(folder, rows, PREDICTION_SCHEMA)
    capsys.readouterr()
    assert main(["validate", str(folder), "--dataset", str(repo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[1] == "invalid submission: 1 problem(s)"
    assert err[0].startswith(f"{folder / 'predictions.parquet'}:row 2 field label: label 'car' is not the sar")
    assert "2 row(s) hold other labels ('car', 'dog')" in err[0]
    smoke = write_submission(tmp_path / "smoke", index, "smoke", gt_table(index, "smoke"))
    rows = rows_of(smoke)
    rows[0]["label"] = "person"
    rewrite_rows(smoke, rows, PREDICTION_SCHEMA)
    with pytest.raises(BadInput, match="label 'person' is not the smoke track's label 'smoke'"):
        from aegisbench.evaluation.submission import validate_submission
        validate_submission(smoke, index)


def _yolo_folder(root: Path) -> Path:
    """A YOLO folder with its own split folders: bright boxes on noise, class 0."""
    rng = np.random.default_rng(3)
    for split, n in (("train", 4), ("val", 2), ("test", 2)):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for k in range(n):
            img = rng.integers(0, 120, (96, 128, 3), np.uint8)
            x, y = int(rng.integers(10, 90)), int(rng.integers(10, 60))
            img[y:y + 20, x:x + 12] = 250
            cv2.imwrite(str(root / "images" / split / f"{split}{k}.png"), img)
            (root / "labels" / split / f"{split}{k}.txt").write_text(
                f"0 {(x + 6) / 128:.5f} {(y + 10) / 96:.5f} {12 / 128:.5f} {20 / 96:.5f}\n")
    return root


def test_train_reference_on_a_source_built_from_a_source_dir(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["build"].update(conditions=[], compound=[])
    raw["firespread"] = {"enabled": False}
    raw["paths"] = {"sources": str(tmp_path / "sources"), "dataset": str(tmp_path / "repo")}
    raw["reference_detector"] = {"epochs": 5, "crop": 64, "imgsz": 64, "batch": 2, "close_mosaic": 0,
                                 "warmup_epochs": 0}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    src = _yolo_folder(tmp_path / "folder")
    assert main(["build", "--params", str(params), "--source-dir", str(src), "--source-format", "yolo", "--source",
                 "tinyfolder", "--class-map", "0=person", "--split-mode", "folders",
                 "--out", str(tmp_path / "repo")]) == 0
    assert (tmp_path / "sources" / "tinyfolder.parquet").is_file()
    assert main(["train-reference", "--params", str(params), "--source", "tinyfolder", "--out",
                 str(tmp_path / "ref"), "--epochs", "1"]) == 0
    report = json.loads((tmp_path / "ref" / "train.json").read_text())
    assert report["source_table"] == "tinyfolder.parquet" and report["params"]["epochs"] == 1
    assert report["scores"]["test_images"] == 2 and report["scores"]["test_objects"] == 2
    out = tmp_path / "subs" / "ref"
    assert _detect(tmp_path / "repo", tmp_path / "ref" / "weights.pt", out) == 0
    assert yaml.safe_load((out / "submission.yaml").read_text())["classes"] == {"person": "person"}
    assert main(["validate", str(out), "--dataset", str(tmp_path / "repo")]) == 0
    capsys.readouterr()
    assert main(["train-reference", "--params", str(params), "--source", "nosuch", "--out", str(tmp_path / "x")]) == 2
    assert "tables there: tinyfolder" in capsys.readouterr().err


def test_imgsz_trained_reads_the_train_json_beside_the_weights(models, repo, tmp_path, capsys):
    weights = tmp_path / "m" / "weights.pt"
    weights.parent.mkdir()
    weights.write_bytes((models / "named.pt").read_bytes())
    subs = tmp_path / "subs"
    assert _detect(repo, weights, subs / "x", "sar", "--imgsz", "trained") == 2  # no train.json
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--imgsz" in err[0] and "train.json" in err[0] and not subs.exists()
    (weights.parent / "train.json").write_text(json.dumps({"detect_imgsz": "big"}))
    assert _detect(repo, weights, subs / "x", "sar", "--imgsz", "trained") == 2
    assert "detect_imgsz must be an integer or null" in capsys.readouterr().err and not subs.exists()
    (weights.parent / "train.json").write_text(json.dumps({"detect_imgsz": 96}))
    assert _detect(repo, weights, subs / "x", "sar", "--imgsz", "trained") == 0
    meta = yaml.safe_load((subs / "x" / "submission.yaml").read_text())
    assert meta["detector"]["imgsz"] == 96
