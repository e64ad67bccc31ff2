"""Ray as the distributed engine, on a real local Ray started here (``ray.init(num_cpus=2)``):
the same build bytes as the local executor, a Ray worker killed mid-build, task retries
and errors, and Ray Data detection equal to the local detect."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

ray = pytest.importorskip("ray")

from aegisbench.builders.build import build_repo  # noqa: E402
from aegisbench.dataset.verify import verify_repo  # noqa: E402
from aegisbench.cli import main  # noqa: E402
from aegisbench.detectors.interface import DetectorOptions, load_detector  # noqa: E402
from aegisbench.detectors.ray_runner import plan_jobs  # noqa: E402
from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect, track_splits  # noqa: E402
from aegisbench.errors import BadInput  # noqa: E402
from aegisbench.executor import Executor, map_tasks  # noqa: E402
from test_executor import (die_once, fail_on_three, finished_after_an_error, reference_build,  # noqa: E402
                           slow_square)

ROOT = Path(__file__).resolve().parents[1]
RAY = Executor("ray", workers=2)
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:ray"), pytest.mark.ray_driver]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """A real local Ray for this module, torn down after it."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                                      os.environ.get("PYTHONPATH", "")])}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return reference_build(tmp_path_factory.mktemp("ray"))


def _manifest(path: Path) -> bytes:
    return (path / "manifest.json").read_bytes()


# ------------------------------------------------------------------ tasks


def test_ray_tasks_keep_order_retry_a_dead_worker_and_raise_task_errors(tmp_path):
    assert list(map_tasks(slow_square, range(10), RAY)) == [x * x for x in range(10)]
    marker = tmp_path / "died"
    assert list(map_tasks(die_once, [(str(marker), i) for i in range(5)], RAY)) == [0, 10, 20, 30, 40]
    assert marker.exists()  # task 2's worker was killed once and the task ran again
    with pytest.raises(BadInput, match="three is not allowed"):
        list(map_tasks(fail_on_three, range(6), RAY))


def test_a_task_error_waits_for_the_tasks_in_flight_and_cancels_none(tmp_path):
    """The tasks submitted ahead of a failing one run to their end before the error reaches the
    caller, as the local pool's; none is cancelled (``ray.cancel`` racing a task's reply ended the
    driver: Ray 2.60's "Tried to complete task that was not pending", CI stop 44)."""
    assert finished_after_an_error(tmp_path, RAY) == list(range(1, RAY.in_flight))
    for _ in range(10):  # the failing map many times over: the driver survives every one
        with pytest.raises(BadInput, match="three is not allowed"):
            list(map_tasks(fail_on_three, range(6), RAY))


# ------------------------------------------------------------------ build


def test_ray_build_is_byte_identical_to_local(tiny):
    root, params = tiny
    build_repo(params, out=root / "on_ray", progress=False, executor=RAY)
    assert verify_repo(root / "on_ray").ok
    assert _manifest(root / "on_ray") == _manifest(root / "ref")
    build_repo(params, out=root / "two", progress=False, executor=Executor("local", 2))
    assert _manifest(root / "two") == _manifest(root / "ref")


def test_local_workers_of_a_ray_driver_are_spawned_not_forked(tmp_path):
    """A fork would copy this driver's Ray core worker into each local worker (CI, issue 36: the
    driver then died with exit 1 in the local build above); spawned workers leave it alone."""
    from aegisbench.executor import start_method
    from test_executor import square

    assert ray.is_initialized() and start_method() == "spawn"
    for _ in range(3):
        assert list(map_tasks(square, range(6), Executor("local", 2))) == [x * x for x in range(6)]
    assert list(map_tasks(slow_square, range(4), RAY)) == [0, 1, 4, 9]  # the driver is still connected


def _running_build_tasks() -> list[int]:
    """Pids of Ray workers executing a build shard right now (Ray titles them ``ray::_run_task``)."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if (p / "cmdline").read_bytes().startswith(b"ray::_run_task"):
                    out.append(int(p.name))
            except OSError:
                continue
    return out


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_build_completes_when_a_ray_worker_is_killed_mid_build(tiny):
    root, params = tiny
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(m=build_repo(params, out=root / "killed", progress=False,
                                                                   executor=RAY)))
    t.start()
    killed = None
    deadline = time.monotonic() + 90
    while killed is None and t.is_alive() and time.monotonic() < deadline:
        pids = _running_build_tasks()
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.005)
    t.join(timeout=180)
    assert killed is not None, "the build finished before a worker could be killed"
    assert "m" in result, "the build did not complete"
    assert verify_repo(root / "killed").ok
    assert _manifest(root / "killed") == _manifest(root / "ref")


def test_cli_build_on_ray_uses_the_running_ray(tiny, tmp_path, monkeypatch, capsys):
    root, params = tiny
    raw = dict(params.raw)
    raw["paths"] = {"sources": str(root / "sources"), "dataset": str(tmp_path / "repo")}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    rc = main(["build", "--params", "params.yaml", "--skip-sources", "--executor", "ray"])
    assert rc == 0, capsys.readouterr().err
    assert _manifest(tmp_path / "repo") == _manifest(root / "ref")
    assert ray.is_initialized()


# ------------------------------------------------------------------ detect


@pytest.fixture(scope="module")
def weights(tiny):
    root, _ = tiny
    from _detkit import trained_checkpoint  # detect refuses untrained checkpoints
    return trained_checkpoint(ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml", root / "tiny.pt")


def test_jobs_are_the_loader_batches(tiny):
    root, _ = tiny
    manifest = yaml.safe_load(_manifest(root / "ref"))
    plan = track_splits(manifest, "sar")
    jobs = plan_jobs(root / "ref", manifest, plan, plan, frames_per_batch=4)
    assert [(j.tag, len(j.image_ids)) for j in jobs] == [
        (("clean", "synthetic_sar"), 4), (("clean", "synthetic_sar_val"), 2), (("low_light_s3", "synthetic_sar"), 4)]
    assert all(len(j.rows) == len(j.image_ids) for j in jobs)  # one image per shard here: rows span shards


def test_ray_data_detect_equals_local_detect(tiny, weights, tmp_path, capsys):
    """The default score floor (0.001) keeps ~300 boxes per frame of the untrained net and
    Ultralytics' NMS far from its wall-clock limit (past it, later frames of a batch
    would lose their boxes, timing-dependently)."""
    root, _ = tiny
    det = load_detector("yolo", weights, DetectorOptions(batch=4))
    info = SubmissionInfo(name="tiny", model="tiny")
    run = RunOptions(frames_per_batch=3, progress=False)
    local = run_detect(det, root / "ref", "sar", tmp_path / "local", info, run)
    on_ray = run_detect(det, root / "ref", "sar", tmp_path / "ray", info, run, executor=RAY)
    a, b = pq.read_table(tmp_path / "local" / "predictions.parquet"), pq.read_table(tmp_path / "ray" / "predictions.parquet")
    assert a.num_rows > 0 and a.equals(b)
    assert (tmp_path / "local" / "submission.yaml").read_bytes() == (tmp_path / "ray" / "submission.yaml").read_bytes()
    assert on_ray["frames"] == local["frames"] == 10 and on_ray["windows"] == local["windows"]
    assert main(["validate", str(tmp_path / "ray"), "--dataset", str(root / "ref")]) == 0


def test_cli_detect_on_ray(tiny, weights, tmp_path, capsys):
    root, _ = tiny
    common = ["detect", "--detector", "yolo", "--weights", str(weights), "--dataset", str(root / "ref"),
              "--track", "sar", "--batch", "4", "--frames-per-batch", "3", "--no-progress", "--name", "tiny", "--team", "test team"]
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    rc = main([*common, "--out", str(tmp_path / "ray"), "--executor", "ray", "--device", "auto"])
    assert rc == 0, capsys.readouterr().err
    for name in ("predictions.parquet", "submission.yaml"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


def test_evaluate_on_workers_and_ray_equals_in_process(tiny, weights, tmp_path):
    from aegisbench.evaluation.bootstrap import BootstrapParams
    from aegisbench.dataset.index import DatasetIndex
    from aegisbench.evaluation.evaluator import EvaluationParams, evaluate
    from aegisbench.evaluation.submission import validate_submission

    root, _ = tiny
    det = load_detector("yolo", weights, DetectorOptions(batch=4))
    run_detect(det, root / "ref", "smoke", tmp_path / "smoke", SubmissionInfo(name="s", model="tiny"),
               RunOptions(progress=False))
    index = DatasetIndex(root / "ref")
    params = EvaluationParams(bootstrap=BootstrapParams(n_resamples=20))
    sub = validate_submission(tmp_path / "smoke", index, params.limits, params.warp_grid)
    evs = [evaluate(sub, index, params, executor=ex) for ex in (Executor("local", 1), Executor("local", 2), RAY)]
    for ev in evs[1:]:
        assert ev.metrics.equals(evs[0].metrics) and ev.per_image.equals(evs[0].per_image)
        assert ev.provenance == evs[0].provenance and ev.documents == evs[0].documents
    assert evs[0].metrics.num_rows > 0
