"""The static import graph of the ``aegisbench`` package (read with :mod:`ast`, nothing imported).

An edge ``a -> b`` means that running module ``a`` can import module ``b``:

* ``import aegisbench.x.y`` and ``from aegisbench.x import y`` anywhere in the file, at
  module level or inside a function (``if TYPE_CHECKING:`` blocks are skipped: they never
  run); ``from . import y`` and ``from .x import y`` are resolved against the importer;
  ``from P import n`` is an edge to ``P.n`` when ``P.n`` is a module, else to ``P``;
* a string constant in a module-level assignment that is exactly an aegisbench module
  name, optionally followed by ``:attr``
  (``"aegisbench.detectors.ultralytics_adapter:UltralyticsDetector"``): that is how the
  plug-in registries (detector adapters, tracks) name the modules they import.
  :data:`DISPATCHERS` (``aegisbench/cli.py``, whose ``COMMAND_MODULES`` strings are the
  CLI dispatch) are the exception: their strings are not followed.

Importing ``a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py`` first, so the closure of
a module holds the ``__init__`` of every package on the way. The imports inside a package's
module-level ``__getattr__`` (a lazy re-export) are edges of the modules that take an
attribute from the package (``from P import n``, ``import P``), not of ``P`` itself. Only aegisbench's own modules
are nodes; third-party and standard-library imports are ignored.

>>> g = import_graph()
>>> "aegisbench/hashing.py" in g.closure_files("aegisbench.params")
True
>>> g.closure_files("aegisbench.errors")
['aegisbench/__init__.py', 'aegisbench/errors.py', 'aegisbench/isa.py', 'aegisbench/paths.py']
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "aegisbench"
PACKAGE_DIR = Path(__file__).resolve().parent
#: Modules whose string constants are CLI dispatch, not plug-in imports.
DISPATCHERS = frozenset({PACKAGE + ".cli"})
_MODULE_STRING = re.compile(rf"^{PACKAGE}(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_.]*)?$")


@dataclass(frozen=True)
class Edge:
    """``importer`` (the file ``file``) imports ``imported`` at ``line`` (``kind``: ``import``
    or ``string``, a plug-in registry's module name)."""

    importer: str
    imported: str
    kind: str
    file: str
    line: int

    def __post_init__(self) -> None:
        if self.kind not in ("import", "string"):
            raise ValueError(f"edge kind must be 'import' or 'string', got {self.kind!r}")

    def __str__(self) -> str:
        via = " (string)" if self.kind == "string" else ""
        return f"{self.importer} -> {self.imported}{via}  [{self.file}:{self.line}]"


def parents(name: str) -> list[str]:
    """The packages imported before ``name``: ``parents("a.b.c") == ["a", "a.b"]``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _is_type_checking(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt]) -> Iterable[ast.stmt]:
    """Every statement, nested ones included, except the bodies of ``if TYPE_CHECKING:``
    (their ``else`` still runs). Imports are statements, so expressions are not entered."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        inner = [] if _is_type_checking(node) else list(getattr(node, "body", []))
        inner += getattr(node, "orelse", []) + getattr(node, "finalbody", [])
        for part in getattr(node, "handlers", []) + getattr(node, "cases", []):
            inner += part.body
        stack.extend(reversed([n for n in inner if isinstance(n, ast.stmt)]))


@dataclass(frozen=True)
class ImportGraph:
    """Modules (name -> repo-relative path), the edges between them, and the imported
    aegisbench names that are no module here (``unresolved``: a stale import)."""

    modules: dict[str, str]
    edges: tuple[Edge, ...]
    unresolved: tuple[Edge, ...]

    def __post_init__(self) -> None:
        for e in self.edges:
            if e.importer not in self.modules or e.imported not in self.modules:
                raise ValueError(f"edge {e} names a module that is not in the graph")

    def __repr__(self) -> str:
        return f"ImportGraph({len(self.modules)} modules, {len(self.edges)} edges, {len(self.unresolved)} unresolved)"

    @functools.cached_property
    def _out(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set(parents(m)) for m in self.modules}
        for e in self.edges:
            out[e.importer].add(e.imported)
        return out

    def imports(self, name: str) -> list[str]:
        """Modules ``name`` imports directly (its parent packages included), sorted."""
        return sorted(self._out[self._known(name)])

    def closure(self, *entries: str) -> list[str]:
        """Every module that running ``entries`` can import, the entries included, sorted."""
        return sorted(_reach([self._known(e) for e in entries], self._out.__getitem__))

    def closure_files(self, *entries: str) -> list[str]:
        """:meth:`closure` as sorted repo-relative ``.py`` paths."""
        return sorted(self.modules[m] for m in self.closure(*entries))

    def _known(self, name: str) -> str:
        if name not in self.modules:
            raise KeyError(f"{name!r} is not a module of {PACKAGE} (expected e.g. 'aegisbench.builders.build')")
        return name


def _reach(entries: list[str], successors) -> set[str]:
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(set(successors(m)) - seen)
    return seen


def _module_names(package_dir: Path) -> dict[str, str]:
    """Module name -> repo-relative path of every importable module: files in folders that
    are regular packages (with ``__init__.py``); a package shadows a same-named ``.py``."""
    root = package_dir.parent
    names: dict[str, str] = {}
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        folders = [root.joinpath(*rel.parts[:i]) for i in range(1, len(rel.parts))]
        if any(not p.isidentifier() for p in parts) or any(not (f / "__init__.py").is_file() for f in folders):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if name not in names or parts != list(rel.with_suffix("").parts):  # the package wins
            names[name] = rel.as_posix()
    return names


def _resolve_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _strings(node: ast.AST) -> Iterable[tuple[str, int]]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and _MODULE_STRING.match(sub.value):
            yield sub.value.split(":")[0], sub.lineno


def _imports(node: ast.stmt, importer: str, is_package: bool, kind: str) -> list[tuple[str, str, int]]:
    if isinstance(node, ast.Import):
        return [(alias.name, kind, node.lineno) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = _resolve_from(node, importer, is_package)
        lazy = kind == "lazy"
        return [(base, "lazy" if lazy else "base", node.lineno)] + [
            (f"{base}.{a.name}", "lazy" if lazy else "from", node.lineno) for a in node.names if a.name != "*"]
    return []


@functools.lru_cache(maxsize=1024)
def _targets(path: str, importer: str, stamp: tuple[int, int]) -> tuple[tuple[str, str, int], ...]:
    """(name, kind, line) of every aegisbench name the module at ``path`` imports (``stamp``:
    mtime and size, so an edited file is read again). Kinds: ``import`` (``import M``),
    ``base`` (``P`` of ``from P import n``), ``from`` (its ``P.n``: a module or an attribute), ``string`` (a
    plug-in registry's module name), ``lazy`` (in a package's module-level ``__getattr__``)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    is_package = path.endswith("__init__.py")
    out = []
    for top in tree.body:
        lazy = is_package and isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
        for node in _statements([top]):
            out += _imports(node, importer, is_package, "lazy" if lazy else "import")
    if importer not in DISPATCHERS:  # plug-in registries: module-level assignments of module names
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                out += [(name, "string", line) for name, line in _strings(node.value)]
    return tuple((t, k, line) for t, k, line in out if t == PACKAGE or t.startswith(PACKAGE + "."))


class _Reader:
    """Reads the edges of the modules under one package folder, on demand."""

    def __init__(self, package_dir: str | Path | None):
        self.package_dir = Path(package_dir).resolve() if package_dir is not None else PACKAGE_DIR
        self.root = self.package_dir.parent
        self.modules = _module_names(self.package_dir)

    def targets(self, name: str) -> tuple[tuple[str, str, int], ...]:
        path = self.root / self.modules[name]
        st = path.stat()
        return _targets(str(path), name, (st.st_mtime_ns, st.st_size))

    def lazy(self, package: str) -> list[str]:
        """Modules a package's ``__getattr__`` imports (what ``from package import n`` can run)."""
        if package not in self.modules or not self.modules[package].endswith("__init__.py"):
            return []
        return [t for t, kind, _ in self.targets(package) if kind == "lazy" and t in self.modules]

    def edges(self, name: str) -> tuple[list[Edge], list[Edge]]:
        """The edges out of module ``name``, and its unresolved imports.

        A package's lazy ``__getattr__`` imports are edges of the modules that take an
        attribute from it (``from P import n``, ``import P``), not of the package itself:
        importing ``P.sub`` does not run them."""
        rel = self.modules[name]
        edges: dict[str, Edge] = {}
        unresolved = []
        for target, kind, line in self.targets(name):
            found = [target] if target in self.modules else []
            if kind == "from" and not found:  # `from P import n`, n an attribute of P
                found = self.lazy(target.rsplit(".", 1)[0])
            elif kind == "import" and found:  # `import P`: P.n may be used
                found += self.lazy(target)
            elif kind in ("import", "base") and not found:
                unresolved.append(Edge(name, target, "import", rel, line))
            for t in found if kind != "lazy" else ():
                if t != name:
                    edges.setdefault(t, Edge(name, t, "string" if kind == "string" else "import", rel, line))
        return list(edges.values()), unresolved


def import_graph(package_dir: str | Path | None = None) -> ImportGraph:
    """Parse every module under ``package_dir`` (default: this package) into an :class:`ImportGraph`."""
    reader = _Reader(package_dir)
    edges: list[Edge] = []
    unresolved: list[Edge] = []
    for name in reader.modules:
        e, u = reader.edges(name)
        edges += e
        unresolved += u
    return ImportGraph(reader.modules, tuple(edges), tuple(unresolved))


def closure_files(*entries: str, package_dir: str | Path | None = None) -> list[str]:
    """:meth:`ImportGraph.closure_files` of ``entries``, reading only the modules they reach.

    >>> closure_files("aegisbench.hashing")
    ['aegisbench/__init__.py', 'aegisbench/errors.py', 'aegisbench/hashing.py', 'aegisbench/isa.py', 'aegisbench/paths.py']
    """
    reader = _Reader(package_dir)
    for e in entries:
        if e not in reader.modules:
            raise KeyError(f"{e!r} is not a module of {PACKAGE} (expected e.g. 'aegisbench.builders.build')")

    def successors(m: str) -> list[str]:
        return parents(m) + [e.imported for e in reader.edges(m)[0]]

    return sorted(reader.modules[m] for m in _reach(list(entries), successors))
