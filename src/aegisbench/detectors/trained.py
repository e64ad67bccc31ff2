"""What ``train-reference`` recorded beside a weights file (``train.json``) that ``detect`` reads
back with ``--imgsz trained`` and ``--gemm trained``: the inference size and the convolutions'
BLAS the reference was trained and scored on. A missing or malformed record is BadInput naming
the flag.

>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "train.json").write_text(json.dumps({"detect_imgsz": 256, "params": {"gemm": "openblas"}}))
>>> trained_imgsz(str(d / "weights.pt")), trained_gemm(str(d / "weights.pt"))
(256, 'openblas')
"""

from __future__ import annotations

import json
from pathlib import Path

from aegisbench.errors import BadInput
from aegisbench.kernels import GEMMS


def _train_report(weights: str, flag: str) -> tuple[Path, dict]:
    """The ``train.json`` ``train-reference`` wrote beside ``weights`` (BadInput naming ``flag``)."""
    path = Path(weights).with_name("train.json")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"`trained` needs the train.json written beside --weights: {path}: {exc}",
                       where=flag) from None
    if not isinstance(report, dict):
        raise BadInput(f"{path} is not a train-reference report", where=flag)
    return path, report


def trained_imgsz(weights: str) -> int | None:
    """The inference size ``train-reference`` recorded beside ``weights`` (``train.json``
    ``detect_imgsz``; None: native resolution); BadInput naming ``--imgsz`` when there is none."""
    path, report = _train_report(weights, "--imgsz")
    if "detect_imgsz" not in report:
        raise BadInput(f"{path} records no detect_imgsz", where="--imgsz")
    size = report["detect_imgsz"]
    if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
        raise BadInput(f"{path}: detect_imgsz must be an integer or null, got {size!r}", where="--imgsz")
    return size


def trained_gemm(weights: str) -> str:
    """The convolutions' BLAS the weights were trained with (``train.json`` ``params.gemm``;
    ``mkl`` for a report from before the choice existed), so ``detect --gemm trained`` detects on
    the kernels the reference was trained and scored on."""
    path, report = _train_report(weights, "--gemm")
    recipe = report.get("params")
    gemm = recipe.get("gemm", "mkl") if isinstance(recipe, dict) else None
    if gemm not in GEMMS:
        raise BadInput(f"{path}: params.gemm must be one of {', '.join(GEMMS)}, got {gemm!r}", where="--gemm")
    return gemm
