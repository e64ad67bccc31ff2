"""One interface for every wrapped detector.

``Detector.predict(images)`` takes a batch of full RGB uint8 frames and returns one
validated :class:`~aegisbench.predictions.Detections` per frame, in full-frame
pixels. Adapters only implement ``predict_windows`` (model inference on crops, boxes
in crop pixels); tiling, exact remapping, seam merging and batching live here, so
every architecture sees identical inputs (seed 004).

WARP global noise (seed 000) can be added to the tensor the model actually sees:
``predict(images, noise=InputNoise(a, keys))`` hands each window a stable key
(frame key + window index) and adapters with ``input_noise = True`` apply
:func:`warp_input_noise` after their own letterbox/resize/normalisation.

>>> opts = DetectorOptions(device="cpu", batch=4)
>>> opts.tiling.tile, opts.conf
(1024, 0.001)
>>> DETECTORS.names()  # the adapter modules register them (imported on first read, torch on use)
('yolo', 'rtdetr', 'fasterrcnn')
"""

from __future__ import annotations

import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aegisbench.detectors.classes import ClassMap, resolve_classes
from aegisbench.detectors.tiling import TilingParams, cap_detections, merge_windows, tile_windows
from aegisbench.errors import BadInput
from aegisbench.fields import FieldError, check_bool, check_float, check_int
from aegisbench.hashing import rng_for
from aegisbench.kernels import check_gemm, describe as describe_kernels, portable
from aegisbench.predictions import Detections
from aegisbench.registry import Registry
from aegisbench.vocab import WARP_NOISE

log = logging.getLogger(__name__)

#: Detector name -> adapter class ``cls(name, weights, options)``; each adapter module registers
#: its names (declared here by module name; an adapter imports torch only when it loads a model).
DETECTORS: Registry[type] = Registry(
    "detector", plugins=("aegisbench.detectors.ultralytics_adapter", "aegisbench.detectors.torchvision_adapter"))
_DEVICE = re.compile(r"^(cpu|auto|cuda|cuda:\d+)$")
WARP_INPUT = "model_input"  # how `detect` applies WARP noise configs with wrapped detectors


@dataclass(frozen=True)
class DetectorOptions:
    """Inference settings shared by all adapters.

    ``batch`` is windows (tiles or whole frames) per forward pass; ``conf`` the score
    floor handed to the model (near zero: the evaluator sees unthresholded output);
    ``max_det`` caps each window, ``max_det_frame`` each merged frame (the
    validator's default per-image cap is 1000); ``imgsz`` None keeps native resolution (the model input is the window itself,
    padded to the stride), an int resizes the longer window side to it; ``nms_iou``
    is the model's own NMS IoU where it has one (None: the framework default, 0.7 for
    Ultralytics, 0.5 for torchvision); ``half`` is FP16 on CUDA only; ``classes`` the
    model classes kept and written as the track's label (None: every class, its own name);
    ``threads`` the torch threads of a CPU model, which runs with oneDNN off
    (:func:`aegisbench.kernels.portable`): the same predictions on every x86-64 machine for
    the same thread count (``onednn=True``: faster, the predictions then depend on the CPU;
    the record says so); ``gemm`` where its convolutions' matrix products run
    (:data:`aegisbench.kernels.GEMMS`: ``openblas`` is faster, the same on every x86-64-v3 CPU,
    and not the bytes of ``mkl``).
    """

    device: str = "cpu"
    batch: int = 8
    half: bool = False
    conf: float = 0.001
    max_det: int = 300
    max_det_frame: int = 1000
    imgsz: int | None = None
    nms_iou: float | None = None
    tiling: TilingParams = field(default_factory=TilingParams)
    classes: ClassMap | None = None
    threads: int = 1
    onednn: bool = False
    gemm: str = "mkl"

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise BadInput(f"device must be cpu, cuda, cuda:N or auto, got {self.device!r}", where="--device")
        for name in ("batch", "max_det", "max_det_frame", "threads"):
            check_int(getattr(self, name), name, lo=1, error=BadInput, where=f"--{name.replace('_', '-')}")
        check_bool(self.half, "half")
        check_bool(self.onednn, "onednn")
        try:
            check_gemm(self.gemm, "gemm", onednn=self.onednn)
        except ValueError as exc:
            raise BadInput(str(exc), where="--gemm") from None
        check_float(self.conf, "conf", 0.0, 1.0, hi_open=True, error=BadInput, where="--conf")
        if self.nms_iou is not None:
            check_float(self.nms_iou, "nms_iou", 0.0, 1.0, lo_open=True, error=BadInput, where="--nms-iou")
        if self.imgsz is not None:
            check_int(self.imgsz, "imgsz", lo=32, error=BadInput, where="--imgsz")
        if not isinstance(self.tiling, TilingParams):
            raise TypeError("tiling must be TilingParams")
        if self.classes is not None and not isinstance(self.classes, ClassMap):
            raise TypeError("classes must be a ClassMap or None")


def resolve_device(device: str) -> str:
    """``cpu``, ``cuda:N`` (checked to exist) or, for ``auto``, the first GPU if any else
    ``cpu``. An absent CUDA device is bad input; only ``auto`` falls back.

    >>> resolve_device("cpu")
    'cpu'
    """
    if device == "cpu":
        return "cpu"
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "auto":
        return "cuda:0" if n else "cpu"
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= n:
        raise BadInput(f"CUDA device {device} is not available ({n} GPU(s) visible); "
                       "use --device cpu, or --device auto to fall back", where="--device")
    return f"cuda:{index}"


@dataclass
class Throughput:
    """Counters of a run: frames, windows, seconds spent inside ``predict``."""

    frames: int = 0
    windows: int = 0
    seconds: float = 0.0

    def add(self, other: "Throughput") -> None:
        self.frames += other.frames
        self.windows += other.windows
        self.seconds += other.seconds


@dataclass(frozen=True)
class InputNoise:
    """WARP global noise at the model input: level ``a`` in [0, 1] and one stable key
    (a tuple) per frame (or per window, once :meth:`Detector.predict` has split frames).

    >>> InputNoise(0.1, (("v", "img"),)).for_windows([(0, 0), (0, 1)]).keys
    (('v', 'img', 0), ('v', 'img', 1))
    """

    level: float
    keys: tuple[tuple, ...]

    def __post_init__(self) -> None:
        try:
            check_float(self.level, "a", 0.0, 1.0)
        except FieldError as exc:
            raise BadInput(f"noise level a {exc.detail}", where=WARP_NOISE) from None
        if not isinstance(self.keys, tuple) or not all(isinstance(k, tuple) for k in self.keys):
            raise TypeError("InputNoise.keys must be a tuple of tuples")

    def for_windows(self, windows: Sequence[tuple[int, int]]) -> "InputNoise":
        """Keys of ``(frame, window index)`` pairs: the frame's key plus the window index."""
        return InputNoise(self.level, tuple((*self.keys[f], k) for f, k in windows))


def warp_input_noise(x, a: float, rng: np.random.Generator):
    """Seed 000's ``x' = (1 - a) x + a * sigma * r`` on one model-input tensor ``x`` (any
    shape), ``sigma`` its own (population) standard deviation over all elements,
    ``r ~ N(0, 1)`` per element drawn from ``rng`` on the CPU; float, no rounding or
    clipping; returned in ``x``'s dtype and device."""
    import torch

    xf = x.float()
    sigma = xf.std(correction=0)
    r = torch.from_numpy(rng.standard_normal(tuple(x.shape), dtype=np.float32)).to(x.device)
    return (xf * (1.0 - float(a)) + r * (sigma * float(a))).to(x.dtype)


def add_input_noise(batch, noise: InputNoise):
    """:func:`warp_input_noise` on each image of a ``(N, ...)`` batch, image ``i`` with the
    generator of ``noise.keys[i]`` (so noise never depends on the batch it sits in)."""
    import torch

    if len(noise.keys) != len(batch):
        raise ValueError(f"{len(noise.keys)} noise keys for a batch of {len(batch)}")
    return torch.stack([warp_input_noise(x, noise.level, rng_for("warp_input_noise", *k))
                        for x, k in zip(batch, noise.keys)])


class Detector(ABC):
    """A wrapped detector. Subclasses set ``name`` and implement ``predict_windows``;
    those that can add WARP noise at the model input set ``input_noise = True`` and take
    ``noise`` (an :class:`InputNoise` with one key per window) in ``predict_windows``;
    ``names`` maps the model's class ids to names."""

    name: str = "detector"
    input_noise: bool = False

    def __init__(self, options: DetectorOptions):
        self.options = options
        self.stats = Throughput()
        self.names: dict[int, str] = {}

    def map_classes(self, target: str, spec: str | None = None) -> ClassMap:
        """Keep only the model classes ``spec`` names (default: see
        :func:`~aegisbench.detectors.classes.resolve_classes`), written as ``target``."""
        from dataclasses import replace

        classes = resolve_classes(self.names, spec, target)
        self.options = replace(self.options, classes=classes)
        return classes

    @abstractmethod
    def predict_windows(self, windows: list[np.ndarray]) -> list[Detections]:
        """Run the model on same-shape RGB crops (at most ``options.batch``); boxes in
        crop pixels, scores in [0, 1]. Called with ``noise=`` only when ``input_noise``."""

    def describe(self) -> dict:
        """What identifies the model and decides its output, the kernels it runs on included
        (for submission.yaml and resume keys)."""
        return {"detector": self.name, "kernels": self.kernels()}

    def parameters(self) -> int | None:
        """Trainable parameters of the loaded network (None when the adapter cannot tell)."""
        net = getattr(self, "network", None)
        return None if net is None else int(sum(p.numel() for p in net.parameters() if p.requires_grad) or
                                            sum(p.numel() for p in net.parameters()))

    def kernels(self) -> str:
        """The kernels the model runs with (:func:`aegisbench.kernels.describe`), recorded per run."""
        return describe_kernels(self.options.threads, onednn=self.options.onednn, device=self.options.device,
                                gemm=self.options.gemm)

    def predict(self, images: Sequence[np.ndarray], noise: InputNoise | None = None) -> list[Detections]:
        """Detections of each full frame (RGB uint8 ``(H, W, 3)``) in frame pixels; with
        ``noise`` (one key per frame) WARP noise is added to every window's model input.
        On the CPU the model runs in :func:`aegisbench.kernels.portable` (``options.threads``)."""
        if not self.options.device.startswith("cpu"):
            return self._predict(images, noise)
        with portable(self.options.threads, onednn=self.options.onednn, gemm=self.options.gemm):
            return self._predict(images, noise)

    def _predict(self, images: Sequence[np.ndarray], noise: InputNoise | None) -> list[Detections]:
        t0 = time.perf_counter()
        if noise is not None:
            if not self.input_noise:
                raise BadInput(f"detector {self.name!r} cannot add noise at its model input", where="--detector")
            if not isinstance(noise, InputNoise) or len(noise.keys) != len(images):
                raise ValueError("noise must be an InputNoise with one key per image")
        plans = []
        crops: list[tuple[int, int, np.ndarray]] = []  # (frame, window index, crop)
        for f, img in enumerate(images):
            if not (isinstance(img, np.ndarray) and img.ndim == 3 and img.shape[2] == 3 and img.dtype == np.uint8):
                raise TypeError(f"image {f} must be RGB uint8 (H, W, 3)")
            h, w = img.shape[:2]
            wins = tile_windows(w, h, self.options.tiling)
            plans.append(wins)
            for k, (x0, y0, x1, y1) in enumerate(wins.tolist()):
                crops.append((f, k, img[y0:y1, x0:x1]))
        results: dict[tuple[int, int], Detections] = {}
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i, (_, _, c) in enumerate(crops):
            by_shape.setdefault(c.shape[:2], []).append(i)
        bs = self.options.batch
        for idx in by_shape.values():
            for s in range(0, len(idx), bs):
                chunk = idx[s:s + bs]
                wins = [crops[i][2] for i in chunk]
                out = (self.predict_windows(wins) if noise is None else
                       self.predict_windows(wins, noise=noise.for_windows([crops[i][:2] for i in chunk])))
                if len(out) != len(chunk):
                    raise RuntimeError(f"{self.name}: {len(out)} results for {len(chunk)} windows")
                for i, det in zip(chunk, out):
                    results[crops[i][:2]] = det
        merged = []
        for f, (img, wins) in enumerate(zip(images, plans)):
            parts = [results[(f, k)] for k in range(len(wins))]
            det = merge_windows(parts, wins, img.shape[1], img.shape[0], self.options.tiling)
            merged.append(cap_detections(det, self.options.max_det_frame))
        self.stats.add(Throughput(len(images), len(crops), time.perf_counter() - t0))
        return merged


def check_weights(path: str | Path) -> Path:
    """A local, readable weights file, else BadInput (nothing is ever downloaded)."""
    p = Path(path)
    if not p.exists():
        raise BadInput("weights file not found (weights are always a local path)", where=str(p))
    if not p.is_file():
        raise BadInput("weights path is not a file", where=str(p))
    try:
        with open(p, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise BadInput(f"weights file is unreadable: {exc.strerror}", where=str(p)) from None
    return p


def load_detector(kind: str, weights: str | Path, options: DetectorOptions | None = None) -> Detector:
    """Build the adapter registered as ``kind`` (one of :data:`DETECTORS`)."""
    if kind not in DETECTORS:
        raise BadInput(f"unknown detector {kind!r}; expected one of {sorted(DETECTORS)}", where="--detector")
    options = options or DetectorOptions()
    options = _with_device(options, resolve_device(options.device))
    return DETECTORS.get(kind)(kind, weights, options)


def _with_device(options: DetectorOptions, device: str) -> DetectorOptions:
    from dataclasses import replace

    half = options.half and device.startswith("cuda")
    if options.half and not half:
        log.warning("half precision is only used on CUDA; running FP32 on %s", device)
    return replace(options, device=device, half=half)
