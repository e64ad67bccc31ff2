"""Publication of folders under attack (``aegisbench.atomic``): the output path holds a complete
version at every moment, a writer killed between its steps leaves one on disk and the next
writer removes what it left, a reader never takes an absent result for "no data", and
``dvc repro`` keeps the last good results of a submission that turns invalid."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from _hostilekit import files_of, wait_for
from aegisbench.atomic import PAUSE_ENV, clean_leftovers, leftovers, lock_path, output_lock, replace_dir
from aegisbench.staging import staged_dir
from aegisbench.cli import main
from aegisbench.leaderboard.results import snapshot
from test_leaderboard import EV, fake_dataset, hand_results, hand_rows, write_result  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]


def test_swaps_never_show_an_absent_or_mixed_folder(tmp_path):
    """A reader hammering the output while it is republished 80 times: every read finds the
    folder, and every snapshot holds files of one version."""
    final = tmp_path / "out"
    with staged_dir(final) as d:
        (d / "a").write_text("0")
        (d / "b").write_text("0")
    stop, problems, seen, reads = threading.Event(), [], set(), [0]

    def reader():
        while not stop.is_set():
            try:
                (final / "a").read_text()  # by path: the folder is always there
                files = snapshot(final, ("a", "b"))
                if files["a"] is None or files["a"] != files["b"]:
                    problems.append(files)
                seen.add(files["a"])
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                problems.append(repr(exc))
            reads[0] += 1

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(1, 81):
            before = reads[0]
            with staged_dir(final) as d:
                (d / "a").write_text(str(i))
                (d / "b").write_text(str(i))
            # under load the scheduler may keep the reader off the CPU for all 80 swaps (a CI
            # run on 2 cores saw only the last version): give it a read between swaps
            wait_for(lambda: reads[0] > before, None)
    finally:
        stop.set()
        thread.join()
    assert not problems, problems[:3]
    assert len(seen) > 1  # the reader really read across swaps
    assert files_of(final) == {"a": b"80", "b": b"80"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no side copy, no lock file


def test_leaderboard_killed_mid_swap_keeps_the_old_one_and_the_next_run_cleans(hand_results, tmp_path):
    data, out = fake_dataset(tmp_path / "data"), tmp_path / "lb"
    args = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--out", str(out),
            "--evaluator-version", EV]
    assert main(args) == 0
    before = files_of(out)
    write_result(hand_results, "d", [{**r, "submission": "d"} for r in hand_rows("c")], model="Delta")
    proc = subprocess.Popen([sys.executable, "-m", "aegisbench.cli", *args], env={**os.environ, PAUSE_ENV: "60"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: [p for p, kind, pid in leftovers(out) if kind == "new" and pid == proc.pid], proc)
    proc.kill()  # SIGKILL: the new leaderboard is complete beside the published one, not yet swapped in
    proc.wait()
    assert files_of(out) == before  # the published version, whole
    assert main(args) == 0  # the next writer
    assert "Delta" in (out / "README.md").read_text()
    assert leftovers(out) == [] and not lock_path(out).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "lb", "results"]


def test_killed_in_the_two_rename_gap_a_reader_restores_the_last_version(hand_results, tmp_path, capsys):
    """The fallback swap (file systems without exchange) has a gap with the output absent.
    A writer alive in it makes the leaderboard fail loudly naming its PID; once it is killed,
    the leaderboard puts the last version back and merges it: no row is dropped."""
    data, target = fake_dataset(tmp_path / "data"), hand_results / "c"
    old = files_of(target)
    staging = tmp_path / "new_c"
    write_result(tmp_path, "new_c", [{**r, "submission": "c"} for r in hand_rows("c")], model="Charlie v2")
    code = ("from aegisbench.atomic import output_lock, replace_dir\n"  # a writer as the evaluator is: locked
            f"with output_lock({str(target)!r}):\n    replace_dir({str(staging)!r}, {str(target)!r}, exchange=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, PAUSE_ENV: "60"})
    wait_for(lambda: not target.exists() and any(kind == "old" for _, kind, _ in leftovers(target)), proc)
    lb = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--evaluator-version", EV]
    assert main([*lb, "--out", str(tmp_path / "lb1")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"PID {proc.pid}" in err[0] and str(target) in err[0], err
    assert not (tmp_path / "lb1").exists()
    proc.kill()
    proc.wait()
    side = [p for p, kind, _ in leftovers(target) if kind == "old"]
    assert len(side) == 1 and files_of(side[0]) == old  # a complete version is on disk
    assert main([*lb, "--out", str(tmp_path / "lb2")]) == 0
    assert "3 results merged" in capsys.readouterr().out
    assert files_of(target) == old and leftovers(target) == []
    assert sorted(p.name for p in hand_results.iterdir()) == ["a", "b", "c"]


def test_broken_result_link_fails_the_leaderboard(hand_results, tmp_path, capsys):
    (hand_results / "ghost").symlink_to(tmp_path / "nowhere")
    rc = main(["leaderboard", "--results", str(hand_results), "--dataset", str(fake_dataset(tmp_path / "data")),
               "--out", str(tmp_path / "lb"), "--evaluator-version", EV])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "ghost" in err[0] and "broken link" in err[0]
    assert not (tmp_path / "lb").exists()


def test_leftovers_of_dead_writers_go_those_of_live_ones_stay(tmp_path):
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    final = tmp_path / "site"
    try:
        for tag in ("staging", "new", "trash", "old"):
            (tmp_path / f".site.{tag}-{dead}").mkdir()
            (tmp_path / f".site.{tag}-{dead}" / "index.html").write_text(tag)
        (tmp_path / f".site.staging-{live.pid}").mkdir()
        (tmp_path / ".site.detect-partial").mkdir()  # a resumable folder: not a leftover
        code = ("import os, sys; from aegisbench.atomic import atomic_path\n"
                "with atomic_path(sys.argv[1]) as tmp:\n    tmp.write_text('half'); os._exit(9)")
        killed = subprocess.run([sys.executable, "-c", code, str(tmp_path / "site.json")])
        assert killed.returncode == 9
        tmp_file = [p for p, kind, pid in leftovers(tmp_path / "site.json") if kind == "tmp"]
        assert len(tmp_file) == 1 and tmp_file[0].read_text() == "half"
        with output_lock(final):
            clean_leftovers(final)
            clean_leftovers(tmp_path / "site.json")
        assert (final / "index.html").read_text() == "old"  # absent output: its old copy put back
        assert sorted(p.name for p in tmp_path.iterdir()) == [".site.detect-partial", f".site.staging-{live.pid}",
                                                               "site"]
    finally:
        live.kill()
        live.wait()


def test_old_layout_and_first_publication(tmp_path):
    """A real folder published by an older version is replaced in one swap; a first
    publication is one rename; the old copy is gone afterwards in both modes."""
    final = tmp_path / "repo"
    final.mkdir()
    (final / "old.txt").write_text("old")
    for exchange, text in ((True, "one"), (False, "two")):
        staging = tmp_path / f".repo.staging-{text}"
        staging.mkdir()
        (staging / "new.txt").write_text(text)
        with output_lock(final):
            replace_dir(staging, final, exchange=exchange)
        assert files_of(final) == {"new.txt": text.encode()}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


# ------------------------------------------------------------------ dvc repro


def _project_stages() -> dict:
    """The project's digest, evaluate and leaderboard stages as written in dvc.yaml (code deps
    left out: the code is installed, not copied; the references of the default, their
    training seeds, the preview grids and the calibration report are not here)."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = {}
    for name in ("digest", "evaluate", "leaderboard"):
        spec = stages[name]
        body = spec.get("do", spec)
        body["deps"] = [d for d in body["deps"] if not str(d).startswith("src/aegisbench/")
                        and d not in ("data/preview", "calibration/report.json", "seeds")]
        body["cmd"] = re.sub(r"\s*--(reference|preview|calibration|seeds) \S+", "", body["cmd"])
        out[name] = spec
    return out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_dvc_repro_keeps_last_good_results_of_a_submission_turned_invalid(tmp_path):
    pytest.importorskip("dvc")
    from _evalkit import gt_table, write_submission
    from aegisbench.builders.build import build_repo
    from aegisbench.dataset.index import DatasetIndex
    from test_repo import tiny_params

    repo = tmp_path / "project"
    stages = _project_stages()
    assert stages["evaluate"]["do"]["outs"] == [{"results/${item}": {"persist": True}}]
    build_repo(tiny_params(tmp_path), out=repo / "aegisbench", progress=False)
    index = DatasetIndex(repo / "aegisbench")
    for i, sub in enumerate(("alpha", "bravo")):
        write_submission(repo / "submissions" / sub, index, "sar", gt_table(index, "sar", score=0.9 - 0.2 * i))
    (repo / "params.yaml").write_text(yaml.safe_dump({"submissions": ["alpha", "bravo"], "warp": {"grid": 7},
                                                      "evaluation": {"n_resamples": 20}}))
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path),
           "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def dvc(*args, ok=True):
        proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=300)
        assert (proc.returncode == 0) == ok, f"{args} -> {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout + proc.stderr

    subprocess.run(["git", "init", "-q"], cwd=repo, env=env, check=True)
    dvc("init", "-q")
    dvc("repro")
    good = files_of(repo / "results" / "alpha")
    board = {name: files_of(repo / name) for name in ("leaderboard", "metrics", "plots")}
    assert "alpha" in board["leaderboard"]["README.md"].decode()
    (repo / "submissions" / "alpha" / "predictions.parquet").write_bytes(b"not parquet")
    failed = dvc("repro", ok=False)
    assert "evaluate@alpha" in failed and "predictions.parquet" in failed
    assert files_of(repo / "results" / "alpha") == good  # the last good results, byte for byte
    assert {name: files_of(repo / name) for name in ("leaderboard", "metrics", "plots")} == board
    assert sorted(p.name for p in (repo / "results").iterdir() if p.name != ".gitignore") == ["alpha", "bravo"]
