"""AegisBench: per-condition robustness benchmark for disaster-response perception.

>>> import aegisbench
>>> isinstance(aegisbench.__version__, str)
True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("aegisbench")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+local"

__all__ = ["__version__", "load", "pin_isa"]


def load(config: str = "clean", path: str = "data/aegisbench", **kwargs):
    """Load one config of a built AegisBench dataset repo with ``datasets``.

    ``aegisbench.load("low_light_s3")`` is ``datasets.load_dataset("data/aegisbench", "low_light_s3")``.
    """
    import datasets

    return datasets.load_dataset(str(path), config, **kwargs)


def pin_isa() -> str:
    """Cap NumPy, OpenCV, OpenBLAS, numba and torch at the x86-64-v3 instruction set, so the
    bytes this process makes are those of every other x86 machine; returns the profile.

    ``import aegisbench`` changes nothing in the process: the ``aegisbench`` command calls
    this before any of those libraries load, and so must a Python program that builds or
    scores (as its first lines; a library loaded earlier keeps its kernels, and the builders
    then refuse to write). Reading a built dataset needs no cap. See :mod:`aegisbench.isa`.
    """
    from aegisbench import isa

    return isa.pin()
