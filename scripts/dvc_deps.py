"""Write the code dependencies of every ``dvc.yaml`` stage from the import graph.

Each stage has entry points in :data:`STAGES`: the library functions its command runs
(``module:name``), plus the non-Python package files it reads (templates, model YAMLs).
A stage's code deps are the import closure of those modules
(:mod:`aegisbench.importgraph`: imports anywhere in a file, plug-in registries' module
names, ``__init__`` of every package on the way) as one file per line, sorted, plus those
data files. So editing a module reruns exactly the stages that can import it, and a stage
never depends on code it cannot run.

The command modules (``aegisbench/cli.py``, ``*/commands.py``) are not entry points: a
stage's command goes through them, but they only parse arguments and call the library
function, so only the closure of the library entry decides a stage's outputs. (A CLI
default that decides an output is a ``params.yaml`` key or an explicit option in the
stage's ``cmd:``, which DVC tracks itself.)

Only the ``deps:`` lists are rewritten, in place, as text: every entry under
``src/aegisbench/`` (and every comment line inside the list) is replaced by the generated
block; data deps (``data/sources``, ``submissions/${item}``, ...), their inline comments
and everything outside ``deps:`` (params, outs, comments, layout) are kept as written.
Running it twice gives the same file.

Run: ``.venv/bin/python scripts/dvc_deps.py`` (``--check``: exit 1 and print the diff if
``dvc.yaml`` is not what it would write). tests/test_dvc_deps.py fails when a stage misses
a file of its closure or lists code outside it.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from aegisbench.importgraph import ImportGraph, import_graph

ROOT = Path(__file__).resolve().parents[1]
DVC_YAML = ROOT / "dvc.yaml"
#: The package lives under src/ (the src layout); a code dep is a path under it.
SRC = "src/"
CODE_PREFIX = SRC + "aegisbench/"


@dataclass(frozen=True)
class Stage:
    """What a stage's command runs: ``entries`` as ``module:name`` (the library function or
    class the command calls, checked to exist) and the package data files it reads."""

    entries: tuple[str, ...]
    data: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError("a stage needs at least one entry module")
        for e in self.entries:
            if not re.match(r"^aegisbench(\.\w+)+:\w+$", e):
                raise ValueError(f"entry must be 'aegisbench.module:name', got {e!r}")
        for d in self.data:
            if not d.startswith(CODE_PREFIX) or d.endswith(".py"):
                raise ValueError(f"data file must be a non-Python path under {CODE_PREFIX}, got {d!r}")

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.split(":")[0] for e in self.entries))


_DETECT = ("aegisbench.detectors.runner:run_detect", "aegisbench.detectors.interface:load_detector",
           "aegisbench.detectors.tiling:TilingParams", "aegisbench.dataset.verify:require_verified",
           "aegisbench.executor:Executor")
#: dvc.yaml stage -> what its command runs.
STAGES = {
    "sources": Stage(("aegisbench.builders.sources:materialize_sources", "aegisbench.params:Params")),
    "build": Stage(("aegisbench.builders.build:build_repo", "aegisbench.params:Params")),
    "digest": Stage(("aegisbench.pipeline.summaries:write_dataset_identity",)),
    "ladders": Stage(("aegisbench.pipeline.summaries:write_ladder_summary",)),
    "calibrate": Stage(("aegisbench.corruptions.calibrate:calibrate",
                        "aegisbench.builders.source_table:read_source_table", "aegisbench.params:Params")),
    "preview": Stage(("aegisbench.builders.preview:write_previews", "aegisbench.corruptions.calibrate:load_table",
                      "aegisbench.params:Params")),
    "train_reference": Stage(("aegisbench.detectors.train_jobs:run_jobs", "aegisbench.detectors.train_jobs:train_one",
                              "aegisbench.detectors.reference:train_reference", "aegisbench.params:Params"),
                             data=("src/aegisbench/detectors/aegis_yolo_tiny.yaml",)),
    "detect_reference_sar": Stage(_DETECT),
    "detect_reference_smoke": Stage(_DETECT + ("aegisbench.detectors.warp_runner:run_warp",
                                               "aegisbench.detectors.noise_sweep:run_noise_sweep",
                                               "aegisbench.params:WarpTestParams")),
    "firespread_baselines": Stage(("aegisbench.forecasters.baselines:write_baselines",
                                   "aegisbench.forecasters.simple:BASELINES",
                                   "aegisbench.forecasters.convlstm:ConvLSTMConfig")),
    "train_seeds": Stage(("aegisbench.pipeline.seeds:train_seeds", "aegisbench.detectors.train_jobs:run_jobs",
                          "aegisbench.detectors.train_jobs:train_one", "aegisbench.detectors.reference:train_reference",
                          "aegisbench.params:Params"), data=("src/aegisbench/detectors/aegis_yolo_tiny.yaml",)),
    # detects and evaluates the extra seeds through the detect and evaluate commands
    "reference_seeds": Stage(("aegisbench.pipeline.seeds:reference_seeds", *_DETECT,
                              "aegisbench.evaluation.evaluator:evaluate_submission")),
    "evaluate": Stage(("aegisbench.evaluation.evaluator:evaluate_submission",)),
    "leaderboard": Stage(("aegisbench.leaderboard.build:build_leaderboard",), data=("src/aegisbench/templates",)),
}


def defined_names(graph: ImportGraph, module: str) -> set[str]:
    """Top-level names a module defines (functions, classes, assignments, imports)."""
    tree = ast.parse((ROOT / SRC / graph.modules[module]).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def missing_entries(graph: ImportGraph) -> list[str]:
    """Entries of :data:`STAGES` whose module or name does not exist (a moved function)."""
    out = []
    for stage, spec in STAGES.items():
        for entry in spec.entries:
            module, name = entry.split(":")
            if module not in graph.modules:
                out.append(f"{stage}: no module {module}")
            elif name not in defined_names(graph, module):
                out.append(f"{stage}: {module} defines no {name}")
        out += [f"{stage}: no file {d}" for d in spec.data if not (ROOT / d).exists()]
    return out


def stage_code_deps(stage: str, graph: ImportGraph | None = None) -> list[str]:
    """The sorted code deps of ``stage``: its entries' import closure plus its data files."""
    graph = graph or import_graph()
    spec = STAGES[stage]
    return sorted({SRC + f for f in graph.closure_files(*spec.modules)} | set(spec.data))


def is_code_dep(dep: str) -> bool:
    return dep.startswith(CODE_PREFIX)


_STAGE = re.compile(r"^  ([A-Za-z_][\w-]*):\s*(#.*)?$")
_DEPS = re.compile(r"^(\s+)deps:\s*$")


def rewrite(text: str, graph: ImportGraph | None = None) -> str:
    """``dvc.yaml`` text with every stage's code deps replaced by :func:`stage_code_deps`."""
    graph = graph or import_graph()
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    stage = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := _STAGE.match(line):
            stage = m.group(1)
        m = _DEPS.match(line)
        if not m or stage is None:
            out.append(line)
            i += 1
            continue
        if stage not in STAGES:
            raise ValueError(f"dvc.yaml stage {stage!r} has no entry in STAGES (scripts/dvc_deps.py)")
        item_indent = m.group(1) + "  "
        j = i + 1
        kept = []
        while j < len(lines) and (lines[j].startswith(item_indent + "- ") or lines[j].startswith(item_indent + "#")):
            value = lines[j][len(item_indent) + 2:].split(" #")[0].strip()
            if lines[j].startswith(item_indent + "- ") and not is_code_dep(value):
                kept.append(lines[j])
            j += 1
        spec = STAGES[stage]
        note = f"{item_indent}# code: import closure of {', '.join(spec.modules)} (scripts/dvc_deps.py)\n"
        out += [line, *kept, note, *(f"{item_indent}- {dep}\n" for dep in stage_code_deps(stage, graph))]
        i = j
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 (and print the diff) if dvc.yaml would change")
    parser.add_argument("--dvc-yaml", type=Path, default=DVC_YAML)
    args = parser.parse_args(argv)
    graph = import_graph()
    problems = missing_entries(graph)
    if problems:
        print("scripts/dvc_deps.py STAGES is stale:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    old = args.dvc_yaml.read_text()
    new = rewrite(old, graph)
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "dvc.yaml", "new"))
        return int(old != new)
    if new != old:
        args.dvc_yaml.write_text(new)
        print(f"rewrote the code deps of {args.dvc_yaml}")
    else:
        print(f"{args.dvc_yaml} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
