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


def load(config: str = "clean", path: str | None = None, **kwargs):
    """Load one config of a built AegisBench dataset repo with ``datasets``.

    ``path`` defaults to the project's dataset repo, found from the working directory at any
    depth inside the project: ``./aegisbench`` in the root (``paths.dataset`` of the root's
    ``params.yaml`` when it names another). From the root, ``aegisbench.load("low_light_s3")``
    is ``datasets.load_dataset("aegisbench", "low_light_s3")``.
    """
    import datasets

    if path is None:
        from aegisbench.paths import PARAMS, dataset_dir, project_root

        root, path = project_root(), dataset_dir()
        if root is not None and (root / PARAMS).is_file():
            import yaml

            raw = yaml.safe_load((root / PARAMS).read_text(encoding="utf-8")) or {}
            named = (raw.get("paths") or {}).get("dataset") if isinstance(raw, dict) else None
            if isinstance(named, str) and named:
                path = root / named
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
