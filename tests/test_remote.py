"""`aegisbench pull` / `push` on a real DVC project in a temporary git repository, with real
folder remotes: an unreachable or missing remote is refused in one line with exit 2 before
anything is transferred or checked out; a reachable one pushes and pulls as `dvc` does."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aegisbench.cli import main

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]


def _sh(args, cwd):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, f"{args}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _dvc(*args, cwd):
    return _sh([sys.executable, "-m", "dvc", *args], cwd)


@pytest.fixture
def project(tmp_path):
    """A DVC project tracking data/x.txt, committed, with no remote yet."""
    repo = tmp_path / "project"
    repo.mkdir()
    _sh(["git", "init", "-q"], repo)
    _dvc("init", "-q", cwd=repo)
    _dvc("config", "core.analytics", "false", cwd=repo)
    (repo / "data").mkdir()
    (repo / "data/x.txt").write_text("built once\n")
    _dvc("add", "-q", "data/x.txt", cwd=repo)
    _sh([*GIT, "add", "-A"], repo)
    _sh([*GIT, "commit", "-qm", "init"], repo)
    return repo


def _cli(monkeypatch, capsys, cwd, *args) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _clone(project: Path, name: str) -> Path:
    clone = project.parent / name
    _sh(["git", "clone", "-q", str(project), str(clone)], project.parent)
    return clone


def _untouched(clone: Path) -> bool:
    """Nothing checked out or fetched: no data file, nothing in the cache."""
    cache = clone / ".dvc/cache"
    return not (clone / "data/x.txt").exists() and not (cache.exists() and any(p.is_file() for p in cache.rglob("*")))


def test_no_remote_is_refused_in_one_line(project, monkeypatch, capsys):
    for verb in ("pull", "push"):
        rc, _, err = _cli(monkeypatch, capsys, project, verb)
        assert rc == 2 and "no DVC remote is configured" in _one_line(err) and ".dvc/config" in err


def test_push_then_pull_in_a_fresh_clone(project, tmp_path, monkeypatch, capsys):
    _dvc("remote", "add", "-d", "shared", str(tmp_path / "remote"), cwd=project)
    rc, out, _ = _cli(monkeypatch, capsys, project, "push")
    assert rc == 0 and "push to remote 'shared': done" in out
    assert any(p.is_file() for p in (tmp_path / "remote").rglob("*"))
    _sh([*GIT, "commit", "-qam", "remote"], project)
    clone = _clone(project, "clone")
    assert _untouched(clone)
    rc, out, _ = _cli(monkeypatch, capsys, clone, "pull", "--no-verify")
    assert rc == 0 and (clone / "data/x.txt").read_text() == "built once\n"
    assert "up to date" in _dvc("status", cwd=clone).lower()


def test_an_unreachable_remote_transfers_nothing(project, tmp_path, monkeypatch, capsys):
    _dvc("remote", "add", "-d", "shared", str(tmp_path / "unmounted/remote"), cwd=project)
    rc, _, err = _cli(monkeypatch, capsys, project, "push")
    assert rc == 2 and "remote 'shared'" in _one_line(err) and "unreachable" in err
    assert not (tmp_path / "unmounted").exists()  # nothing created, nothing uploaded
    _sh([*GIT, "commit", "-qam", "remote"], project)
    clone = _clone(project, "clone")
    rc, _, err = _cli(monkeypatch, capsys, clone, "pull")
    assert rc == 2 and "unreachable: its folder does not exist" in _one_line(err)
    assert str(tmp_path / "unmounted/remote") in err
    assert _untouched(clone) and not (clone / "aegisbench").exists()


def test_a_reachable_remote_without_the_data_gives_dvcs_error_in_one_line(project, tmp_path, monkeypatch, capsys):
    (tmp_path / "empty_remote").mkdir()  # mounted, but nobody pushed
    _dvc("remote", "add", "-d", "shared", str(tmp_path / "empty_remote"), cwd=project)
    _sh([*GIT, "commit", "-qam", "remote"], project)
    clone = _clone(project, "clone")
    rc, _, err = _cli(monkeypatch, capsys, clone, "pull")
    line = _one_line(err)
    assert rc == 2 and line.startswith("aegisbench pull: error: remote 'shared'") and "dvc pull failed" in line
    assert not (clone / "data/x.txt").exists()


def test_unknown_remote_and_missing_plugin(project, monkeypatch, capsys):
    rc, _, err = _cli(monkeypatch, capsys, project, "pull", "--remote", "nosuch")
    assert rc == 2 and "remote 'nosuch' doesn't exist" in _one_line(err)
    if importlib.util.find_spec("dvc_s3") is None:  # an S3 remote needs the dvc[s3] extra
        _dvc("remote", "add", "cloud", "s3://bucket/aegisbench", cwd=project)
        rc, _, err = _cli(monkeypatch, capsys, project, "pull", "--remote", "cloud")
        assert rc == 2 and "dvc-s3" in _one_line(err)
    rc, _, err = _cli(monkeypatch, capsys, project, "push", "--jobs", "0")
    assert rc == 2 and "--jobs" in _one_line(err)


def test_outside_a_dvc_project(tmp_path, monkeypatch, capsys):
    rc, _, err = _cli(monkeypatch, capsys, tmp_path, "pull")
    assert rc == 2 and "not inside of a DVC repository" in _one_line(err)
