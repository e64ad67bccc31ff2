"""Every docstring example in the package runs and prints what it says."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import aegisbench
import aegisbench.builders


def _modules() -> list[str]:
    names = {m.name for m in pkgutil.walk_packages(aegisbench.__path__, "aegisbench.")}
    names |= {m.name for m in pkgutil.walk_packages(aegisbench.builders.__path__, "aegisbench.builders.")}
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name):
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
