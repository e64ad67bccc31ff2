"""The reference models are byte-reproducible: the same recipe on the same data gives the
same weights file whatever the output path, torch's thread setting or a competing CPU
load (issue 16, item 6)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from contextlib import contextmanager

from pathlib import Path

import numpy as np
import pytest
import torch

import aegisbench

from aegisbench.detectors.interface import load_detector
from aegisbench.detectors.reference import ReferenceParams, train_reference
from aegisbench.hashing import file_sha256
from _evalkit import materialize, tiny_params

TINY = {"synthetic_sar": {"n_train": 3, "n_val": 2, "n_test": 2, "images_per_flight": 1, "large_fraction": 0.0},
        "synthetic_smoke": {"n_train": 1, "n_val": 1, "n_test": 1}}


def _spin(stop_at: float) -> None:
    x = 0.0
    while time.time() < stop_at:
        x += np.sqrt(np.arange(20_000, dtype=np.float64)).sum()


@contextmanager
def cpu_load(seconds: float = 600.0):
    """One busy process per core, stopped on exit."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_spin, args=(time.time() + seconds,), daemon=True)
             for _ in range(os.cpu_count() or 2)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


@contextmanager
def torch_threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("repro")
    materialize(tiny_params(root, TINY, ["low_light_s3"]))
    return root / "sources" / "synthetic_sar.parquet"


def test_reference_detector_weights_are_byte_identical_under_load(source, tmp_path):
    p = ReferenceParams(epochs=2, max_images=3, crop=96, imgsz=96, batch=4, close_mosaic=1, warmup_epochs=0)
    first = train_reference(source, tmp_path / "a" / "ref", p, score=False)
    with cpu_load(), torch_threads(2):
        second = train_reference(source, tmp_path / "elsewhere" / "deeper" / "ref", p, score=False)
    a, b = tmp_path / "a" / "ref", tmp_path / "elsewhere" / "deeper" / "ref"
    # the output is the weights and the report, and nothing of the work folder
    assert sorted(f.name for f in a.iterdir()) == ["train.json", "weights.pt"]
    assert not list((tmp_path / "a").glob(".train-*"))
    assert file_sha256(a / "weights.pt") == file_sha256(b / "weights.pt") == first["weights_sha256"]
    assert (a / "train.json").read_bytes() == (b / "train.json").read_bytes()
    assert first["torch_threads"] == second["torch_threads"] == 1 and "train_seconds" in second
    # no machine path survives in the checkpoint, and it still loads as a trained detector
    raw = (a / "weights.pt").read_bytes()
    assert str(tmp_path).encode() not in raw and b"/tmp" not in raw
    # nor the checkout's own path (Ultralytics records the model YAML's absolute path)
    assert str(Path(aegisbench.__file__).resolve().parent).encode() not in raw
    assert load_detector("yolo", a / "weights.pt").describe()["classes"] == ["person"]


def _side_by_side_params(root: Path) -> Path:
    import yaml

    raw = dict(tiny_params(root, TINY, ["low_light_s3"]).raw)
    raw["reference_detector"] = {"epochs": 2, "max_images": 3, "crop": 96, "imgsz": 96, "batch": 4,
                                 "close_mosaic": 1, "warmup_epochs": 0,
                                 "sources": {"synthetic_smoke": {"epochs": 1, "crop": 128, "imgsz": 128}}}
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_trainings_side_by_side_give_the_weights_of_a_run_alone(source, tmp_path):
    """``train-reference --jobs 2`` with two sources (the pipeline's stage): each child's
    weights equal those of the same recipe trained alone in this process."""
    from aegisbench.cli import main
    from aegisbench.detectors.train_jobs import TrainJob, train_one

    params = _side_by_side_params(source.parent.parent)
    both = ["--source", "synthetic_sar", "--out", str(tmp_path / "sar"),
            "--source", "synthetic_smoke", "--out", str(tmp_path / "smoke")]
    assert main(["train-reference", "--params", str(params), "--jobs", "2", "--no-score", *both]) == 0
    for name, out in (("synthetic_sar", "sar"), ("synthetic_smoke", "smoke")):
        alone = train_one(str(params), TrainJob(name, str(tmp_path / "alone" / out), score=False))
        assert file_sha256(tmp_path / out / "weights.pt") == alone["weights_sha256"], name
        assert (tmp_path / out / "train.json").read_bytes() == (tmp_path / "alone" / out / "train.json").read_bytes()
    assert json.loads((tmp_path / "smoke" / "train.json").read_text())["params"]["epochs"] == 1


def test_side_by_side_bad_input_trains_nothing(source, tmp_path, capsys):
    from aegisbench.cli import main

    params = _side_by_side_params(source.parent.parent)
    base = ["train-reference", "--params", str(params), "--jobs", "2"]
    # one --out short, a source without a table, the same folder twice: exit 2, one line, nothing written
    for argv, says in (
            (["--source", "synthetic_sar", "--source", "synthetic_smoke", "--out", str(tmp_path / "a")], "--out"),
            (["--source", "synthetic_sar", "--out", str(tmp_path / "a"), "--source", "nosuch",
              "--out", str(tmp_path / "b")], "nosuch.parquet"),
            (["--source", "synthetic_sar", "--out", str(tmp_path / "a"), "--source", "synthetic_smoke",
              "--out", str(tmp_path / "a")], "another output of the command")):
        assert main(base + argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
        assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_convlstm_weights_are_byte_identical_under_load():
    from aegisbench.forecasters.convlstm import ConvLSTMConfig, train_convlstm

    rng = np.random.default_rng(3)
    tau = rng.integers(0, 12, (4, 16, 16)).astype(np.float32)  # ignition times of 4 realizations
    tree = (rng.random((16, 16)) < 0.7).astype(np.float32)
    train = {50: {0: (tau, tree)}, 80: {1: (tau[::-1].copy(), tree)}}
    cfg = ConvLSTMConfig(steps=6, hidden=4, batch=3, train_horizon=6, device="cpu")

    def weights() -> list[bytes]:
        net = train_convlstm(train, 3, cfg)
        return [v.numpy().tobytes() for v in net.state_dict().values()]

    with torch_threads(1):
        alone = weights()
    with cpu_load(), torch_threads(2):
        loaded = weights()
    assert alone == loaded
    assert torch.get_num_threads() >= 1  # the caller's thread setting is restored
