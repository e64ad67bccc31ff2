"""Test helper: real Ultralytics checkpoints, built from a model YAML and trained for one
epoch on a tiny generated YOLO folder (offline, CPU, seconds), so they carry the training
record ``detect`` requires of a checkpoint."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY_YOLO = ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml"


def _tiny_folder(root: Path, names: tuple[str, ...], size: int) -> Path:
    """Two train and two val frames of noise, each with one box of every class."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for k in range(2):
            cv2.imwrite(str(root / "images" / split / f"{k}.png"), rng.integers(0, 256, (size, size, 3), np.uint8))
            lines = [f"{c} {0.2 + 0.6 * (c + 0.5) / len(names):.4f} 0.5 {0.5 / len(names):.4f} 0.3"
                     for c in range(len(names))]
            (root / "labels" / split / f"{k}.txt").write_text("\n".join(lines) + "\n")
    data = {"path": str(root.resolve()), "train": "images/train", "val": "images/val",
            "names": dict(enumerate(names))}
    (root / "data.yaml").write_text(yaml.safe_dump(data))
    return root / "data.yaml"


@contextmanager
def framework_kernels():
    """Ultralytics' own ``predict`` on the kernels ``detect`` runs a CPU model on (oneDNN
    off, one thread: :func:`aegisbench.kernels.portable`), so its boxes can be compared bit
    for bit with ours."""
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics, keep_threads
    from aegisbench.kernels import portable

    import_ultralytics()
    with portable(1), keep_threads():
        yield


def trained_checkpoint(cfg: str | Path, out: Path, names: tuple[str, ...] = ("person",), kind: str = "yolo",
                       imgsz: int = 64) -> Path:
    """Train the model of ``cfg`` (a model YAML) for one epoch with classes ``names``;
    the final checkpoint (what Ultralytics' trainer writes) is copied to ``out``."""
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    import_ultralytics()
    from ultralytics import RTDETR, YOLO

    work = out.parent / f".{out.stem}-train"
    shutil.rmtree(work, ignore_errors=True)
    data = _tiny_folder(work / "data", tuple(names), imgsz)
    model = (RTDETR if kind == "rtdetr" else YOLO)(str(cfg))
    model.train(data=str(data), epochs=1, imgsz=imgsz, batch=2, workers=0, device="cpu", seed=0,
                deterministic=True, project=str(work.resolve()), name="run", exist_ok=True, plots=False,
                amp=False, val=False, verbose=False, pretrained=False, cache=False, save_period=-1)
    shutil.copyfile(work / "run" / "weights" / "last.pt", out)
    shutil.rmtree(work)
    return out
