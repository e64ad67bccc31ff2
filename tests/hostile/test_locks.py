"""One writer per output and workers that die with their parent, under load: a second writer
of the same ``--out`` is refused with one line naming the holder's PID; concurrent
evaluations of different submissions write what sequential ones write; ``kill -9`` of a
build leaves no pool worker behind (and no lock held)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from _hostilekit import files_of, wait_for
from aegisbench.atomic import PAUSE_ENV, leftovers, lock_path, output_lock
from aegisbench.dataset.manifest import load_manifest
from aegisbench.dataset.verify import verify_repo
from aegisbench.builders.source_table import write_source_table
from aegisbench.cli import main
from test_leaderboard import EV, fake_dataset, hand_results  # noqa: F401
from test_repo import make_records

CLI = [sys.executable, "-m", "aegisbench.cli"]


def _params(tmp_path: Path, counts=(("train", 2), ("val", 5), ("test", 9)), size=(40, 56)) -> Path:
    write_source_table(make_records(counts=counts, size=size), tmp_path / "sources" / "demo.parquet")
    path = tmp_path / "params.yaml"
    path.write_text(textwrap.dedent(f"""
        benchmark_version: 0.1.0
        paths: {{sources: {tmp_path / 'sources'}, dataset: {tmp_path / 'repo'}}}
        build: {{rows_per_shard: 1}}
        sources: {{demo: {{track: sar, kind: synthetic_sar, license: mit}}}}
    """))
    return path


def test_second_leaderboard_on_one_out_is_refused_naming_the_holder(hand_results, tmp_path):
    out = tmp_path / "lb"
    args = [*CLI, "leaderboard", "--results", str(hand_results), "--dataset", str(fake_dataset(tmp_path / "data")),
            "--out", str(out), "--evaluator-version", EV]
    with output_lock(out):
        refused = subprocess.run(args, capture_output=True, text=True)
    err = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(err) == 1, refused.stderr
    assert f"PID {os.getpid()}" in err[0] and str(out) in err[0] and ".lb.lock" in err[0]
    assert not out.exists() and not lock_path(out).exists()
    assert main(args[len(CLI):]) == 0  # free again: it runs


def test_two_concurrent_builds_one_winner_one_refusal(tmp_path, capsys):
    """One build in a subprocess, held at its publication; the same ``build`` through the
    CLI in this process meanwhile is refused at once; the first completes."""
    args = ["build", "--params", str(_params(tmp_path)), "--skip-sources"]
    assert main(args) == 0
    first = load_manifest(tmp_path / "repo")
    capsys.readouterr()
    winner = subprocess.Popen([*CLI, *args], env={**os.environ, PAUSE_ENV: "3"}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    # the winner holds the lock and has its complete repo beside the published one
    wait_for(lambda: [p for p, kind, pid in leftovers(tmp_path / "repo") if kind == "new" and pid == winner.pid],
           winner)
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    _, err = winner.communicate(timeout=120)
    assert winner.returncode == 0, err
    assert len(lines) == 1, lines
    assert f"another run (PID {winner.pid}) is writing this output" in lines[0] and str(tmp_path / "repo") in lines[0]
    assert verify_repo(tmp_path / "repo").ok and load_manifest(tmp_path / "repo") == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml", "repo", "sources"]


def test_concurrent_evaluations_write_what_sequential_ones_write(tmp_path):
    from _evalkit import gt_table, write_submission
    from aegisbench.builders.build import build_repo
    from aegisbench.dataset.index import DatasetIndex
    from test_repo import tiny_params

    build_repo(tiny_params(tmp_path), progress=False)
    index = DatasetIndex(tmp_path / "repo")
    subs = [write_submission(tmp_path / "subs" / f"s{i}", index, "sar", gt_table(index, "sar", score=0.9 - 0.1 * i))
            for i in range(3)]
    common = ["--dataset", str(tmp_path / "repo"), "--n-resamples", "50"]
    for sub in subs:
        assert main(["evaluate", str(sub), "--out", str(tmp_path / "seq"), *common]) == 0
    procs = [subprocess.Popen([*CLI, "evaluate", str(sub), "--out", str(tmp_path / "par"), *common],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for sub in subs]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert files_of(tmp_path / "par") == files_of(tmp_path / "seq")
    assert sorted(p.name for p in (tmp_path / "par").iterdir()) == ["s0", "s1", "s2"]  # no lock, no side copy


def _descendants(pid: int) -> list[int]:
    try:
        import psutil
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except ImportError:  # /proc: children whose parent is pid
        out = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
        return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_pool_workers_die_with_a_killed_build(tmp_path):
    cmd = [*CLI, "build", "--params", str(_params(tmp_path, (("val", 30), ("test", 90)), (160, 200))),
           "--skip-sources", "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = wait_for(lambda: (lambda kids: kids if len(kids) >= 2 else None)(_descendants(proc.pid)), proc)
    wait_for(lambda: list(tmp_path.glob(".repo.staging-*/.shards/*.json")), proc)  # the workers are at work
    proc.kill()  # SIGKILL: no handler runs in the parent
    proc.wait()
    deadline = time.time() + 5
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)], "pool workers outlived their killed parent"
    rerun = subprocess.run(cmd, capture_output=True, text=True)  # the lock went with them
    assert rerun.returncode == 0, rerun.stderr
    assert verify_repo(tmp_path / "repo").ok
