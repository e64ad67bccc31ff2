"""Fixtures shared by the evaluator tests: the tiny two-track dataset repo of
:mod:`_evalkit` (built once per session) and its index. A module that needs another
``repo`` defines its own fixture of that name, which takes precedence."""

from __future__ import annotations

import os
import tempfile

import pytest

from _evalkit import tiny_repo
from aegisbench.evaluation.dataset import DatasetIndex


# verification records of the test run go to a scratch folder, not the user's ~/.cache
os.environ.setdefault("AEGISBENCH_CACHE", tempfile.mkdtemp(prefix="aegisbench-cache-"))


@pytest.fixture(scope="session")
def repo(tmp_path_factory):
    return tiny_repo(tmp_path_factory)


@pytest.fixture(scope="session")
def index(repo):
    return DatasetIndex(repo)
