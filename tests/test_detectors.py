"""Wrapped detectors end to end: real Ultralytics and torchvision models built from their
definitions (no downloads; Ultralytics ones trained for one epoch), saved to local files
and loaded back safely; ``aegisbench
detect`` / ``warp-detect`` on a tiny dataset repo built by the real pipeline, checked by
``aegisbench validate`` and ``evaluate``; resume; bad input; a tiny reference training.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from aegisbench.builders.build import build_repo
from aegisbench.cli import main
from aegisbench.detectors.interface import Detector, DetectorOptions, load_detector, resolve_device
from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect, staging_for
from aegisbench.detectors.tiling import TilingParams
from aegisbench.errors import BadInput
from _detkit import framework_kernels, trained_checkpoint
from _evalkit import materialize, tiny_params

ROOT = Path(__file__).resolve().parents[1]
TINY = {"synthetic_sar": {"n_train": 3, "n_val": 2, "n_test": 2, "images_per_flight": 1, "large_fraction": 0.0},
        "synthetic_smoke": {"n_train": 1, "n_val": 1, "n_test": 1, "frames_per_sequence": 3}}
FAST = ["--conf", "0", "--batch", "4", "--no-progress"]  # untrained nets score below 0.001


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A tiny repo (clean + low_light_s3 + one WARP noise level) and saved checkpoints
    (the Ultralytics detectors trained for one epoch: ``detect`` refuses untrained ones)."""
    root = tmp_path_factory.mktemp("det")
    params = tiny_params(root, TINY, ["low_light_s3"])
    materialize(params)
    build_repo(params, progress=False)

    from aegisbench.detectors.ultralytics_adapter import import_ultralytics
    import_ultralytics()
    from ultralytics import YOLO
    trained_checkpoint(ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml", root / "tiny.pt")
    YOLO("yolov8n-cls.yaml").save(root / "cls.pt")
    (root / "rtdetr_tiny.yaml").write_text(RTDETR_TINY)
    trained_checkpoint(root / "rtdetr_tiny.yaml", root / "rtdetr.pt", kind="rtdetr")
    (root / "junk.pt").write_bytes(b"\x89PNG not a checkpoint" * 10)
    return root


RTDETR_TINY = """nc: 1
backbone:
  - [-1, 1, Conv, [16, 3, 2]]
  - [-1, 1, Conv, [32, 3, 2]]
  - [-1, 1, Conv, [32, 3, 2]]
  - [-1, 1, Conv, [64, 3, 2]]
  - [-1, 1, Conv, [64, 3, 2]]
head:
  - [-1, 1, AIFI, [128, 4]]
  - [[2, 3, 5], 1, RTDETRDecoder, [nc, 64, 30, 2, 4, 1, 128]]
"""


def _detect(env, out, track="sar", *extra, weights="tiny.pt", detector="yolo"):
    return main(["detect", "--detector", detector, "--weights", str(env / weights), "--dataset",
                 str(env / "repo"), "--track", track, "--out", str(out), "--team", "test team", *FAST, *extra])


# ------------------------------------------------------------------ adapters


def test_ultralytics_adapter_matches_framework_predict(env):
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics
    import_ultralytics()
    from ultralytics import YOLO

    det = load_detector("yolo", env / "tiny.pt", DetectorOptions(conf=0.0, tiling=TilingParams(tile=320, overlap=64)))
    rng = np.random.default_rng(1)
    small, big = rng.integers(0, 256, (240, 320, 3), np.uint8), rng.integers(0, 256, (500, 700, 3), np.uint8)
    out = det.predict([small, big])
    assert det.stats.frames == 2 and det.stats.windows == 1 + 6
    with framework_kernels():  # the kernels detect runs a CPU model on
        ref = YOLO(str(env / "tiny.pt")).predict([np.ascontiguousarray(small[..., ::-1])], imgsz=320, conf=0.0,
                                                verbose=False)[0].boxes
    order = np.lexsort(out[0].xyxy.T[::-1])
    want = ref.xyxy.numpy()[np.lexsort(ref.xyxy.numpy().T[::-1])]
    assert len(out[0]) == len(want) > 0
    np.testing.assert_array_equal(out[0].xyxy[order], want.astype(np.float32))
    b = out[1].xyxy
    assert len(b) > 0 and b[:, 0].min() >= 0 and b[:, 2].max() <= 700 and b[:, 3].max() <= 500
    assert b[:, 2].max() > 320  # boxes from the right-hand tiles were shifted into frame pixels


def test_rtdetr_and_fasterrcnn_adapters(env, tmp_path):
    import torch
    from torchvision.models.detection import fasterrcnn_resnet50_fpn

    from aegisbench.detectors.torchvision_adapter import save_fasterrcnn

    frame = np.random.default_rng(2).integers(0, 256, (120, 160, 3), np.uint8)
    rt = load_detector("rtdetr", env / "rtdetr.pt", DetectorOptions(conf=0.0))
    (d,) = rt.predict([frame])
    assert 0 < len(d) <= 30 and rt.describe()["architecture"] == "RTDETRDetectionModel"

    torch.manual_seed(0)
    net = fasterrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=2)
    save_fasterrcnn(net, tmp_path / "frcnn.pt", ["person"])
    state = torch.load(tmp_path / "frcnn.pt", weights_only=True)  # plain tensors and lists only
    assert state["classes"] == ["person"]
    fr = load_detector("fasterrcnn", tmp_path / "frcnn.pt", DetectorOptions(conf=0.0, max_det=50))
    (d,) = fr.predict([frame])
    assert 0 < len(d) <= 50 and set(d.label) == {"person"}
    assert d.xyxy[:, 2].max() <= 160 and d.xyxy[:, 3].max() <= 120
    torch.save(net.state_dict(), tmp_path / "bare.pt")  # a bare state dict loads too
    assert load_detector("fasterrcnn", tmp_path / "bare.pt").describe()["classes"] == ["1"]
    with pytest.raises(BadInput, match="not a fasterrcnn_resnet50_fpn"):
        torch.save({"backbone.body.conv1.weight": torch.zeros(1)}, tmp_path / "partial.pt")
        load_detector("fasterrcnn", tmp_path / "partial.pt")
    with pytest.raises(BadInput, match="not a loadable Ultralytics checkpoint"):
        load_detector("yolo", tmp_path / "frcnn.pt")


@pytest.mark.parametrize("kind, weights, message", [
    ("yolo", "missing.pt", "weights file not found"),
    ("yolo", "junk.pt", "not a loadable Ultralytics checkpoint"),
    ("yolo", "cls.pt", "not a detector"),
    ("yolo", "rtdetr.pt", "not a YOLO model"),
    ("rtdetr", "tiny.pt", "not an RT-DETR model"),
    ("fasterrcnn", "junk.pt", "not a loadable torch checkpoint"),
    ("yolo", "notes.txt", "must be a trained .pt checkpoint"),
    ("ssd", "tiny.pt", "unknown detector"),
])
def test_bad_weights_and_names(env, kind, weights, message):
    (env / "notes.txt").write_text("x")
    with pytest.raises(BadInput, match=message):
        load_detector(kind, env / weights)


def test_devices():
    import torch
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(BadInput, match="not available"):
            resolve_device("cuda:0")


# ------------------------------------------------------------------ detect CLI


def test_detect_writes_a_submission_that_validates_and_evaluates(env, tmp_path, capsys):
    out = tmp_path / "submissions" / "tiny_sar"
    assert _detect(env, out, "sar", "--tile", "384", "--overlap", "64") == 0
    assert "images/s" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["predictions.parquet", "submission.yaml"]
    assert not staging_for(out).exists()
    meta = yaml.safe_load((out / "submission.yaml").read_text())
    manifest = yaml.safe_load((env / "repo" / "manifest.json").read_text())
    assert meta["dataset_digest"] == manifest["dataset_digest"] and meta["track"] == "sar"
    assert meta["detector"]["tiling"]["tile"] == 384
    assert meta["classes"] == {"person": "person"} and meta["detector"]["class_ids"] == [0]
    t = pq.read_table(out / "predictions.parquet")
    pairs = set(zip(t.column("config").to_pylist(), t.column("split").to_pylist()))
    assert pairs | {tuple(e.split("/")) for e in meta.get("no_detections", [])} == {
        ("clean", "synthetic_sar_val"), ("clean", "synthetic_sar"), ("low_light_s3", "synthetic_sar")}
    assert main(["validate", str(out), "--dataset", str(env / "repo")]) == 0
    assert main(["evaluate", str(out), "--dataset", str(env / "repo"), "--out", str(tmp_path / "results"),
                 "--n-resamples", "20"]) == 0
    assert any((tmp_path / "results").rglob("*.parquet"))


def test_detect_resumes_per_config(env, tmp_path):
    base = load_detector("yolo", env / "tiny.pt", DetectorOptions(conf=0.0))
    base.map_classes("person")  # before wrapping: the wrapper predicts with base's class map
    info = SubmissionInfo(name="r", model="tiny")

    class Interrupted(Detector):  # the real detector, stopped after the clean config (6 frames)
        name = "yolo"

        def __init__(self, inner, budget):
            super().__init__(inner.options)
            self.inner, self.weights, self.budget, self.names = inner, inner.weights, budget, inner.names

        def describe(self):
            return self.inner.describe()

        def predict_windows(self, windows):
            return self.inner.predict_windows(windows)

        def predict(self, images):
            if self.budget <= 0:
                raise KeyboardInterrupt
            self.budget -= len(images)
            return super().predict(images)

    out = tmp_path / "subs" / "r"
    with pytest.raises(KeyboardInterrupt):
        run_detect(Interrupted(base, 4), env / "repo", "sar", out, info, RunOptions(progress=False))
    assert not out.exists() and (staging_for(out) / "parts" / "clean.json").exists()
    fresh = load_detector("yolo", env / "tiny.pt", DetectorOptions(conf=0.0))
    report = run_detect(fresh, env / "repo", "sar", out, info, RunOptions(progress=False))
    assert report["configs_resumed"] == 1 and report["configs_run"] == 1
    assert fresh.stats.frames == 2  # only low_light_s3's two test frames were predicted
    ref = tmp_path / "subs" / "ref"
    run_detect(load_detector("yolo", env / "tiny.pt", DetectorOptions(conf=0.0)), env / "repo", "sar", ref, info,
               RunOptions(progress=False))
    assert pq.read_table(out / "predictions.parquet").equals(pq.read_table(ref / "predictions.parquet"))
    with pytest.raises(BadInput, match="already exists"):
        run_detect(fresh, env / "repo", "sar", ref, info, RunOptions(progress=False))


@pytest.mark.parametrize("case", ["missing_weights", "unknown_detector", "absent_cuda", "not_a_detector",
                                  "tampered_dataset", "bad_track"])
def test_detect_bad_input_exits_2_and_writes_nothing(env, tmp_path, capsys, case):
    import torch
    if case == "absent_cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    repo = env / "repo"
    args = {"weights": "tiny.pt", "detector": "yolo", "track": "sar", "extra": []}
    if case == "missing_weights":
        args["weights"] = "nope.pt"
    elif case == "unknown_detector":
        args["detector"] = "detr"
    elif case == "absent_cuda":
        args["extra"] = ["--device", "cuda:0"]
    elif case == "not_a_detector":
        args["weights"] = "cls.pt"
    elif case == "bad_track":
        args["track"] = "firespread"
    elif case == "tampered_dataset":
        repo = tmp_path / "repo"
        shutil.copytree(env / "repo", repo)
        shard = next(repo.glob("clean/*.parquet"))
        shard.write_bytes(shard.read_bytes()[:-10] + b"0123456789")
    subs = tmp_path / "submissions"
    rc = main(["detect", "--detector", args["detector"], "--weights", str(env / args["weights"]), "--dataset",
               str(repo), "--track", args["track"], "--out", str(subs / "x"), "--team", "t", *FAST, *args["extra"]])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("aegisbench detect: error:")
    assert not subs.exists()


def test_device_auto_falls_back(env, tmp_path):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert _detect(env, tmp_path / "s" / "auto", "sar", "--device", "auto") == 0


# ------------------------------------------------------------------ WARP


def test_warp_detect_smoke_track(env, tmp_path):
    out = tmp_path / "submissions" / "smoke"
    assert _detect(env, out, "smoke") == 0
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"warp": {"noise_levels": [0.1, 0.3], "grid": 5, "images": 1}}))
    assert main(["warp-detect", "--detector", "yolo", "--weights", str(env / "tiny.pt"), "--dataset",
                 str(env / "repo"), "--out", str(out), "--params", str(tmp_path / "p.yaml"), "--grid", "3", *FAST]) == 0
    noise = pq.read_table(out / "warp_noise.parquet")
    assert set(noise.column("config").to_pylist()) <= {"warp_noise_100", "warp_noise_300"}
    t = pq.read_table(out / "warp_patch.parquet")
    assert set(t.column_names) == {"split", "image_id", "position", "row", "col", "x1", "y1", "x2", "y2", "score",
                                   "label"}
    pos = np.asarray(t.column("position").to_pylist())
    assert set(pos.tolist()) == set(range(9))
    assert (np.asarray(t.column("row").to_pylist()) == pos // 3).all()
    assert len(set(t.column("image_id").to_pylist())) == 1
    meta = yaml.safe_load((out / "submission.yaml").read_text())
    assert meta["warp_patch"]["grid"] == 3 and len(meta["warp_patch"]["images"]) == 1  # --grid over --params
    assert meta["warp_noise"] == {"levels": [0.1, 0.3], "noise_at": "model_input"}
    assert main(["validate", str(out), "--dataset", str(env / "repo")]) == 0  # grid read from submission.yaml
    assert main(["evaluate", str(out), "--dataset", str(env / "repo"), "--out", str(tmp_path / "results"),
                 "--n-resamples", "10"]) == 0
    assert list((tmp_path / "results").rglob("warp_patch*")) and list((tmp_path / "results").rglob("warp_noise.json"))
    assert main(["warp-detect", "--detector", "yolo", "--weights", str(env / "tiny.pt"), "--dataset",  # old flag
                 str(env / "repo"), "--out", str(out), "--only", "patch", "--grid", "2", "--max-images", "1", *FAST]) == 0
    assert yaml.safe_load((out / "submission.yaml").read_text())["warp_patch"]["grid"] == 2
    from aegisbench.detectors.warp_runner import run_warp
    with pytest.raises(BadInput, match="submission's own model"):
        run_warp(load_detector("rtdetr", env / "rtdetr.pt"), env / "repo", out)
    with pytest.raises(BadInput, match="smoke track"):
        sar = tmp_path / "submissions" / "sar"
        _detect(env, sar, "sar")
        run_warp(load_detector("yolo", env / "tiny.pt"), env / "repo", sar)


# ------------------------------------------------------------------ reference detector


def test_reference_training_tiny(env, tmp_path, monkeypatch):
    import json
    import socket

    hosts = []

    def no_network(host, *a, **k):  # the machine is offline: record and refuse every lookup
        hosts.append(host)
        raise socket.gaierror("offline")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", lambda self, addr: no_network(addr))

    from aegisbench.detectors.reference import ReferenceParams, crop_labels, export_yolo_dataset

    table = env / "sources" / "synthetic_sar.parquet"
    p = ReferenceParams(epochs=1, max_images=2, crop=128, imgsz=128, batch=4, close_mosaic=0, warmup_epochs=0)
    data = export_yolo_dataset(table, tmp_path / "ds", p)
    labels = [ln.split() for f in (tmp_path / "ds" / "labels" / "train").glob("*.txt")
              for ln in f.read_text().splitlines()]
    assert labels and all(ln[0] == "0" and all(0 <= float(v) <= 1 for v in ln[1:]) for ln in labels)
    assert yaml.safe_load(data.read_text())["names"] == {0: "person"}
    boxes, kept = crop_labels(np.array([[5, 5, 15, 15], [0, 0, 12, 4]], np.float32), (10, 0, 30, 20), 0.5)
    assert boxes.tolist() == [[0, 5, 5, 15]] and kept.tolist() == [True, False]
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["paths"] = {"sources": str(env / "sources"), "dataset": str(env / "repo")}
    raw["reference_detector"] = {"epochs": 5, "max_images": 2, "crop": 128, "imgsz": 128, "batch": 4,
                                 "close_mosaic": 0, "warmup_epochs": 0, "sources": {"synthetic_sar": {"epochs": 1}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    assert main(["train-reference", "--params", str(tmp_path / "params.yaml"), "--source", "synthetic_sar",
                 "--out", str(tmp_path / "ref")]) == 0
    report = json.loads((tmp_path / "ref" / "train.json").read_text())
    assert report["params"]["epochs"] == 1 and report["scores"]["test_images"] == 2
    assert {"test_recall", "test_precision", "test_map50", "threshold"} <= set(report["scores"])
    # scored as the evaluator scores a sar row (every distinct val score), at detect's default tile
    assert (report["scores"]["rule"], report["scores"]["tile"]) == ("scores", 1024)
    # a scoring tile the detector's tiling refuses stops the command before any training
    assert main(["train-reference", "--params", str(tmp_path / "params.yaml"), "--source", "synthetic_sar",
                 "--out", str(tmp_path / "bad"), "--score-tile", "100"]) == 2
    assert not (tmp_path / "bad").exists()
    det = load_detector("yolo", tmp_path / "ref" / "weights.pt")
    assert det.describe()["classes"] == ["person"]
    # nothing is fetched: the only lookup is Ultralytics' optional Arial.ttf check, refused harmlessly
    assert set(hosts) <= {"github.com"}
