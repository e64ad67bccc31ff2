"""``aegisbench worker --ray-address`` (issue 30 item 4): a worker that scores each submission's
sources on a Ray cluster (a real one-node ``ray.cluster_utils.Cluster`` on this machine) writes
the same results as ``aegisbench evaluate`` in one process; an address where no cluster listens
is refused in one line (exit 2) before the worker takes a job."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

ray = pytest.importorskip("ray")

from _raykit import ray_cluster  # noqa: E402
from _servicekit import (Server, Worker, add_team, cli, files_of, free_port, gt_submission,  # noqa: E402
                         make_project, upload, wait_final)
from aegisbench.evaluation.bootstrap import BootstrapParams  # noqa: E402
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray")


@pytest.fixture(scope="module")
def cluster():
    with ray_cluster() as (c, _):
        yield c


def test_a_worker_on_ray_scores_like_evaluate(tmp_path, repo, index, cluster):
    root = make_project(tmp_path / "proj", repo)
    token = add_team(root, "Ray Lab")
    server = Server(root)
    worker = Worker(root, extra=["--ray-address", cluster.address])
    try:
        sid = upload(server, token, files_of(gt_submission(tmp_path / "r", index, name="on ray"))).json()["id"]
        assert wait_final(server, token, sid, 180)["status"] == "scored"
    finally:
        worker.stop()
        server.stop()
    assert "ray:" in worker.tail()  # the run log names where the sources were scored
    stored = root / "hosted" / "store" / "submissions" / sid
    shutil.copytree(stored, tmp_path / "local" / sid)
    local = evaluate_submission(tmp_path / "local" / sid, repo, tmp_path / "local-results",
                                EvaluationParams(bootstrap=BootstrapParams(n_resamples=20), warp_grid=3))
    served = pl.read_parquet(root / "hosted" / "store" / "results" / sid / "metrics.parquet")
    assert served.equals(pl.read_parquet(local / "metrics.parquet"))


def test_an_unreachable_cluster_is_refused_before_any_job(tmp_path, repo):
    root = make_project(tmp_path / "proj", repo)
    port = free_port()
    done = cli("worker", "--project", str(root), "--no-verify", "--ray-address", f"127.0.0.1:{port}", check=False,
               timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        f"aegisbench worker: error: --ray-address: cannot reach a Ray cluster at 127.0.0.1:{port} (")
    assert not Path(root / "hosted" / "store" / "ledger.jsonl").exists()
