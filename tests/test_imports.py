"""Every module imports on its own, first, in a clean ``aegisbench`` namespace (catches
import cycles that only show when a module is imported before its siblings)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import importlib, pkgutil, sys
import aegisbench
names = sorted(m.name for m in pkgutil.walk_packages(aegisbench.__path__, "aegisbench."))
names += sorted(m.name for m in pkgutil.walk_packages(
    importlib.import_module("aegisbench.builders").__path__, "aegisbench.builders."))
bad = []
for name in names:
    for mod in [m for m in sys.modules if m == "aegisbench" or m.startswith("aegisbench.")]:
        del sys.modules[mod]
    try:
        importlib.import_module(name)
    except Exception as exc:  # report every failure, not the first
        bad.append(f"{name}: {type(exc).__name__}: {exc}")
print(len(names))
print("\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_every_module_imports_first():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert int(proc.stdout.split()[0]) > 40
