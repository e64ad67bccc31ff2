"""Layout a newcomer reads in one step: every module of the package at most
:data:`MAX_MODULE_LINES` lines, every function (methods and nested functions included) at
most :data:`MAX_FUNCTION_LINES` lines from its ``def`` to its last line. Compiled numba
kernels (decorated with ``numba.njit`` / ``numba.jit``, however imported) are exempt: a
kernel is split only at the cost of calls the compiler may not inline."""

from __future__ import annotations

import ast
from pathlib import Path

import aegisbench

PACKAGE = Path(aegisbench.__file__).resolve().parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
NUMBA_DECORATORS = ("njit", "jit")


def _numba_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names bound to the numba module, names bound to numba's ``njit`` / ``jit``)."""
    modules, decorators = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name == "numba"}
        elif isinstance(node, ast.ImportFrom) and node.module == "numba":
            decorators |= {a.asname or a.name for a in node.names if a.name in NUMBA_DECORATORS}
    return modules, decorators


def is_numba_kernel(fn: ast.FunctionDef | ast.AsyncFunctionDef, modules: set[str], decorators: set[str]) -> bool:
    """Whether ``fn`` is decorated with numba's njit / jit (bare or called with options)."""
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Name) and target.id in decorators:
            return True
        if (isinstance(target, ast.Attribute) and target.attr in NUMBA_DECORATORS
                and isinstance(target.value, ast.Name) and target.value.id in modules):
            return True
    return False


def offenders(source: str, name: str) -> list[str]:
    """One line per module or function of ``source`` (called ``name``) over the limits."""
    out = []
    n_lines = len(source.splitlines())
    if n_lines > MAX_MODULE_LINES:
        out.append(f"{name}: module has {n_lines} lines (at most {MAX_MODULE_LINES})")
    tree = ast.parse(source)
    modules, decorators = _numba_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES and not is_numba_kernel(node, modules, decorators):
                out.append(f"{name}:{node.lineno}: function {node.name} has {length} lines "
                           f"(at most {MAX_FUNCTION_LINES})")
    return out


def test_modules_and_functions_are_short():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50  # the package itself, not an empty folder
    found = [line for path in files
             for line in offenders(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE.parent).as_posix())]
    assert not found, "split these (tests/test_layout.py):\n  " + "\n  ".join(found)


def _function(header: str, indent: str = "", n_body: int = MAX_FUNCTION_LINES) -> str:
    """``header`` (decorator and ``def`` lines) and a body that makes the ``def`` ``n_body + 1`` lines long."""
    return "\n".join([*(indent + h for h in header.splitlines()),
                      *(f"{indent}    x{i} = {i}" for i in range(n_body))]) + "\n"


def test_the_check_names_long_modules_and_functions_and_exempts_only_numba_kernels():
    source = ("import numba\nimport numba as nb\nfrom numba import njit as fast\nimport jax\n\n"
              + _function("@numba.njit(cache=True)\ndef kernel_a():")
              + _function("@nb.jit\ndef kernel_b():")
              + _function("@fast\ndef kernel_c():")
              + _function("@jax.jit\ndef not_numba():")
              + "class C:\n" + _function("def method(self):", indent="    ")
              + _function("def short_enough():", n_body=MAX_FUNCTION_LINES - 1))
    found = offenders(source, "demo.py")
    assert [f.split(" function ")[1].split(" ")[0] for f in found] == ["not_numba", "method"], found
    assert all(f.startswith("demo.py:") and f.endswith(" has 61 lines (at most 60)") for f in found), found
    long_module = "\n".join(f"x{i} = {i}" for i in range(MAX_MODULE_LINES + 1))
    assert offenders(long_module, "big.py") == ["big.py: module has 401 lines (at most 400)"]
    assert offenders("\n".join(f"x{i} = {i}" for i in range(MAX_MODULE_LINES)), "ok.py") == []
