"""Fixtures shared by the evaluator tests: the tiny two-track dataset repo of
:mod:`_evalkit` (built once per session) and its index. A module that needs another
``repo`` defines its own fixture of that name, which takes precedence."""

from __future__ import annotations

import sys

# aegisbench first: it caps NumPy/OpenCV/BLAS/torch at one instruction set (aegisbench.isa)
# before any of them loads, so the tests write the bytes of every other machine
if "numpy" in sys.modules:  # pragma: no cover - a plugin imported it before us
    raise RuntimeError("numpy was imported before tests/conftest.py: the instruction-set cap "
                       "(aegisbench.isa) cannot apply; bytes would depend on this CPU")
from aegisbench import pin_isa  # noqa: E402  isort: skip

pin_isa()  # before NumPy: the bytes the tests check are x86-64-v3 bytes on every machine

import os  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

from _evalkit import tiny_repo
from aegisbench.evaluation.dataset import DatasetIndex


# verification records of the test run go to a scratch folder, not the user's ~/.cache
os.environ.setdefault("AEGISBENCH_CACHE", tempfile.mkdtemp(prefix="aegisbench-cache-"))
# the tests' private configuration (attestation key and records) is theirs, never the checkout's private/
os.environ["AEGISBENCH_PRIVATE"] = tempfile.mkdtemp(prefix="aegisbench-private-")


@pytest.fixture(scope="session")
def repo(tmp_path_factory):
    return tiny_repo(tmp_path_factory)


@pytest.fixture(scope="session")
def index(repo):
    return DatasetIndex(repo)
