"""`aegisbench run`'s stage scheduler on a real DVC project in a temporary git repository:
independent stages run side by side (the longest chain first), every stage ends in
dvc.lock exactly as one `dvc repro` records it, a second run does nothing, a changed
parameter reruns exactly its stage and what depends on it, and a failing stage stops the
run, interrupting the stage beside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from aegisbench.pipeline.schedule import Plan, load_plan, run_plan

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

# each stage stamps its start and end (seconds) into its own file under t/, then writes its out
STAMP = ("python -c \"import os,sys,time; n=sys.argv[1]; open('t/'+n,'w').write(str(time.time())+' '); "
         "time.sleep(float(sys.argv[2])); open('t/'+n,'a').write(str(time.time())+' '+str(os.nice(0)))\"")
DVC_YAML = f"""
stages:
  a:
    cmd: {STAMP} a 0 && echo a > a.txt
    outs: [a.txt]
  quick:
    meta: {{minutes: 1}}
    cmd: {STAMP} quick 1.5 && cat a.txt > quick.txt && echo ${{quick.n}} >> quick.txt
    deps: [a.txt]
    params: [quick]
    outs: [quick.txt]
  slow:
    meta: {{minutes: 30}}
    cmd: {STAMP} slow 3 && cat a.txt a.txt > slow.txt
    deps: [a.txt]
    outs: [slow.txt]
  join:
    cmd: {STAMP} join 0 && cat quick.txt slow.txt > join.txt
    deps: [quick.txt, slow.txt]
    outs: [join.txt]
"""


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    return env


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "t").mkdir()
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text(yaml.safe_dump({"quick": {"n": 1}}))
    for args in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"],
                 [sys.executable, "-m", "dvc", "config", "core.analytics", "false"]):
        subprocess.run(args, cwd=root, env=_env(), check=True, capture_output=True)
    return root


def _times(root: Path, name: str) -> tuple[float, float]:
    start, end, _ = (root / "t" / name).read_text().split()
    return float(start), float(end)


def _nice(root: Path, name: str) -> int:
    return int((root / "t" / name).read_text().split()[2]) - os.nice(0)


def _outs(root: Path) -> dict:
    lock = yaml.safe_load((root / "dvc.lock").read_text())["stages"]
    return {name: [(o["path"], o["md5"]) for o in stage["outs"]] for name, stage in lock.items()}


def test_side_by_side_matches_one_dvc_repro(tmp_path, caplog):
    par, ser = _project(tmp_path / "par"), _project(tmp_path / "ser")
    plan = load_plan(par)
    assert plan.stages == ["a", "quick", "slow", "join"] and plan.upstream["join"] == {"quick", "slow"}
    assert plan.ready({"a"}, {"a"}) == ["slow", "quick"]  # the 30-minute chain first
    with caplog.at_level("INFO", logger="aegisbench.pipeline.schedule"):
        assert run_plan(plan, par, jobs=2, env=_env()) == 0
    # slow was started before quick (the scheduler's order: a stage's own first statement can come
    # later on a loaded machine), they overlapped, and join waited for both
    started = [r.args[0] for r in caplog.records if r.msg.startswith("stage %s: starting")]
    assert started == ["a", "slow", "quick", "join"], started
    (s0, s1), (q0, q1) = _times(par, "slow"), _times(par, "quick")
    assert q0 < s1 and s0 < q1 and _times(par, "join")[0] >= max(s1, q1)
    # the longest chain at normal priority, the stage beside it niced
    beside = min(os.nice(0) + 10, 19) - os.nice(0)  # +10, clamped at 19 when the tests themselves run niced
    assert _nice(par, "a") == _nice(par, "slow") == 0 and _nice(par, "quick") == beside
    subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=ser, env=_env(), check=True, capture_output=True)
    assert _outs(par) == _outs(ser)  # the same stages, outputs and hashes as one dvc repro
    status = subprocess.run([sys.executable, "-m", "dvc", "status"], cwd=par, env=_env(), capture_output=True,
                            text=True, check=True).stdout
    assert "up to date" in status
    assert load_plan(par).stages == []  # nothing to do the second time
    (par / "params.yaml").write_text(yaml.safe_dump({"quick": {"n": 2}}))
    assert load_plan(par).stages == ["quick", "join"]


def test_a_failing_stage_stops_the_run_and_interrupts_its_neighbour(tmp_path, capsys):
    root = _project(tmp_path / "p")
    text = (root / "dvc.yaml").read_text().replace("cat a.txt > quick.txt", "exit 3")
    (root / "dvc.yaml").write_text(text.replace("slow 3", "slow 60"))
    t0 = time.monotonic()
    rc = run_plan(load_plan(root), root, jobs=2, env=_env())
    assert rc != 0  # DVC's status for a failed stage (255), as one `dvc repro` returns
    assert time.monotonic() - t0 < 45  # slow (60 s) was interrupted, not waited for
    err = capsys.readouterr().err
    assert f"stage quick failed (exit {rc}); stopped the stages running beside it (slow)" in err
    assert not (root / "slow.txt").exists() and not (root / "join.txt").exists()
    assert "slow" not in _outs(root) and "quick" not in _outs(root)


def test_plan_ranks_and_order():
    plan = Plan(["src", "build", "train", "detect", "board"],
                {"src": set(), "build": {"src"}, "train": {"src"}, "detect": {"build", "train"},
                 "board": {"detect"}},
                {"src": 1, "build": 9, "train": 35, "detect": 10, "board": 1})
    ranks = plan.ranks()
    assert ranks["train"] == 46 and ranks["build"] == 20 and ranks["src"] == 47
    assert plan.ready({"src"}, {"src"}) == ["train", "build"]
    assert plan.ready({"src", "build"}, {"src", "build", "train"}) == []  # detect waits for train


def test_run_refuses_jobs_below_one_before_writing(tmp_path, monkeypatch, capsys):
    from aegisbench.cli import main

    root = Path(__file__).resolve().parents[1]
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(root / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--fast", "--fast-dir", "scratch", "--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--jobs" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dvc.yaml", "params.yaml"]


def test_targets_limit_the_plan_to_what_they_need(tmp_path):
    root = _project(tmp_path / "p")
    plan = load_plan(root, ["quick"])
    assert plan.stages == ["a", "quick"] and plan.upstream["quick"] == {"a"}
    assert run_plan(plan, root, jobs=2, env=_env()) == 0
    assert (root / "quick.txt").is_file() and not (root / "slow.txt").exists()
    assert load_plan(root, ["join"]).stages == ["slow", "join"]  # a and quick are done


def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path):
    from aegisbench.errors import BadInput

    root = _project(tmp_path / "p")
    with pytest.raises(BadInput, match=r"unknown stage 'quik'.*did you mean 'quick'"):
        load_plan(root, ["quik"])
    assert not (root / "a.txt").exists()


def _run_copy(tmp_path, monkeypatch, capsys, argv: list[str], edit=None) -> list[str]:
    """``aegisbench run`` in a copy of the project's dvc.yaml/params.yaml (``edit`` changes the
    params); returns stderr's lines after checking nothing was written."""
    from aegisbench.cli import main

    root = Path(__file__).resolve().parents[1]
    shutil.copy(root / "dvc.yaml", tmp_path / "dvc.yaml")
    params = yaml.safe_load((root / "params.yaml").read_text())
    if edit:
        edit(params)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--fast", "--fast-dir", "scratch", *argv]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dvc.yaml", "params.yaml"]
    return capsys.readouterr().err.strip().splitlines()


def test_run_refuses_a_recipe_key_the_trainer_does_not_know(tmp_path, monkeypatch, capsys):
    def edit(p):
        p["reference_detector"]["sources"]["synthetic_smoke"]["epoch"] = 3

    err = _run_copy(tmp_path, monkeypatch, capsys, [], edit)
    assert len(err) == 1 and "unknown keys ['epoch']" in err[0] and "reference_detector" in err[0]


@pytest.mark.parametrize("floor", [1.5, -0.1])
def test_run_refuses_a_recall_floor_outside_0_1(tmp_path, monkeypatch, capsys, floor):
    def edit(p):
        p["reference_detector"]["sources"]["synthetic_sar"] = {"recall_floor": floor}

    err = _run_copy(tmp_path, monkeypatch, capsys, [], edit)
    assert len(err) == 1 and "recall_floor" in err[0]


def test_run_refuses_an_unknown_stage_before_writing(tmp_path, monkeypatch, capsys):
    err = _run_copy(tmp_path, monkeypatch, capsys, ["leaderbord"])
    assert len(err) == 1 and "unknown stage 'leaderbord'" in err[0] and "'leaderboard'" in err[0]
