"""Ultralytics adapters: YOLO (v8, 11 and newer) and RT-DETR, from a trained ``.pt`` checkpoint.

Nothing is downloaded: weights must be a local file. A model YAML (which builds an
untrained network) is refused, and so is a checkpoint without the record Ultralytics'
trainer writes into every checkpoint it saves (``train_args``), such as a model built
from its YAML and saved. Ultralytics is imported with ``YOLO_OFFLINE=1`` (no
connectivity probe, no telemetry) and ``ULTRALYTICS_SAFE_LOAD=1`` (checkpoints load
with ``torch.load(weights_only=True)`` against Ultralytics' allow-list); if it was
imported earlier without that flag, the checkpoint is first loaded once with
``torch_safe_load(..., safe_only=True)`` so an unsafe pickle never reaches the full
loader. Frames reach the framework's own predictor (letterbox, NMS, rescaling), as
BGR arrays, with ``conf`` near zero; with a class map (``options.classes``) only the
mapped classes enter its NMS (class-agnostic among them) and the per-window cap, and
every box is labelled with the target. WARP noise at the model input is added by a
subclass of the model's predictor whose ``preprocess`` puts it on the batch tensor
(after letterbox, BGR->RGB and /255), one keyed generator per window.

>>> _native_imgsz(640, 480), _native_imgsz(1000, 1024), _native_imgsz(100, 70)
(640, 1024, 128)
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np

from aegisbench.detectors.interface import Detector, DetectorOptions, InputNoise, add_input_noise, check_weights
from aegisbench.errors import BadInput
from aegisbench.predictions import Detections

log = logging.getLogger(__name__)

_YAML = (".yaml", ".yml")
TRAINED_KEY = "train_args"  # written by Ultralytics' trainer into every checkpoint it saves


def import_ultralytics():
    """Import ``ultralytics`` offline and with safe checkpoint loading, keeping torch's
    CPU thread count (the import sets ``OMP_NUM_THREADS=1`` when it is unset; note that
    Ultralytics' predictor and trainer then set cores - 1 threads on CPU themselves)."""
    import sys

    fresh = "ultralytics" not in sys.modules
    if fresh:
        os.environ.setdefault("YOLO_OFFLINE", "1")
        os.environ.setdefault("ULTRALYTICS_SAFE_LOAD", "1")
    import torch

    threads = torch.get_num_threads()
    import ultralytics

    if fresh and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    if fresh:  # its logger prints to stdout in colour: the command line's handler instead
        from aegisbench.logs import adopt
        adopt("ultralytics")
    return ultralytics


def _native_imgsz(width: int, height: int, stride: int = 32) -> int:
    """Longer side rounded up to the stride: the model input keeps native resolution."""
    return int(-(-max(width, height) // stride) * stride)


def check_trained(model, weights: str) -> None:
    """BadInput unless the loaded checkpoint holds a network and the training record of
    Ultralytics' trainer (a model built from its YAML and saved has neither record nor training)."""
    import torch

    ckpt = getattr(model, "ckpt", None)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get(TRAINED_KEY), dict) or not ckpt[TRAINED_KEY]:
        raise BadInput(f"checkpoint holds no trained weights (no {TRAINED_KEY!r} training record: a model built "
                       "from its YAML and saved is untrained); pass a checkpoint written by training", where=weights)
    net = ckpt.get("ema") or ckpt.get("model")
    if not isinstance(net, torch.nn.Module) or not net.state_dict():
        raise BadInput("checkpoint holds no 'model' with weights", where=weights)


class _Pending:
    """The noise of the frames of the running ``predict`` call, consumed batch by batch."""

    def __init__(self) -> None:
        self.noise: InputNoise | None = None
        self.used = 0

    def set(self, noise: InputNoise | None) -> None:
        self.noise, self.used = noise, 0

    def take(self, n: int) -> InputNoise | None:
        if self.noise is None:
            return None
        keys = self.noise.keys[self.used:self.used + n]
        if len(keys) != n:
            raise RuntimeError(f"the predictor preprocessed {self.used + n} frames, noise was given for "
                               f"{len(self.noise.keys)}")
        self.used += n
        return InputNoise(self.noise.level, keys)


def noisy_predictor(base: type, pending: _Pending) -> type:
    """Subclass of the predictor class ``base`` adding ``pending``'s noise to the tensor
    its ``preprocess`` returns (the exact model input); unchanged while none is pending."""

    class AegisPredictor(base):
        def preprocess(self, im):
            x = super().preprocess(im)
            noise = pending.take(len(x))
            return x if noise is None else add_input_noise(x, noise)

    AegisPredictor.__name__ = AegisPredictor.__qualname__ = f"Aegis{base.__name__}"
    return AegisPredictor


class UltralyticsDetector(Detector):
    """``yolo`` or ``rtdetr`` through ``ultralytics.YOLO`` / ``ultralytics.RTDETR``."""

    input_noise = True

    def __init__(self, kind: str, weights: str | Path, options: DetectorOptions):
        if kind not in ("yolo", "rtdetr"):
            raise BadInput(f"not an Ultralytics detector kind: {kind!r}", where="--detector")
        super().__init__(options)
        self.name = kind
        self.weights = str(weights)
        self.model = self._load(kind, str(weights))
        self.names = dict(self.model.names)
        self._pending = _Pending()
        self._predictor = noisy_predictor(self.model.task_map[self.model.task]["predictor"], self._pending)

    @staticmethod
    def _load(kind: str, weights: str):
        import_ultralytics()
        from ultralytics import RTDETR, YOLO
        from ultralytics.nn import tasks

        lower = weights.lower()
        if lower.endswith(_YAML):
            raise BadInput("a model YAML builds an untrained network; pass a trained .pt checkpoint "
                           "(e.g. from aegisbench train-reference)", where=weights)
        if lower.endswith(".pt"):
            path = check_weights(weights)
            if not tasks.SAFE_LOAD:
                _safe_precheck(str(path))
            try:
                model = (RTDETR if kind == "rtdetr" else YOLO)(str(path.resolve()))
            except (TypeError, ModuleNotFoundError, KeyError, AttributeError, RuntimeError, EOFError) as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise BadInput(f"not a loadable Ultralytics checkpoint: {first}", where=weights) from None
        else:
            raise BadInput("Ultralytics weights must be a trained .pt checkpoint", where=weights)
        net = model.model
        is_rtdetr = isinstance(net, tasks.RTDETRDetectionModel)
        if getattr(model, "task", None) != "detect" or not isinstance(net, tasks.DetectionModel):
            raise BadInput(f"checkpoint is not a detector (task {getattr(model, 'task', None)!r})", where=weights)
        if is_rtdetr != (kind == "rtdetr"):
            want = "an RT-DETR" if kind == "rtdetr" else "a YOLO"
            raise BadInput(f"checkpoint is not {want} model ({type(net).__name__}); "
                           f"use --detector {'rtdetr' if is_rtdetr else 'yolo'}", where=weights)
        check_trained(model, weights)
        return model

    def describe(self) -> dict:
        return {"detector": self.name, "weights": Path(self.weights).name,
                "architecture": type(self.model.model).__name__, "classes": list(self.names.values())}

    def predict_windows(self, windows: list[np.ndarray], noise: InputNoise | None = None) -> list[Detections]:
        h, w = windows[0].shape[:2]
        o = self.options
        imgsz = o.imgsz or _native_imgsz(w, h)
        bgr = [np.ascontiguousarray(x[..., ::-1]) for x in windows]
        kw = dict(imgsz=imgsz, conf=float(o.conf), iou=0.7 if o.nms_iou is None else float(o.nms_iou),
                  max_det=o.max_det, device=o.device, verbose=False, save=False, **precision_args(o.half))
        if o.classes is not None:  # other classes never reach the NMS or the cap; mapped ones are one class
            kw.update(classes=list(o.classes.ids), agnostic_nms=True)

        def run(idx: list[int]) -> list:
            self._pending.set(None if noise is None else InputNoise(noise.level, tuple(noise.keys[i] for i in idx)))
            try:
                return self.model.predict([bgr[i] for i in idx], batch=len(idx), predictor=self._predictor, **kw)
            finally:
                self._pending.set(None)

        results = _guarded(run, list(range(len(bgr))))
        return [self._to_detections(r) for r in results]

    def _to_detections(self, result) -> Detections:
        boxes = result.boxes
        xyxy = boxes.xyxy.float().cpu().numpy().astype(np.float32).reshape(-1, 4)
        score = np.clip(boxes.conf.float().cpu().numpy().astype(np.float32), 0.0, 1.0)
        cls = boxes.cls.cpu().numpy().astype(np.int64)
        label = np.array([str(self.names.get(int(c), int(c))) for c in cls], dtype=object)
        ok = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
        if self.options.classes is not None:
            ok &= np.isin(cls, self.options.classes.ids)
            label[:] = self.options.classes.target
        return Detections(xyxy[ok], score[ok], label[ok])


class _NmsTimeLimit(logging.Handler):
    """Notices Ultralytics' "NMS time limit exceeded" warning: past its wall-clock limit
    (2 s + 0.05 s per image) its NMS stops and the rest of the batch gets no boxes."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hit = False

    def emit(self, record: logging.LogRecord) -> None:
        if "NMS time limit" in record.getMessage():
            self.hit = True


def _run_watched(fn, frames: list) -> tuple[list, bool]:
    logger = logging.getLogger("ultralytics")
    watch, level = _NmsTimeLimit(), logger.level
    logger.addHandler(watch)
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        return list(fn(frames)), watch.hit
    finally:
        logger.removeHandler(watch)
        logger.setLevel(level)


def _guarded(fn, frames: list, retries: int = 2) -> list:
    """``fn(frames)`` (frames or their indices), never with silently dropped boxes: a
    batch whose NMS hit the time limit is rerun one frame at a time; a frame that still
    hits it after ``retries`` tries raises (lower ``--batch`` or raise ``--conf``)."""
    results, hit = _run_watched(fn, frames)
    if not hit:
        return results
    log.warning("NMS time limit exceeded on a batch of %d; rerunning it frame by frame", len(frames))
    out = []
    for frame in frames:
        for _ in range(retries):
            one, hit = _run_watched(fn, [frame])
            if not hit:
                break
        if hit:
            raise RuntimeError("Ultralytics NMS time limit exceeded on a single frame: its detections would be "
                               "dropped silently; raise --conf or run on a less loaded machine")
        out += one
    return out


def precision_args(half: bool) -> dict:
    """FP16 request in this Ultralytics release's terms (``quantize`` replaced ``half``)."""
    from ultralytics.cfg import DEFAULT_CFG_DICT

    if "quantize" in DEFAULT_CFG_DICT:
        return {"quantize": 16 if half else None}
    return {"half": half}


def _safe_precheck(path: str) -> None:
    """Load once with ``weights_only=True`` (Ultralytics' allow-list) before the full load."""
    from ultralytics.nn.tasks import torch_safe_load

    try:
        torch_safe_load(path, safe_only=True)
    except (TypeError, ModuleNotFoundError, RuntimeError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"not a loadable Ultralytics checkpoint: {first}", where=path) from None
