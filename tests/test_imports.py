"""The import graph: every module imports on its own, library code never imports the CLI,
and no module imports against the data flow.

The data flow is sources -> builders -> dataset repo -> submissions -> evaluation -> results
-> leaderboard (-> the pipeline, which drives ``dvc repro`` over all of them). A module may
import modules of its own layer or of an earlier one; the leaves (corruptions, metrics,
the fire-spread simulator, the vocabulary, the numerical core of scoring and the small shared
helpers) import only leaves.
The module that defines an artifact's format sits with the stage that writes it (the
manifest with the builders, the results writer with the evaluation); the modules that read
it for the next stage sit in that artifact's layer (``leaderboard.results`` reads results/).
A package's ``__init__`` has the layer of what it imports (an empty one is a leaf).

CLI modules (``aegisbench/cli.py``, every ``commands.py``; ``aegisbench/pipeline/commands.py``
is the ``run`` command) parse arguments and call the library; they may import anything,
and nothing but another CLI module may import them.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from aegisbench.importgraph import Edge, ImportGraph, closure_files, import_graph, parents

ORDER = ("leaf", "sources", "builders", "dataset", "submissions", "evaluation", "results", "leaderboard",
         "pipeline", "service")
_LEAVES = ("hashing", "errors", "isa", "kernels", "atomic", "staging", "readers", "params", "vocab", "importgraph", "executor", "cluster",
           "private", "attestation", "releases", "overlap", "attribution",
           "fields", "progress", "logs", "paths",
           "geometry", "stats", "metrics", "corruptions", "firespread.model", "firespread.layout",
           "firespread.params", "firespread.streams", "firespread.ensemble",
           # the numerical core of scoring: pure functions of boxes and scores (the matcher,
           # COCO mAP, the frozen-threshold rule); the reference trainer reports with them too
           "evaluation.matching", "evaluation.coco", "evaluation.threshold", "evaluation.version")
_SOURCES = ("builders.sources", "builders.adapters", "builders.adapters_formats", "builders.adapters_coco", "builders.adapters_diagnose",
            "builders.adapters_report",
            "builders.synthetic_common", "builders.synthetic_people", "builders.synthetic_sar",
            "builders.synthetic_terrain", "builders.synthetic_smoke", "builders.splits", "builders.source_table")
_SUBMISSIONS = ("predictions", "detectors", "evaluation.formats", "evaluation.rows",
                "firespread.submission", "firespread.forecasters", "firespread.convlstm", "firespread.baselines")
#: module prefix -> layer (the longest matching prefix decides; packages: see the module doc).
LAYERS = {
    **{f"aegisbench.{m}": "leaf" for m in _LEAVES},
    **{f"aegisbench.{m}": "sources" for m in _SOURCES},
    "aegisbench.builders": "builders",
    "aegisbench.evaluation.dataset": "dataset",
    "aegisbench.firespread.truth": "dataset",
    **{f"aegisbench.{m}": "submissions" for m in _SUBMISSIONS},
    "aegisbench.evaluation": "evaluation",
    "aegisbench.firespread.scoring": "evaluation",
    "aegisbench.firespread.cells": "evaluation",
    "aegisbench.firespread.track": "evaluation",
    "aegisbench.firespread.ndws": "evaluation",
    "aegisbench.leaderboard.results": "results",
    "aegisbench.leaderboard.result_files": "results",
    "aegisbench.leaderboard": "leaderboard",
    "aegisbench.firespread.report": "leaderboard",
    "aegisbench.pipeline": "pipeline",
    # a hosted leaderboard: uploads through the evaluator's validator into the hosted board
    "aegisbench.service": "service",
}
assert set(LAYERS.values()) <= set(ORDER)


def is_cli(module: str) -> bool:
    return module == "aegisbench.cli" or module.rsplit(".", 1)[-1] == "commands"


def is_package(graph: ImportGraph, module: str) -> bool:
    return graph.modules[module].endswith("__init__.py")


def prefix_layer(module: str) -> str | None:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in LAYERS:
            return LAYERS[".".join(parts[:i])]
    return None


def layer_of(graph: ImportGraph, module: str, _busy: frozenset = frozenset()) -> str | None:
    """The layer of a module: by :data:`LAYERS`; a package's ``__init__``: the latest layer
    of what it imports (leaf when it imports nothing)."""
    if not is_package(graph, module):
        return prefix_layer(module)
    inner = [layer_of(graph, m, _busy | {module}) for m in graph.imports(module)
             if m not in _busy | {module} and m not in parents(module) and not is_cli(m)]
    return max((x for x in inner if x), key=ORDER.index, default="leaf")


def violations(graph: ImportGraph) -> tuple[list[str], list[str]]:
    """(library -> CLI edges, back-edges), one readable line each."""
    to_cli, back = [], []
    for e in graph.edges:
        if is_cli(e.importer):
            continue
        if is_cli(e.imported):
            to_cli.append(f"{e}: library module imports CLI module {e.imported}")
            continue
        a, b = layer_of(graph, e.importer), layer_of(graph, e.imported)
        if a and b and ORDER.index(b) > ORDER.index(a):
            back.append(f"{e}: {a} imports {b}")
    return to_cli, back


@pytest.fixture(scope="module")
def graph() -> ImportGraph:
    return import_graph()


def test_no_library_module_imports_a_cli_module(graph):
    to_cli, _ = violations(graph)
    assert not to_cli, "library -> CLI edges:\n  " + "\n  ".join(to_cli)


def test_no_import_against_the_data_flow(graph):
    _, back = violations(graph)
    assert not back, f"{len(back)} back-edge(s) against {' -> '.join(ORDER)}:\n  " + "\n  ".join(back)


def test_every_module_has_a_layer_and_every_import_resolves(graph):
    unplaced = [m for m in graph.modules if not is_cli(m) and layer_of(graph, m) is None]
    assert not unplaced, f"modules with no layer (add them to LAYERS in {__file__}): {unplaced}"
    stale = [str(u) for u in graph.unresolved]
    assert not stale, "imports of aegisbench modules that do not exist:\n  " + "\n  ".join(stale)


def test_layers_classify_as_the_data_flow_says(graph):
    """The table itself, on modules whose place is not in doubt (so a typo in LAYERS fails)."""
    expected = {"aegisbench.corruptions.storm": "leaf", "aegisbench.firespread.model": "leaf",
                "aegisbench.builders.synthetic_sar": "sources", "aegisbench.builders.hfrepo": "builders",
                "aegisbench.detectors.runner": "submissions", "aegisbench.evaluation.coco": "leaf",
                "aegisbench.evaluation.scoring": "evaluation", "aegisbench.evaluation.submission": "evaluation",
                "aegisbench.leaderboard.results": "results",
    "aegisbench.leaderboard.result_files": "results", "aegisbench.leaderboard.site": "leaderboard",
                "aegisbench.leaderboard.changes": "leaderboard", "aegisbench.leaderboard.changes_md": "leaderboard",
                "aegisbench.leaderboard.machine": "leaderboard",
                "aegisbench.pipeline.project": "pipeline", "aegisbench": "leaf"}
    assert {m: layer_of(graph, m) for m in expected} == expected
    assert is_cli("aegisbench.cli") and is_cli("aegisbench.pipeline.commands") and not is_cli("aegisbench.pipeline")


# ------------------------------------------------------------- the graph reader itself

def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_import_graph_reads_every_kind_of_import(tmp_path):
    pkg = tmp_path / "aegisbench"
    _write(pkg, "__init__.py", "")
    _write(pkg, "cli.py", 'COMMANDS = ["aegisbench.a.commands"]\n')
    _write(pkg, "a/__init__.py", """
        def __getattr__(name):
            from aegisbench.a.heavy import thing
            return thing
    """)
    _write(pkg, "a/heavy.py", "thing = 1\n")
    _write(pkg, "a/commands.py", "")
    _write(pkg, "a/b.py", """
        from typing import TYPE_CHECKING
        from . import c
        from .d import x
        if TYPE_CHECKING:
            from aegisbench.typing_only import T
        PLUGINS = {"p": "aegisbench.plugin:Cls", "doc": "see aegisbench.plugin for details"}
        def f():
            import aegisbench.late
            from aegisbench import gone
    """)
    for name in ("a/c.py", "a/d.py", "plugin.py", "late.py", "typing_only.py", "user.py"):
        _write(pkg, name, "x = 1\n")
    _write(pkg, "user.py", "from aegisbench.a import thing\nfrom aegisbench.nothere import y\n")
    _write(pkg, "loose/orphan.py", "")  # no __init__.py: not importable, not a module
    g = import_graph(pkg)
    assert "aegisbench.loose.orphan" not in g.modules and g.modules["aegisbench.a"] == "aegisbench/a/__init__.py"
    assert g.imports("aegisbench.a.b") == ["aegisbench", "aegisbench.a", "aegisbench.a.c", "aegisbench.a.d",
                                           "aegisbench.late", "aegisbench.plugin"]
    kinds = {(e.imported, e.kind) for e in g.edges if e.importer == "aegisbench.a.b"}
    assert ("aegisbench.plugin", "string") in kinds
    assert g.imports("aegisbench.cli") == ["aegisbench"]  # dispatch strings are not followed
    assert g.imports("aegisbench.a") == ["aegisbench"]  # the lazy import is not the package's own
    assert "aegisbench.a.heavy" in g.imports("aegisbench.user")  # ... but of who takes the attribute
    assert "aegisbench.a.heavy" not in g.closure("aegisbench.a.b")
    assert [str(u) for u in g.unresolved] == ["aegisbench.user -> aegisbench.nothere  [aegisbench/user.py:2]"]
    assert g.closure_files("aegisbench.a.b") == closure_files("aegisbench.a.b", package_dir=pkg)
    assert g.closure_files("aegisbench.a.c") == ["aegisbench/__init__.py", "aegisbench/a/__init__.py",
                                                 "aegisbench/a/c.py"]
    with pytest.raises(KeyError, match="aegisbench.nope"):
        g.closure("aegisbench.nope")
    with pytest.raises(ValueError, match="kind"):
        Edge("a", "b", "magic", "a.py", 1)


def test_violations_are_found_and_named(tmp_path):
    pkg = tmp_path / "aegisbench"
    _write(pkg, "__init__.py", "")
    _write(pkg, "hashing.py", "from aegisbench.leaderboard.site import x\n")
    _write(pkg, "leaderboard/__init__.py", "")
    _write(pkg, "leaderboard/site.py", "x = 1\n")
    _write(pkg, "leaderboard/commands.py", "from aegisbench.leaderboard.site import x\n")
    _write(pkg, "evaluation/__init__.py", "")
    _write(pkg, "evaluation/coco.py", "from aegisbench.leaderboard.commands import x\n")
    to_cli, back = violations(import_graph(pkg))
    assert to_cli == ["aegisbench.evaluation.coco -> aegisbench.leaderboard.commands  "
                      "[aegisbench/evaluation/coco.py:1]: library module imports CLI module "
                      "aegisbench.leaderboard.commands"]
    assert back == ["aegisbench.hashing -> aegisbench.leaderboard.site  [aegisbench/hashing.py:1]: "
                    "leaf imports leaderboard"]


# ------------------------------------------------------------- every module imports

SCRIPT = r"""
import importlib, pkgutil, sys
import aegisbench
names = sorted(m.name for m in pkgutil.walk_packages(aegisbench.__path__, "aegisbench."))
bad = []
for name in names:
    for mod in [m for m in sys.modules if m == "aegisbench" or m.startswith("aegisbench.")]:
        del sys.modules[mod]
    try:
        importlib.import_module(name)
    except Exception as exc:  # report every failure, not the first
        bad.append(f"{name}: {type(exc).__name__}: {exc}")
print(" ".join(names))
print("\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_every_package_is_in_the_wheel(graph):
    """pyproject.toml finds the packages under src/ with an include pattern: every package of
    the import graph must be one setuptools finds (a package it misses is missing from a wheel)."""
    import tomllib
    from pathlib import Path

    from setuptools import find_packages

    root = Path(__file__).resolve().parents[1]
    find = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    found = set(find_packages(where=str(root / find["where"][0]), include=find["include"]))
    packages = {m for m, rel in graph.modules.items() if rel.endswith("__init__.py")}
    assert packages == found, (f"not found by setuptools: {sorted(packages - found)}; "
                               f"found but not in the graph: {sorted(found - packages)}")


def test_walk_packages_sees_every_module_and_each_imports_first(graph):
    """``pkgutil.walk_packages(aegisbench.__path__)`` finds every module (builders and
    pipeline included), and each imports on its own, first, in a clean namespace (catches
    import cycles that only show when a module is imported before its siblings)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    walked = set(proc.stdout.splitlines()[0].split())
    assert {"aegisbench.builders", "aegisbench.builders.build", "aegisbench.pipeline.commands"} <= walked
    assert walked == set(graph.modules) - {"aegisbench"}
