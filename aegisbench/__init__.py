"""AegisBench: per-condition robustness benchmark for disaster-response perception.

>>> import aegisbench
>>> isinstance(aegisbench.__version__, str)
True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _version

from aegisbench import isa as _isa

#: Every library loaded after this line runs x86-64-v3 kernels (see :mod:`aegisbench.isa`).
ISA_PROFILE = _isa.pin()

try:
    __version__ = _version("aegisbench")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+local"

__all__ = ["__version__", "load"]


def load(config: str = "clean", path: str = "data/aegisbench", **kwargs):
    """Load one config of a built AegisBench dataset repo with ``datasets``.

    ``aegisbench.load("low_light_s3")`` is ``datasets.load_dataset("data/aegisbench", "low_light_s3")``.
    """
    import datasets

    return datasets.load_dataset(str(path), config, **kwargs)
