"""`dvc repro` in a temporary git repository: builds from params.yaml, then does nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aegisbench.builders.manifest import load_manifest, verify_repo

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "synthetic_sar": {"n_train": 2, "n_val": 2, "n_test": 3, "images_per_flight": 1,
                      "small_size": [320, 320], "large_size": [640, 480]},
    "synthetic_smoke": {"n_train": 1, "n_val": 1, "n_test": 1, "frames_per_sequence": 3,
                        "size": [320, 240]},
}
TINY_BUILD = {"conditions": ["low_light_s3", "rain_streaks_s1"], "compound": ["low_light_s2+inundation_s2"],
              "warp_noise_levels": [0.1]}

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _run(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    for folder in ("benchmark", "builders"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", repo / "dvc.yaml")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for name, opts in TINY.items():
        params["sources"][name]["options"] = opts
    params["build"].update(TINY_BUILD)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (repo / ".gitignore").write_text("/data/\n__pycache__/\n")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org")
    dvc = [sys.executable, "-m", "dvc"]
    _run(["git", "init", "-q"], repo, env)
    _run([*dvc, "init", "-q"], repo, env)
    _run([*dvc, "config", "core.analytics", "false"], repo, env)
    _run(["git", "add", "-A"], repo, env)
    _run(["git", "commit", "-qm", "init"], repo, env)
    return repo, env, dvc


def test_dvc_repro_builds_then_is_a_no_op(project):
    repo, env, dvc = project
    out = _run([*dvc, "repro"], repo, env)
    assert "Running stage 'sources'" in out and "Running stage 'build'" in out
    assert verify_repo(repo / "data/aegisbench").ok
    manifest = load_manifest(repo / "data/aegisbench")
    assert set(manifest["configs"]["clean"]["splits"]) == {
        "synthetic_sar", "synthetic_sar_val", "synthetic_smoke", "synthetic_smoke_val"}
    assert sorted(manifest["configs"]) == ["clean", "low_light_s2__inundation_s2", "low_light_s3",
                                           "rain_streaks_s1", "warp_noise_100"]
    metrics = _run([*dvc, "metrics", "show"], repo, env)
    assert "calibration/report.json" in metrics and "low_light" in metrics
    assert (repo / "dvc.lock").exists() and (repo / "data/preview/synthetic_sar.png").exists()
    again = _run([*dvc, "repro"], repo, env)
    assert "Running stage" not in again
    assert "up to date" in again.lower()
    # a parameter change reruns exactly the stages that depend on it
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["sources"]["synthetic_sar"]["options"]["n_test"] = 4
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    third = _run([*dvc, "repro"], repo, env)
    assert "Running stage 'sources'" in third and "Running stage 'build'" in third
    assert load_manifest(repo / "data/aegisbench")["configs"]["clean"]["splits"]["synthetic_sar"]["rows"] == 4
