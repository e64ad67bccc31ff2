"""The import graph: the package's layers are its folders (:mod:`aegisbench.layering`).

Folders import each other without a cycle, so they stack, and each folder's layer is read
from the imports themselves (one above the highest folder it imports), not from a table kept
by hand; modules import without a cycle; library code never imports the CLI. The data flow
(sources -> builders -> dataset repo -> submissions -> evaluation -> results -> leaderboard,
driven by the pipeline) shows in the derived layers: the dataset contract sits below the
builders that write through it and every stage that reads through it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from aegisbench.importgraph import Edge, import_graph, closure_files
from aegisbench.layering import (cli_imports, folder_cycles, folder_edges, folder_graph, folder_of, is_cli, layers,
                                 module_cycles)


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def test_no_library_module_imports_a_cli_module(graph):
    bad = cli_imports(graph)
    assert not bad, "library -> CLI edges:\n  " + "\n  ".join(bad)


def test_no_module_imports_in_a_circle(graph):
    cycles = module_cycles(graph)
    assert not cycles, "import cycles between modules:\n  " + "\n  ".join(" <-> ".join(c) for c in cycles)


def test_the_folders_stack_into_layers(graph):
    cycles = folder_cycles(graph)
    lines = [line for c in cycles for a in c for b in c if a != b for line in folder_edges(graph, a, b)]
    assert not cycles, f"folders importing each other in a circle {cycles}:\n  " + "\n  ".join(lines)


def test_the_layers_follow_the_data_flow(graph):
    """Read from the imports: the base below everything; the dataset contract below the
    builders that write through it and the stages that read through it; evaluation below the
    leaderboard; the pipeline and the hosted service on top."""
    rank = layers(graph)
    assert rank["aegisbench"] == 0 and min(rank.values()) == 0
    below = [("dataset", "builders"), ("dataset", "evaluation"), ("dataset", "detectors"), ("dataset", "forecasters"),
             ("dataset", "leaderboard"), ("evaluation", "leaderboard"), ("builders", "pipeline"),
             ("leaderboard", "pipeline"), ("evaluation", "service"), ("leaderboard", "service")]
    wrong = [f"{a} (layer {rank[a]}) is not below {b} (layer {rank[b]})" for a, b in below if rank[a] >= rank[b]]
    assert not wrong, "\n".join(wrong)
    top = max(rank.values())
    assert {f for f, r in rank.items() if r == top} <= {"pipeline", "service"}, rank


def test_every_import_resolves(graph):
    stale = [str(u) for u in graph.unresolved]
    assert not stale, "imports of aegisbench modules that do not exist:\n  " + "\n  ".join(stale)
    assert is_cli("aegisbench.cli") and is_cli("aegisbench.pipeline.commands") and not is_cli("aegisbench.pipeline")
    assert is_cli("aegisbench.cli_options") and not is_cli("aegisbench.paths")
    assert folder_of(graph, "aegisbench.hashing") == "aegisbench" and folder_of(graph, "aegisbench.builders.build") == "builders"


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
    _write(pkg, "leaderboard/site.py", "from aegisbench.hashing import y\nx = 1\n")
    _write(pkg, "leaderboard/commands.py", "from aegisbench.leaderboard.site import x\n")
    _write(pkg, "evaluation/__init__.py", "")
    _write(pkg, "evaluation/coco.py", "from aegisbench.leaderboard.commands import x\nPLUGIN = 'aegisbench.leaderboard.site'\n")
    g = import_graph(pkg)
    assert cli_imports(g) == ["aegisbench.evaluation.coco -> aegisbench.leaderboard.commands  "
                              "[aegisbench/evaluation/coco.py:1]: library module imports CLI module "
                              "aegisbench.leaderboard.commands"]
    assert module_cycles(g) == [["aegisbench.hashing", "aegisbench.leaderboard.site"]]
    assert folder_cycles(g) == [["aegisbench", "leaderboard"]]
    assert folder_edges(g, "aegisbench", "leaderboard") == [
        "aegisbench.hashing -> aegisbench.leaderboard.site  [aegisbench/hashing.py:1]"]
    assert dict(folder_graph(g)) == {"aegisbench": {"leaderboard"}, "leaderboard": {"aegisbench"}}  # strings: no edge
    with pytest.raises(ValueError, match="do not stack"):
        layers(g)
    _write(pkg, "hashing.py", "y = 1\n")
    assert layers(import_graph(pkg)) == {"aegisbench": 0, "leaderboard": 1, "evaluation": 0}


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
