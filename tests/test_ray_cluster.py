"""A real two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and a
second node, each its own raylet with one CPU and a small object store): ``build``,
``detect`` and ``evaluate`` through the CLI with ``--ray-address`` give the bytes of a
local one-process run, the run log names both nodes, a node killed mid-build or
mid-detect costs nothing, and a node that differs from the driver is refused."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ray = pytest.importorskip("ray")

from _raykit import STORE, ray_cluster  # noqa: E402
from aegisbench.dataset.verify import verify_repo  # noqa: E402
from aegisbench.cli import main  # noqa: E402
from test_executor import reference_build  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning:ray"), pytest.mark.ray_driver]


@pytest.fixture(scope="module")
def cluster():
    """Head + second node, one CPU each, workers importing this checkout; torn down after."""
    with ray_cluster(extra_nodes=1) as (c, nodes):
        yield c, nodes[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return reference_build(tmp_path_factory.mktemp("cluster"))


@pytest.fixture(scope="module")
def weights(tiny):
    from _detkit import trained_checkpoint  # detect refuses untrained checkpoints
    return trained_checkpoint(ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml", tiny[0] / "tiny.pt")


def _nodes_logged(caplog, what: str) -> set[str]:
    """Node ids of the run log's summary line ``ray: N <what> ... on K node(s): id=count, ...``."""
    found = set()
    for rec in caplog.records:
        m = re.match(rf"ray: \d+ {what}.* on \d+ node\(s\): (.*)$", rec.getMessage())
        if m:
            found |= {part.split("=")[0] for part in m.group(1).split(", ")}
    return found


def _params_file(tiny, tmp_path: Path) -> Path:
    root, params = tiny
    raw = dict(params.raw)
    raw["paths"] = {"sources": str(root / "sources"), "dataset": str(tmp_path / "repo")}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return tmp_path / "params.yaml"


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _processes_mentioning(text: str) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and text.encode() in (p / "cmdline").read_bytes():
                out.append(int(p.name))
        except OSError:
            continue
    return out


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("bash") or not Path("/proc/self/cmdline").exists(), reason="needs bash, /proc")
def test_readme_cluster_recipe_script(tiny, weights, tmp_path):
    """scripts/cluster_smoke.sh: the README's commands with token authentication on a head
    and a second node, then the refusals (wrong token, hidden data path, no aegisbench)."""
    root, params = tiny
    raw = dict(params.raw)
    raw["paths"] = {"sources": "data/sources", "dataset": "aegisbench"}  # the README's layout
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    env = dict(os.environ, PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    run = subprocess.run(["bash", str(ROOT / "scripts" / "cluster_smoke.sh"), str(tmp_path), str(weights)],
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    said = [line for line in run.stderr.splitlines() if line.startswith("cluster_smoke: ")]
    assert said[-1] == "cluster_smoke: OK"
    assert any("refused (wrong token)" in line and "token" in line for line in said)
    assert any("refused (node without aegisbench)" in line and "aegisbench not installed" in line for line in said)
    assert (tmp_path / "aegisbench" / "manifest.json").read_bytes() == (root / "ref" / "manifest.json").read_bytes()
    assert (tmp_path / "results" / "my_yolo" / "provenance.json").is_file()
    temp = said[0].removeprefix("cluster_smoke: temp dir ")
    assert temp.startswith("/tmp/") and not _processes_mentioning(temp) and not Path(temp).exists()


def test_build_detect_evaluate_on_two_nodes_equal_local(cluster, tiny, weights, tmp_path, caplog, capsys):
    c, second = cluster
    root, _ = tiny
    both = {c.head_node.node_id, second.node_id}
    caplog.set_level(logging.INFO, logger="aegisbench")
    on_cluster = ["--executor", "ray", "--ray-address", c.address]

    rc = main(["build", "--params", str(_params_file(tiny, tmp_path)), "--skip-sources", *on_cluster])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "repo" / "manifest.json").read_bytes() == (root / "ref" / "manifest.json").read_bytes()
    assert verify_repo(tmp_path / "repo").ok
    assert _nodes_logged(caplog, "_run_task") == both  # shards ran on the head and on the second node

    caplog.clear()
    common = ["detect", "--detector", "yolo", "--weights", str(weights), "--dataset", str(root / "ref"),
              "--track", "sar", "--batch", "4", "--frames-per-batch", "3", "--no-progress", "--name", "tiny",
              "--team", "test"]
    assert main([*common, "--out", str(tmp_path / "local")]) == 0
    rc = main([*common, "--out", str(tmp_path / "ray"), "--device", "cpu", *on_cluster])
    assert rc == 0, capsys.readouterr().err
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local") and _tree(tmp_path / "local")
    assert _nodes_logged(caplog, "detect job") == both  # one actor per node

    caplog.clear()
    evaluate = ["evaluate", str(tmp_path / "local"), "--dataset", str(root / "ref"), "--n-resamples", "20"]
    assert main([*evaluate, "--results", str(tmp_path / "res_local")]) == 0
    rc = main([*evaluate, "--results", str(tmp_path / "res_ray"), *on_cluster])
    assert rc == 0, capsys.readouterr().err
    assert _tree(tmp_path / "res_ray") == _tree(tmp_path / "res_local") and _tree(tmp_path / "res_local")
    assert _nodes_logged(caplog, "") <= both and _nodes_logged(caplog, "")


# ------------------------------------------------------------------ a node lost mid-run


def _raylet_pid(node) -> int:
    from ray._private import ray_constants
    return node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid


def _titles(raylet: int) -> list[bytes]:
    """Process titles of the workers the raylet ``raylet`` started."""
    out = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == raylet:
                out.append((p / "cmdline").read_bytes().split(b"\0")[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def _lose_node_while(c, node, title: bytes, run, replace: bool = False) -> dict:
    """Run ``run`` in a thread; once a worker of ``node`` titled ``title...`` works, kill the
    node (raylet and workers, SIGKILL) and, with ``replace``, add a fresh node; the outcome
    of ``run`` (``ok`` or ``error``) and the titles seen on the node."""
    import threading
    import time

    outcome: dict = {"seen": set()}

    def target():
        try:
            outcome["ok"] = run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    raylet, deadline = _raylet_pid(node), time.monotonic() + 240
    while t.is_alive() and time.monotonic() < deadline:
        titles = _titles(raylet)
        outcome["seen"].update(titles)
        if any(x.startswith(title) for x in titles):
            break
        time.sleep(0.01)
    outcome["killed"] = t.is_alive() and any(x.startswith(title) for x in _titles(raylet))
    if outcome["killed"]:
        c.remove_node(node, allow_graceful=False)
        if replace:
            c.add_node(num_cpus=1, object_store_memory=STORE)
    t.join(timeout=600)
    return outcome


def _second(c):
    return next(n for n in c.worker_nodes if n is not c.head_node)


@pytest.mark.slow
def test_a_node_lost_mid_build_costs_nothing(cluster, tiny, tmp_path):
    """The second node dies while it runs a shard: the shards are retried on the head, the
    build verifies and its manifest is the uninterrupted build's."""
    from aegisbench.builders.build import build_repo
    from aegisbench.executor import Executor

    c, _ = cluster
    root, params = tiny
    ex = Executor("ray", ray_address=c.address)
    out = _lose_node_while(c, _second(c), b"ray::_run_task",
                           lambda: build_repo(params, out=tmp_path / "lost", progress=False, executor=ex))
    c.add_node(num_cpus=1, object_store_memory=STORE)  # back to two nodes for the next test
    assert out["killed"], f"the build finished before the second node ran a shard: saw {out['seen']}"
    assert "error" not in out, out.get("error")
    assert verify_repo(tmp_path / "lost").ok
    assert (tmp_path / "lost" / "manifest.json").read_bytes() == (root / "ref" / "manifest.json").read_bytes()


@pytest.mark.slow
def test_an_actor_lost_mid_detect_is_replaced(cluster, tiny, weights, tmp_path):
    """The second node dies while its actor predicts a batch; a replacement node joins (as an
    autoscaler would add one) and the actor restarts there: every frame scored exactly once,
    the predictions are the local run's."""
    import pyarrow.parquet as pq

    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect
    from aegisbench.executor import Executor

    c, _ = cluster
    root, _ = tiny
    det = load_detector("yolo", weights, DetectorOptions(batch=4))
    info, run = SubmissionInfo(name="tiny", model="tiny"), RunOptions(frames_per_batch=3, progress=False)
    local = run_detect(det, root / "ref", "sar", tmp_path / "local", info, run)
    ex = Executor("ray", ray_address=c.address)
    out = _lose_node_while(c, _second(c), b"ray::MapWorker(MapBatches(DetectorActor)).submit",
                           lambda: run_detect(det, root / "ref", "sar", tmp_path / "ray", info, run, executor=ex,
                                              device="cpu"), replace=True)
    assert out["killed"], f"detect finished before the second node's actor predicted: saw {out['seen']}"
    assert "error" not in out, out.get("error")
    a, b = pq.read_table(tmp_path / "local" / "predictions.parquet"), pq.read_table(tmp_path / "ray" / "predictions.parquet")
    assert a.num_rows > 0 and a.equals(b)
    assert out["ok"]["frames"] == local["frames"] == 10
