"""Ultralytics adapters: YOLO (v8, 11 and newer) and RT-DETR, from a trained ``.pt`` checkpoint.

Nothing is downloaded: weights must be a local file. A model YAML (which builds an
untrained network) is refused, and so is a checkpoint without the record Ultralytics'
trainer writes into every checkpoint it saves (``train_args``), such as a model built
from its YAML and saved. Ultralytics is imported with ``YOLO_OFFLINE=1`` (no
connectivity probe, no telemetry) and ``ULTRALYTICS_SAFE_LOAD=1`` (checkpoints load
with ``torch.load(weights_only=True)`` against Ultralytics' allow-list); if it was
imported earlier without that flag, the checkpoint is first loaded once with
``torch_safe_load(..., safe_only=True)`` so an unsafe pickle never reaches the full
loader. Frames reach the framework's own predictor (letterbox, rescaling) as the RGB
arrays they are (the model input is bit for bit the framework's: its BGR->RGB flip is
just not needed), with ``conf`` near zero; NMS is :func:`raw_nms`, the framework's
algorithm without its wall-clock limit (which at ``conf`` 0.001 on large tiles stops
the NMS and leaves the rest of the batch without boxes). With a class map
(``options.classes``) only the mapped classes enter the NMS (class-agnostic among them)
and the per-window cap, and every box is labelled with the target. WARP noise at the
model input is added by the predictor subclass's ``preprocess`` on the batch tensor
(after letterbox and /255), one keyed generator per window.

>>> _native_imgsz(640, 480), _native_imgsz(1000, 1024), _native_imgsz(100, 70)
(640, 1024, 128)
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from aegisbench.detectors.interface import DETECTORS, Detector, DetectorOptions, InputNoise, add_input_noise, check_weights
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


@contextmanager
def keep_threads():
    """Within the block Ultralytics' predictors and trainers keep the caller's torch threads
    (their ``select_device`` sets cores - 1 on CPU): with :func:`aegisbench.kernels.portable`,
    the framework's own ``predict`` runs on the kernels ``detect`` runs on."""
    import torch
    from ultralytics.utils import torch_utils

    threads, saved = torch.get_num_threads(), torch_utils.NUM_THREADS
    torch_utils.NUM_THREADS = threads
    try:
        yield
    finally:
        torch_utils.NUM_THREADS = saved
        torch.set_num_threads(threads)


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


def raw_nms(prediction, conf: float, iou: float, classes=None, agnostic: bool = False, max_det: int = 300,
            max_nms: int = 30000, max_wh: int = 7680) -> list:
    """Per-image NMS of a YOLO head's raw output ``(B, 4 + nc, N)`` (``xywh`` + class
    scores): Ultralytics' ``non_max_suppression`` (best class per box, score strictly above
    ``conf``, at most ``max_nms`` candidates, ``torchvision.ops.nms`` on boxes offset by
    ``class * max_wh`` unless ``agnostic``, first ``max_det`` kept) with no wall-clock limit:
    every image gets its boxes however long the NMS takes. Returns ``(n, 6)`` tensors
    ``x1, y1, x2, y2, score, class``, in NMS (descending score) order.

    >>> import torch
    >>> raw = torch.tensor([[[5., 6.], [5., 5.], [4., 4.], [4., 4.], [.9, .8]]])  # two boxes, one class
    >>> raw_nms(raw, 0.001, 0.5)[0].tolist()
    [[3.0, 3.0, 7.0, 7.0, 0.8999999761581421, 0.0]]
    """
    import torch
    import torchvision
    from ultralytics.utils.ops import xywh2xyxy

    if isinstance(prediction, (list, tuple)):
        prediction = prediction[0]
    nc = prediction.shape[1] - 4
    keep_cls = None if classes is None else torch.tensor(list(classes), device=prediction.device)
    candidates = prediction[:, 4:].amax(1) > conf
    out = []
    for x, ok in zip(prediction.transpose(-1, -2), candidates):
        x = x[ok]
        if not len(x):
            out.append(torch.zeros((0, 6), device=prediction.device))
            continue
        box, cls = xywh2xyxy(x[:, :4]), x[:, 4:4 + nc]
        score, j = cls.max(1, keepdim=True)
        x = torch.cat((box, score, j.float()), 1)[score.view(-1) > conf]
        if keep_cls is not None:
            x = x[(x[:, 5:6] == keep_cls).any(1)]
        if len(x) > max_nms:
            x = x[x[:, 4].argsort(descending=True)[:max_nms]]
        offset = x[:, 5:6] * (0 if agnostic else max_wh)
        out.append(x[torchvision.ops.nms(x[:, :4] + offset, x[:, 4], iou)[:max_det]])
    return out


def aegis_predictor(base: type, pending: _Pending) -> type:
    """Subclass of the predictor class ``base`` that takes RGB frames (the model input is
    the framework's own: letterbox, HWC->CHW, /255; its BGR->RGB flip is simply not needed),
    adds ``pending``'s WARP noise to that tensor, and for NMS-based YOLO heads runs
    :func:`raw_nms` (no time limit) instead of the framework's NMS; its setup keeps the
    caller's torch threads."""
    from ultralytics.models.yolo.detect import DetectionPredictor

    own_nms = issubclass(base, DetectionPredictor) and base.postprocess is DetectionPredictor.postprocess

    class AegisPredictor(base):
        def setup_model(self, model, verbose: bool = True):
            """The framework's setup (device, Conv+BN fusion) on the caller's torch threads."""
            with keep_threads():
                return super().setup_model(model, verbose)

        def preprocess(self, im):
            import torch

            im = self.pre_transform(im)  # letterbox acts on each channel alike: RGB in, RGB out
            x = torch.from_numpy(im[0]).unsqueeze(0) if len(im) == 1 else torch.from_numpy(np.stack(im))
            x = x.to(self.device).permute(0, 3, 1, 2).contiguous()
            x = (x.half() if self.model.fp16 else x.float()).div_(255)
            noise = pending.take(len(x))
            return x if noise is None else add_input_noise(x, noise)

        def postprocess(self, preds, img, orig_imgs, **kwargs):
            if not own_nms or getattr(self.model, "end2end", False):
                return super().postprocess(preds, img, orig_imgs, **kwargs)
            a = self.args
            found = raw_nms(preds, a.conf, a.iou, a.classes, a.agnostic_nms, a.max_det)
            return self.construct_results(found, img, orig_imgs)

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
        self._predictor = aegis_predictor(self.model.task_map[self.model.task]["predictor"], self._pending)

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
                "architecture": type(self.model.model).__name__, "classes": list(self.names.values()),
                "kernels": self.kernels()}

    @property
    def network(self):
        """The torch module (for its parameter count)."""
        return self.model.model

    def predict_windows(self, windows: list[np.ndarray], noise: InputNoise | None = None) -> list[Detections]:
        h, w = windows[0].shape[:2]
        o = self.options
        imgsz = o.imgsz or _native_imgsz(w, h)
        kw = dict(imgsz=imgsz, conf=float(o.conf), iou=0.7 if o.nms_iou is None else float(o.nms_iou),
                  max_det=o.max_det, device=o.device, verbose=False, save=False, **precision_args(o.half))
        if o.classes is not None:  # other classes never reach the NMS or the cap; mapped ones are one class
            kw.update(classes=list(o.classes.ids), agnostic_nms=True)
        self._pending.set(noise)
        try:  # RGB frames as they are: the predictor does not flip them (see aegis_predictor)
            results = self.model.predict(list(windows), batch=len(windows), predictor=self._predictor, **kw)
        finally:
            self._pending.set(None)
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


DETECTORS.add("yolo", UltralyticsDetector)
DETECTORS.add("rtdetr", UltralyticsDetector)
