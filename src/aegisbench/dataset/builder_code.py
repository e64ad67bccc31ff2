"""The code that decides the bytes of a build, and its hash (the manifest's ``builder_source_hash``).

The build's code is the import closure of :data:`BUILD_ENTRY` (:mod:`aegisbench.importgraph`
reads it from the source files: the module is named, never imported here), so the verifier can
tell a repo written by this very code (its card checked exactly) from one of another version
(its card checked structurally). dvc.yaml's ``build`` stage depends on exactly those files
(``scripts/dvc_deps.py`` writes them, tests check). The source generators and format adapters
are not in it: they decide the source tables, a dependency of their own.

>>> "aegisbench/builders/hfrepo.py" in build_code(), "aegisbench/builders/sources.py" in build_code()
(True, False)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import aegisbench
from aegisbench.importgraph import closure_files

PACKAGE_ROOT = Path(aegisbench.__file__).resolve().parent
#: The module whose import closure decides the bytes of a build from its source tables.
BUILD_ENTRY = "aegisbench.builders.build"


def build_code(package_dir: str | Path = PACKAGE_ROOT) -> tuple[str, ...]:
    """The code that decides the bytes of a build, as sorted paths relative to the project
    root: the import closure of :data:`BUILD_ENTRY` in the package at ``package_dir``
    (default: this one)."""
    return tuple(closure_files(BUILD_ENTRY, package_dir=package_dir))


def builder_source_hash(package_dir: str | Path = PACKAGE_ROOT) -> str:
    """Hash of the code that decides the bytes of a build (:func:`build_code`)."""
    root = Path(package_dir).resolve().parent
    h = hashlib.sha256()
    for rel in build_code(package_dir):
        h.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return h.hexdigest()
