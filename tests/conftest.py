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
from aegisbench.dataset.index import DatasetIndex


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


# ------------------------------------------------------------------ Ray drivers in a child pytest

RAY_MARK = ("ray_driver: connects this process to Ray as its driver. When the whole suite runs, these "
            "tests run in one child pytest (tests/test_ray_isolated.py): a Ray process that dies ends "
            "its driver at once (exit 1, no report), which must fail those tests, not end the suite")
#: the node ids taken out of this session, run by tests/test_ray_isolated.py in a child pytest
RAY_DRIVER_TESTS = pytest.StashKey[list]()


def pytest_configure(config):
    config.addinivalue_line("markers", RAY_MARK)


@pytest.fixture
def ray_driver_tests(request) -> list[str]:
    """The node ids this session moved to the child pytest of tests/test_ray_isolated.py."""
    return request.config.stash.get(RAY_DRIVER_TESTS, [])


def pytest_collection_modifyitems(config, items):
    """With test_ray_isolated.py in the session, move the ray_driver tests to its child pytest
    (run alone, e.g. ``pytest tests/test_ray.py``, they run here as usual)."""
    if not any(item.nodeid.startswith("tests/test_ray_isolated.py") for item in items):
        return
    moved = [item for item in items if item.get_closest_marker("ray_driver")]
    if moved:
        config.stash[RAY_DRIVER_TESTS] = [item.nodeid for item in moved]
        config.hook.pytest_deselected(items=moved)
        items[:] = [item for item in items if not item.get_closest_marker("ray_driver")]
