"""dvc.yaml's code deps are the import closure of each stage (scripts/dvc_deps.py writes
them), and the builder hash covers exactly the build's closure: editing evaluation code
leaves the build up to date, editing a builder does not."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aegisbench.dataset.builder_code import BUILD_ENTRY, build_code, builder_source_hash
from aegisbench.importgraph import import_graph

ROOT = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("dvc_deps", ROOT / "scripts/dvc_deps.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dvc_deps"] = module
    spec.loader.exec_module(module)
    return module


dvc_deps = _load_script()
FIX = "run `.venv/bin/python scripts/dvc_deps.py` (or fix STAGES there if an entry moved)"


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def _stages(text: str) -> dict[str, dict]:
    stages = yaml.safe_load(text)["stages"]
    return {name: body.get("do", body) for name, body in stages.items()}


def test_every_stage_has_entries_that_exist(graph):
    assert set(_stages((ROOT / "dvc.yaml").read_text())) == set(dvc_deps.STAGES)
    assert dvc_deps.missing_entries(graph) == [], FIX


def test_each_stage_lists_exactly_its_closure(graph):
    """A file of the closure missing from dvc.yaml means editing it does not rerun the stage;
    a code file outside the closure means editing it reruns the stage for nothing."""
    problems = []
    for name, stage in _stages((ROOT / "dvc.yaml").read_text()).items():
        listed = [d for d in stage.get("deps", []) if dvc_deps.is_code_dep(d)]
        want = dvc_deps.stage_code_deps(name, graph)
        problems += [f"{name}: misses {d}" for d in sorted(set(want) - set(listed))]
        problems += [f"{name}: lists {d}, which its command cannot import" for d in sorted(set(listed) - set(want))]
        problems += [f"{name}: lists {d} twice" for d in sorted({d for d in listed if listed.count(d) > 1})]
    assert not problems, "\n".join(problems) + "\n" + FIX


def test_dvc_yaml_is_what_the_script_writes_and_only_deps_change(graph):
    text = (ROOT / "dvc.yaml").read_text()
    assert dvc_deps.rewrite(text, graph) == text, FIX
    # a damaged copy: a code dep dropped, a stray one and a stale comment added
    damaged = text.replace("      - src/aegisbench/builders/hfrepo.py\n", "", 1)
    damaged = damaged.replace("    deps:\n      - data/sources\n", "    deps:\n      - data/sources\n"
                              "      # stale note\n      - src/aegisbench/evaluation/coco.py\n", 1)
    assert damaged != text
    assert dvc_deps.rewrite(damaged, graph) == text
    before, after = yaml.safe_load(damaged), yaml.safe_load(dvc_deps.rewrite(damaged, graph))
    for name, stage in after["stages"].items():
        old, new = before["stages"][name], stage
        old, new = old.get("do", old), new.get("do", new)
        assert {k: v for k, v in old.items() if k != "deps"} == {k: v for k, v in new.items() if k != "deps"}
        assert [d for d in old["deps"] if not dvc_deps.is_code_dep(d)] == \
            [d for d in new["deps"] if not dvc_deps.is_code_dep(d)]


def test_the_build_closure_is_narrow():
    """Only the code that decides built bytes: no generators or adapters (the sources stage),
    no detectors, evaluation, scoring, leaderboard or CLI."""
    code = build_code()
    assert tuple(dvc_deps.SRC + rel for rel in code) == tuple(dvc_deps.stage_code_deps("build")) and BUILD_ENTRY == "aegisbench.builders.build"
    for rel in ("aegisbench/corruptions/storm.py", "aegisbench/firespread/model.py", "aegisbench/builders/hfrepo.py",
                "aegisbench/dataset/manifest.py", "aegisbench/dataset/card.py"):
        assert rel in code
    for prefix in ("aegisbench/evaluation/", "aegisbench/leaderboard/", "aegisbench/detectors/",
                   "aegisbench/pipeline/", "aegisbench/builders/synthetic_", "aegisbench/builders/adapters",
                   "aegisbench/builders/sources.py", "aegisbench/builders/preview.py", "aegisbench/metrics",
                   "aegisbench/evaluation/firespread_scoring.py", "aegisbench/dataset/firespread_truth.py",
                   "aegisbench/corruptions/preview.py", "aegisbench/predictions.py", "aegisbench/cli.py"):
        assert not [rel for rel in code if rel.startswith(prefix)], prefix
    assert not [rel for rel in code if rel.endswith("/commands.py")]


def _package_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "src" / "aegisbench", tmp_path / "aegisbench", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "aegisbench"


def _append(path: Path, text: str = "\n# an edit\n") -> None:
    path.write_text(path.read_text() + text)


def test_builder_hash_ignores_evaluation_code_and_follows_build_code(tmp_path):
    pkg = _package_copy(tmp_path)
    h0 = builder_source_hash(pkg)
    assert h0 == builder_source_hash()
    for rel in ("evaluation/evaluator.py", "leaderboard/site.py", "builders/synthetic_sar.py", "cli.py"):
        _append(pkg / rel)
    assert builder_source_hash(pkg) == h0
    _append(pkg / "builders/hfrepo.py")
    assert builder_source_hash(pkg) != h0


def _git(args, cwd, env):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{args}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_dvc_status_after_editing_evaluation_code(tmp_path):
    """Real DVC on the code deps of `build` and `evaluate` (the ones the test above holds
    dvc.yaml to; commands replaced by a touch): an edit to the evaluator leaves `build` up
    to date and reruns `evaluate`; an edit to hashing.py (bootstrap seeding) reruns both."""
    project = tmp_path / "p"
    _package_copy(project / "src")
    touch = f"{sys.executable} -c \"open('{{}}', 'w').write('x')\""
    doc = {"stages": {name: {"cmd": touch.format(f"out_{name}"), "deps": dvc_deps.stage_code_deps(name),
                             "outs": [{f"out_{name}": {"cache": False}}]} for name in ("build", "evaluate")}}
    (project / "dvc.yaml").write_text(yaml.safe_dump(doc))
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.org")
    dvc = [sys.executable, "-m", "dvc"]
    _git(["git", "init", "-q"], project, env)
    _git([*dvc, "init", "-q"], project, env)
    _git([*dvc, "config", "core.analytics", "false"], project, env)
    _git([*dvc, "repro", "-q"], project, env)

    def changed() -> set[str]:
        out = _git([*dvc, "status", "--json"], project, env)
        return set(yaml.safe_load(out[out.index("{"):]) or {})

    assert changed() == set()
    _append(project / "src/aegisbench/evaluation/evaluator.py")
    assert changed() == {"evaluate"}
    _append(project / "src/aegisbench/hashing.py")
    assert changed() == {"build", "evaluate"}
