"""The package's layers are its folders.

A module belongs to the folder it sits in directly under the package (``aegisbench.builders.
build`` to ``builders``); the modules directly in the package belong to the base folder
``aegisbench``. Folders import each other without a cycle, so they stack: a folder's layer is
one above the highest folder it imports (the base imports no folder: layer 0). Modules import
without a cycle too. CLI modules (``aegisbench/cli.py``, its shared options ``cli_options.py``
and every ``commands.py``) only parse arguments and call the library: they may import anything,
and only CLI modules import them.
Only real imports count; a plug-in declared by its module name (a string) is not an import.

``python -m aegisbench.layering`` prints the layers, lowest first.

>>> g = import_graph()
>>> rank = layers(g)
>>> rank["aegisbench"], rank["dataset"] < rank["builders"] < rank["pipeline"]
(0, True)
>>> folder_cycles(g), module_cycles(g)
([], [])
"""

from __future__ import annotations

import sys
from collections import defaultdict

from aegisbench.importgraph import Edge, ImportGraph, import_graph

BASE = "aegisbench"


#: the CLI modules besides the ``commands`` ones: the command line and its shared options
CLI_MODULES = ("aegisbench.cli", "aegisbench.cli_options")


def is_cli(module: str) -> bool:
    """:data:`CLI_MODULES` and every ``*.commands`` module."""
    return module in CLI_MODULES or module.rsplit(".", 1)[-1] == "commands"


def folder_of(graph: ImportGraph, module: str) -> str:
    """The folder directly under the package that holds ``module`` (:data:`BASE` for the
    package's own modules and ``__init__``)."""
    parts = graph.modules[module].split("/")
    return parts[1] if len(parts) > 2 else BASE


def library_edges(graph: ImportGraph) -> list[Edge]:
    """Real imports made by library (non-CLI) modules."""
    return [e for e in graph.edges if e.kind == "import" and not is_cli(e.importer)]


def cli_imports(graph: ImportGraph) -> list[str]:
    """Library modules importing a CLI module, one readable line each."""
    return [f"{e}: library module imports CLI module {e.imported}" for e in library_edges(graph) if is_cli(e.imported)]


def _cycles(nodes: list[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (or with a self-loop), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graphs are small (a few hundred nodes)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in succ.get(v, ()):
                out.append(sorted(comp))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(nodes) + 100))
    try:
        for v in sorted(nodes):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(out)


def module_cycles(graph: ImportGraph) -> list[list[str]]:
    """Import cycles between library modules (each a sorted list of module names)."""
    succ: dict[str, set[str]] = defaultdict(set)
    for e in library_edges(graph):
        if e.importer != e.imported and not is_cli(e.imported):
            succ[e.importer].add(e.imported)
    return _cycles([m for m in graph.modules if not is_cli(m)], succ)


def folder_graph(graph: ImportGraph) -> dict[str, set[str]]:
    """Folder -> the other folders its library modules import."""
    succ: dict[str, set[str]] = defaultdict(set)
    for e in library_edges(graph):
        a, b = folder_of(graph, e.importer), folder_of(graph, e.imported)
        if a != b and not is_cli(e.imported):
            succ[a].add(b)
    return succ


def folder_cycles(graph: ImportGraph) -> list[list[str]]:
    """Cycles between folders (which then could not be layers)."""
    folders = sorted({folder_of(graph, m) for m in graph.modules})
    return _cycles(folders, folder_graph(graph))


def folder_edges(graph: ImportGraph, a: str, b: str) -> list[str]:
    """The imports that make folder ``a`` import folder ``b``, one readable line each."""
    return [str(e) for e in library_edges(graph) if not is_cli(e.imported)
            and folder_of(graph, e.importer) == a and folder_of(graph, e.imported) == b]


def layers(graph: ImportGraph) -> dict[str, int]:
    """Folder -> layer: 0 for a folder that imports no other, else one above the highest it
    imports. Raises ``ValueError`` naming the cycle when the folders do not stack."""
    cyc = folder_cycles(graph)
    if cyc:
        raise ValueError(f"the folders do not stack: import cycle(s) {cyc}")
    succ = folder_graph(graph)
    rank: dict[str, int] = {}

    def of(f: str) -> int:
        if f not in rank:
            rank[f] = 1 + max((of(g) for g in succ.get(f, ())), default=-1)
        return rank[f]

    for f in sorted({folder_of(graph, m) for m in graph.modules}):
        of(f)
    return rank


def main() -> int:
    graph = import_graph()
    rank = layers(graph)
    succ = folder_graph(graph)
    for f in sorted(rank, key=lambda f: (rank[f], f)):
        print(f"layer {rank[f]}  {f:<12} imports {', '.join(sorted(succ.get(f, ()))) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
