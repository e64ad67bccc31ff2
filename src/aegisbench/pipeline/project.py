"""The DVC project of the pipeline, on the default or on a fast variant.

``aegisbench run`` runs ``dvc repro`` in the checkout (sources -> build -> reference
detector training -> detect -> reference forecasters -> evaluate -> leaderboard) and prints
where the leaderboard page is. ``aegisbench run --fast`` runs the same ``dvc.yaml`` in a
scratch DVC project (``runs/fast``) whose ``params.yaml`` is the checkout's with
:data:`FAST_OVERRIDES` applied: a few images per source, one condition per family kind,
three WARP noise levels, a 16x16 fire-spread grid and one-epoch training, so the full
chain runs in minutes. The scratch project is a git repository with the prepared state
committed, so ``dvc exp run`` works there too.

>>> p = fast_params({"sources": {"synthetic_sar": {"options": {}}}, "build": {}, "submissions": ["a"],
...                  "reference_detector": {"sources": {}}})
>>> p["sources"]["synthetic_sar"]["options"]["n_test"], p["firespread"]["grid"], p["submissions"]
(3, [16, 16], ['a'])
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

PAGE = Path("leaderboard/site/index.html")
PROJECT_FILES = ("dvc.yaml",)
PROJECT_DIRS = ("src/aegisbench",)  # dvc.yaml's code deps (the package, templates included)
GITIGNORE = ("__pycache__/", "/private/", "/hosted/*", "!/hosted/store.dvc", "!/hosted/.gitignore")
FAST_SOURCES = {
    "synthetic_sar": {"n_train": 2, "n_val": 2, "n_test": 3, "images_per_flight": 1,
                      "small_size": [320, 320], "large_size": [640, 480]},
    "synthetic_smoke": {"n_train": 3, "n_val": 1, "n_test": 1, "frames_per_sequence": 3, "size": [320, 240]},
}
FAST_OVERRIDES = {
    "build": {"conditions": ["low_light_s3", "rain_streaks_s1"], "compound": ["low_light_s2+inundation_s2"]},
    "firespread": {"grid": [16, 16], "s_levels": [0, 30], "realizations": 20, "initial_conditions": 3,
                   "test_initial_conditions": [2], "realizations_per_shard": 10, "max_steps": 200,
                   "forecast": {"observe": 3, "horizon": 5, "threshold": 0.5, "eval_realizations": 2}},
    "warp": {"noise_levels": [0.1, 0.2, 0.4], "grid": 3, "images": 1},
    "reference_forecasters": {"convlstm_steps": 2, "convlstm_hidden": 4},
    "evaluation": {"n_resamples": 50},
    "reference_detector": {"epochs": 1, "max_images": 4},
}


def fast_params(raw: dict) -> dict:
    """The fast variant of a ``params.yaml`` mapping (sections merged one level deep)."""
    out = copy.deepcopy(raw)
    for name, opts in FAST_SOURCES.items():
        if name in out.get("sources", {}):
            out["sources"][name]["options"] = dict(opts)
    for section, values in FAST_OVERRIDES.items():
        merged = dict(out.get(section) or {})
        merged.update(copy.deepcopy(values))
        out[section] = merged
    for src in (out.get("reference_detector") or {}).get("sources", {}).values():
        src["epochs"] = FAST_OVERRIDES["reference_detector"]["epochs"]
    return out


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for key in ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME"):
        env.setdefault(key, "aegisbench")
    for key in ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"):
        env.setdefault(key, "aegisbench@localhost")
    return env


def _call(args: list[str], cwd: Path) -> None:
    proc = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed in {cwd}:\n{proc.stdout}{proc.stderr}")


def prepare_project(checkout: str | Path, dest: str | Path, params: dict) -> Path:
    """A scratch git + DVC project at ``dest`` running the checkout's ``dvc.yaml`` on
    ``params`` (code folders refreshed; earlier outputs and DVC cache kept, so a rerun
    only recomputes what changed)."""
    checkout, dest = Path(checkout).resolve(), Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    if (dest / "aegisbench" / "__init__.py").is_file():  # a package copy from before the src layout:
        shutil.rmtree(dest / "aegisbench")  # that name is the dataset repo's now
    if (dest / ".git").exists():  # a DVC output, which DVC refuses while git still tracks that copy
        _call(["git", "rm", "-r", "-q", "--cached", "--ignore-unmatch", "aegisbench"], dest)
    for name in PROJECT_DIRS:
        shutil.rmtree(dest / name, ignore_errors=True)
        shutil.copytree(checkout / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in PROJECT_FILES:
        shutil.copy(checkout / name, dest / name)
    (dest / "submissions").mkdir(exist_ok=True)
    if (checkout / "submissions/README.md").is_file():
        shutil.copy(checkout / "submissions/README.md", dest / "submissions/README.md")
    ignore = dest / ".gitignore"
    lines = ignore.read_text().splitlines() if ignore.is_file() else []
    missing = [line for line in GITIGNORE if line not in lines]
    if missing:  # the private key and a hosted board's state never reach the project's git
        atomic_write_text(ignore, "\n".join([*lines, *missing]) + "\n")
    if not (dest / ".git").exists():
        _call(["git", "init", "-q"], dest)
    if not (dest / ".dvc").exists():
        _call([sys.executable, "-m", "dvc", "init", "-q"], dest)
        _call([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], dest)
    wrote = _write_params(dest, yaml.safe_dump(params, sort_keys=False))
    paths = [*PROJECT_DIRS, *PROJECT_FILES, ".gitignore", ".dvc", ".dvcignore", "submissions/README.md"]
    commit_all(dest, "aegisbench run --fast: the checkout's dvc.yaml and code on the fast params",
               [p for p in paths if (dest / p).exists()] + (["params.yaml"] if wrote else []))
    return dest


def _write_params(dest: Path, text: str) -> bool:
    """Write the fast ``params.yaml`` unless the user changed the one written last (a DVC
    experiment, ``dvc exp run -S ...``, or an edit): then it is kept while the checkout's
    params are unchanged, and BadInput when both changed (nothing is reset). True if written."""
    path, marker = dest / "params.yaml", dest / ".git" / "aegisbench-fast-params.sha256"
    new = hashlib.sha256(text.encode()).hexdigest()
    last = marker.read_text().strip() if marker.is_file() else None
    current = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    if current is not None and last is not None and current != last:  # changed since run --fast wrote it
        if new == last:
            log.info("%s: kept as you changed it (a DVC experiment's parameters?)", path)
            return False
        raise BadInput("changed since aegisbench run --fast wrote it, and the checkout's params.yaml changed "
                       "too: keep your change in an experiment (dvc exp save) or discard it (git checkout "
                       "params.yaml), then run again", where=str(path))
    if current != new:
        atomic_write_text(path, text)
    atomic_write_text(marker, new + "\n")
    return current != new


def commit_all(repo: Path, message: str, paths: list[str] | None = None) -> bool:
    """Commit ``paths`` (default: everything git does not ignore) in ``repo`` (the project DVC
    and ``dvc exp run`` start from: experiments need a commit); False if nothing changed, so
    HEAD, and the experiments listed on it, stay where they were."""
    _call(["git", "add", "-A", "--", *(paths or ["."])], repo)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=repo, env=_env())
    has_head = subprocess.run(["git", "rev-parse", "-q", "--verify", "HEAD"], cwd=repo, env=_env(),
                              capture_output=True).returncode == 0
    if has_head and staged.returncode == 0:
        return False
    _call(["git", "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", message], repo)
    return True


def dvc_repro(project: str | Path, jobs: int = 1, targets: list[str] | None = None) -> int:
    """Run ``dvc repro [TARGET ...]`` in ``project`` (output streamed); returns its exit status.
    With ``jobs`` > 1, independent stages run side by side (:mod:`aegisbench.pipeline.schedule`).
    An unknown target is refused (BadInput) before any stage runs."""
    from aegisbench.pipeline.schedule import load_plan, run_plan

    plan = load_plan(project, targets)  # names the targets check: refused before anything runs
    if jobs <= 1:
        return subprocess.run([sys.executable, "-m", "dvc", "repro", *(targets or [])], cwd=project,
                              env=_env()).returncode
    if not plan.stages:
        print("Data and pipelines are up to date.")
        return 0
    log.info("%d stage(s) to reproduce, up to %d at a time: %s", len(plan.stages), jobs, ", ".join(plan.stages))
    return run_plan(plan, project, jobs, env=_env())


_MISSING = object()


def param_at(params: dict, ref: str, default=_MISSING):
    """The value DVC's ``${ref}`` (a dotted key such as ``evaluation.n_resamples``) reads from
    ``params``; ``default`` where there is none (BadInput naming dvc.yaml when no default is given).

    >>> param_at({"a": {"b": 3}}, "a.b"), param_at({"a": 1}, "a.b", None)
    (3, None)
    """
    node = params
    for part in ref.split("."):
        if not isinstance(node, dict) or part not in node:
            if default is _MISSING:
                raise BadInput(f"${{{ref}}} is not in params.yaml", where="dvc.yaml")
            return default
        node = node[part]
    return node


def stage_names(dvc_yaml: dict, params: dict) -> list[str]:
    """The stage names ``dvc repro`` takes as targets in a ``dvc.yaml``: each stage, and each
    ``foreach`` item as ``name@key`` (a list item is its own key; ``${a.b}`` read from ``params``).

    >>> stage_names({"stages": {"a": {}, "e": {"foreach": "${s}"}, "t": {"foreach": {"x": {}}}}}, {"s": ["p", "q"]})
    ['a', 'e', 'e@p', 'e@q', 't', 't@x']
    """
    names = []
    for name, spec in (dvc_yaml.get("stages") or {}).items():
        names.append(name)
        items = (spec or {}).get("foreach")
        if isinstance(items, str) and items.startswith("${") and items.endswith("}"):
            items = param_at(params, items[2:-1], None)
        if isinstance(items, dict):
            names += [f"{name}@{k}" for k in items]
        elif isinstance(items, list):
            names += [f"{name}@{k}" for k in items if isinstance(k, (str, int))]
    return names


def check_stages(checkout: Path, params: dict, targets: list[str]) -> None:
    """BadInput naming the first target that is no stage of ``checkout``'s dvc.yaml."""
    from aegisbench.pipeline.schedule import check_targets

    check_targets(targets, stage_names(yaml.safe_load((checkout / "dvc.yaml").read_text()) or {}, params))


def check_runnable(checkout: Path) -> None:
    """The checks that would otherwise fail half-way through the pipeline."""
    if not (checkout / "dvc.yaml").is_file() or not (checkout / "params.yaml").is_file():
        raise BadInput("no dvc.yaml/params.yaml here; run from the AegisBench checkout", where=str(checkout))
    if shutil.which("git") is None:
        raise BadInput("git is not installed (DVC needs it)", where="PATH")
    try:
        import torch  # noqa: F401
        import ultralytics  # noqa: F401
    except ImportError:
        raise BadInput("the reference detector needs the detect extra: pip install -e \".[detect]\"",
                       where="python environment") from None
