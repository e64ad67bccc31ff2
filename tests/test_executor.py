"""The executor abstraction: validation, ordered streaming, a killed worker process, the
same build bytes for 1 and 2 local workers, and bad ``--executor`` input on the CLI."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import yaml

from aegisbench.builders.build import build_repo
from aegisbench.dataset.verify import verify_repo
from aegisbench.cli import main
from aegisbench.errors import BadInput
from aegisbench.executor import Executor, map_tasks
from _evalkit import materialize, tiny_params as evalkit_params
from aegisbench.params import Params

ROOT = Path(__file__).resolve().parents[1]
TINY_SOURCES = {"synthetic_sar": {"n_train": 0, "n_val": 2, "n_test": 4, "images_per_flight": 1,
                                  "large_fraction": 0.0},
                "synthetic_smoke": {"n_train": 0, "n_val": 1, "n_test": 1, "frames_per_sequence": 3}}
TINY_FIRESPREAD = {"grid": [12, 12], "realizations": 6, "s_levels": [0, 20], "initial_conditions": 2,
                   "test_initial_conditions": [1], "realizations_per_shard": 4}


def tiny_params(root: Path, rows_per_shard: int = 2, firespread: bool = True) -> Params:
    """Two synthetic sources (clean + low_light_s3), a tiny fire-spread section, data
    under ``root``."""
    return evalkit_params(root, TINY_SOURCES, ["low_light_s3"],
                          firespread=TINY_FIRESPREAD if firespread else None, rows_per_shard=rows_per_shard,
                          workers=1)


def reference_build(root: Path) -> tuple[Path, Params]:
    """Source tables and the reference build (local, in-process) of the tiny params."""
    params = tiny_params(root, rows_per_shard=1)
    materialize(params)
    build_repo(params, out=root / "ref", progress=False, executor=Executor("local", 1))
    return root, params


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return reference_build(tmp_path_factory.mktemp("exec"))


# ------------------------------------------------------------------ module-level task functions


def square(x: int) -> int:
    return x * x


def slow_square(x: int) -> int:
    time.sleep(0.02 * (x % 3))  # later tasks finish first sometimes: order must still hold
    return x * x


def fail_on_three(x: int) -> int:
    if x == 3:
        raise BadInput("three is not allowed", where=f"task {x}")
    return x


def mark_unless_zero(args: tuple[str, int]) -> int:
    """Task 0 fails at once; every other task sleeps, then leaves a marker file named after it."""
    folder, x = args
    if x == 0:
        raise BadInput("zero is not allowed", where="task 0")
    time.sleep(0.5)
    Path(folder, str(x)).write_text("done")
    return x


def finished_after_an_error(folder: Path, executor: Executor) -> list[int]:
    """The tasks that ran to their end when ``map_tasks`` raised task 0's error; checked again a
    second later: none may still be running (and writing) once the error has reached the caller."""
    with pytest.raises(BadInput, match="zero is not allowed"):
        list(map_tasks(mark_unless_zero, [(str(folder), i) for i in range(40)], executor))
    done = sorted(int(p.name) for p in folder.iterdir())
    time.sleep(1.0)
    assert sorted(int(p.name) for p in folder.iterdir()) == done, "a task was still running after the error"
    return done


def die_once(args: tuple[str, int]) -> int:
    """Kill this worker process the first time task 2 runs (a marker file records it)."""
    marker, x = args
    if x == 2 and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


# ------------------------------------------------------------------ Executor


@pytest.mark.parametrize("kw, where", [
    ({"kind": "spark"}, "--executor"),
    ({"workers": 0}, "--workers"),
    ({"workers": -2}, "--workers"),
    ({"workers": 1.5}, "--workers"),
    ({"ray_address": "auto"}, "--ray-address"),  # an address needs the ray executor
    ({"kind": "ray", "ray_address": "not an address"}, "--ray-address"),
    ({"kind": "ray", "ray_address": "host:port"}, "--ray-address"),
    ({"max_retries": -1}, "max_retries"),
])
def test_executor_validates(kw, where):
    with pytest.raises(BadInput) as exc:
        Executor(**kw)
    assert exc.value.where == where


def test_executor_accepts_cluster_addresses_and_env_defaults(monkeypatch):
    for addr in ("auto", "10.0.0.5:6379", "head-node:6379", "ray://head:10001", "[::1]:6379"):
        assert Executor("ray", ray_address=addr).ray_address == addr
    monkeypatch.setenv("AEGISBENCH_EXECUTOR", "ray")
    monkeypatch.setenv("AEGISBENCH_WORKERS", "3")
    ex = Executor.from_cli(None, None, None, default_workers=1)
    assert (ex.kind, ex.workers, ex.ray_address) == ("ray", 3, None)
    assert Executor.from_cli("local", 2, None).workers == 2  # flags win over the environment
    monkeypatch.setenv("AEGISBENCH_WORKERS", "many")
    with pytest.raises(BadInput, match="AEGISBENCH_WORKERS"):
        Executor.from_cli(None, None, None)


def test_export_env_hands_the_executor_to_child_commands(monkeypatch):
    from aegisbench.executor import ENV, export_env
    for var in ENV.values():  # recorded by monkeypatch, so whatever export_env sets is undone
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    export_env("local", 3, None)  # what `aegisbench run` does before `dvc repro`
    assert os.environ[ENV["kind"]] == "local" and os.environ[ENV["workers"]] == "3"
    assert ENV["ray_address"] not in os.environ
    assert Executor.from_cli(None, None, None).workers == 3
    with pytest.raises(BadInput, match="--workers"):
        export_env(None, 0, None)


@pytest.mark.parametrize("workers", [1, 2])
def test_map_tasks_keeps_input_order(workers):
    ex = Executor("local", workers)
    assert list(map_tasks(slow_square, range(12), ex)) == [x * x for x in range(12)]


def test_map_tasks_streams_with_bounded_in_flight():
    ex = Executor("local", 2)
    pulled = []

    def tasks():
        for i in range(100):
            pulled.append(i)
            yield i

    it = map_tasks(square, tasks(), ex)
    assert next(it) == 0
    assert len(pulled) <= ex.in_flight + 1  # not the whole input: at most 2 per worker ahead
    assert list(it) == [i * i for i in range(1, 100)]


@pytest.mark.parametrize("workers", [1, 2])
def test_task_errors_surface_as_themselves(workers):
    with pytest.raises(BadInput, match="three is not allowed") as exc:
        list(map_tasks(fail_on_three, range(6), Executor("local", workers)))
    assert exc.value.where == "task 3"


def test_a_task_error_leaves_no_task_running(tmp_path):
    ex = Executor("local", 2)
    done = finished_after_an_error(tmp_path, ex)
    assert set(done) <= set(range(1, ex.in_flight))  # only tasks submitted ahead of task 0 ran


def test_killed_worker_process_is_retried(tmp_path, caplog):
    marker = tmp_path / "died"
    out = list(map_tasks(die_once, [(str(marker), i) for i in range(8)], Executor("local", 2)))
    assert out == [i * 10 for i in range(8)]
    assert marker.exists()  # the worker really died once
    assert "worker process died" in caplog.text
    marker.unlink()
    with pytest.raises(Exception, match="terminated abruptly"):  # no retries left: the crash surfaces
        list(map_tasks(die_once, [(str(marker), i) for i in range(4)], Executor("local", 2, max_retries=0)))


# ------------------------------------------------------------------ builds


def test_two_local_workers_build_the_same_bytes(tiny):
    root, params = tiny
    build_repo(params, out=root / "two", progress=False, executor=Executor("local", 2))
    ref, two = (root / "ref" / "manifest.json").read_bytes(), (root / "two" / "manifest.json").read_bytes()
    assert ref == two
    assert verify_repo(root / "two").ok
    assert any(p.name.startswith("firespread_s") for p in (root / "two").iterdir())  # ensemble blocks ran too


def _pool_children() -> list[int]:
    """Pids of this process's forked children (the pool's workers share our command line)."""
    me, mine = os.getpid(), Path("/proc/self/cmdline").read_bytes()
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == me and (p / "cmdline").read_bytes() == mine:
                out.append(int(p.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_build_survives_a_killed_local_worker(tiny, caplog):
    root, params = tiny
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(m=build_repo(params, out=root / "killed", progress=False,
                                                                   executor=Executor("local", 2))))
    t.start()
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and t.is_alive() and time.monotonic() < deadline:
        kids = _pool_children()
        if kids:
            time.sleep(0.1)  # let it get into its shards
            os.kill(kids[0], signal.SIGKILL)
            killed = kids[0]
        time.sleep(0.01)
    t.join(timeout=120)
    assert killed is not None, "the build finished before a worker could be killed"
    assert "m" in result and verify_repo(root / "killed").ok
    assert (root / "killed" / "manifest.json").read_bytes() == (root / "ref" / "manifest.json").read_bytes()
    assert "worker process died" in caplog.text


# ------------------------------------------------------------------ CLI bad input


def _params_file(root: Path) -> Path:
    params = tiny_params(root, firespread=False)
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params.raw, sort_keys=False))
    return path


@pytest.mark.parametrize("extra, needle", [
    (["--executor", "foo"], "--executor: unknown executor 'foo'"),
    (["--workers", "0"], "--workers: workers must be an integer >= 1, got 0"),
    (["--ray-address", "auto"], "--ray-address needs --executor ray"),
])
def test_build_rejects_bad_executor_and_writes_nothing(tmp_path, monkeypatch, capsys, extra, needle):
    monkeypatch.chdir(tmp_path)
    params = _params_file(tmp_path)
    capsys.readouterr()
    rc = main(["build", "--params", str(params), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # no sources, no repo


def test_unreachable_ray_address_is_one_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray")
    import ray
    if ray.is_initialized():
        pytest.skip("a Ray is already initialized in this process")
    monkeypatch.chdir(tmp_path)
    params = _params_file(tmp_path)
    capsys.readouterr()
    t = time.monotonic()
    rc = main(["build", "--params", str(params), "--executor", "ray", "--ray-address", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--ray-address: cannot reach a Ray cluster at" in err
    assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - t < 30 and not ray.is_initialized()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_detect_and_evaluate_reject_bad_executor(tmp_path, capsys):
    rc = main(["detect", "--detector", "yolo", "--weights", "w.pt", "--dataset", str(tmp_path / "none"),
               "--track", "sar", "--out", str(tmp_path / "sub"), "--team", "t", "--executor", "foo"])
    err = capsys.readouterr().err
    assert rc == 2 and "--executor: unknown executor 'foo'" in err and len(err.strip().splitlines()) == 1
    rc = main(["evaluate", str(tmp_path / "sub"), "--dataset", str(tmp_path / "none"), "--workers", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "--workers" in err and len(err.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_local_workers_fork_outside_a_ray_driver():
    import sys

    from aegisbench.executor import start_method
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        pytest.skip("Ray is initialized in this process (its driver tests ran here)")
    assert start_method() is None  # the platform's default start method: fork on Linux
