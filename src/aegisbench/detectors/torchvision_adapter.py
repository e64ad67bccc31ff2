"""torchvision Faster R-CNN (ResNet-50 FPN) from a local state dict.

The checkpoint is loaded with ``torch.load(weights_only=True)`` and may be a bare
``state_dict`` of ``fasterrcnn_resnet50_fpn`` or a dict with the state dict under
``model`` (or ``state_dict``), as torchvision's reference training scripts save it,
optionally with ``classes`` (names without the background class). The network is
built with ``weights=None, weights_backbone=None`` (nothing is downloaded) and the
number of classes read from the box predictor. The score floor is ``conf``; native
resolution is kept by setting the internal resize to the window size; ``half`` runs
under CUDA autocast (FP16 where torchvision allows it). WARP noise at the model input
is added by a forward hook on ``model.transform`` to the batched tensor it hands the
backbone (after normalisation, resize and padding), one keyed generator per window.
With a class map (``options.classes``) the per-class NMS runs uncapped, boxes of other
classes are dropped (they never suppress mapped ones: torchvision's NMS is per class),
the mapped classes are merged by one NMS at the model's IoU, then capped at ``max_det``.

>>> FASTERRCNN_KEYS[0]
'backbone.body.conv1.weight'
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aegisbench.detectors.interface import DETECTORS, Detector, DetectorOptions, InputNoise, add_input_noise, check_weights
from aegisbench.errors import BadInput
from aegisbench.predictions import Detections

log = logging.getLogger(__name__)

FASTERRCNN_KEYS = ("backbone.body.conv1.weight", "rpn.head.conv.0.0.weight",
                   "roi_heads.box_predictor.cls_score.weight")
_CLS = "roi_heads.box_predictor.cls_score.weight"
_UNCAPPED = 1 << 20  # detections per image while a class map filters them (capped after)


def save_fasterrcnn(model, path: str | Path, classes: Sequence[str] = ()) -> None:
    """Save a ``fasterrcnn_resnet50_fpn`` in the format :class:`FasterRCNNDetector` loads
    (tensors and plain Python values only, so ``weights_only=True`` accepts it)."""
    import torch

    from aegisbench.atomic import atomic_path

    with atomic_path(path) as tmp:
        torch.save({"arch": "fasterrcnn_resnet50_fpn", "model": model.state_dict(),
                    "classes": [str(c) for c in classes]}, tmp)


def read_state_dict(path: Path) -> tuple[dict, list[str]]:
    """``(state_dict, class_names)`` of a Faster R-CNN checkpoint, else BadInput."""
    import torch

    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"not a loadable torch checkpoint (weights_only=True): {first[:200]}",
                       where=str(path)) from None
    classes: list[str] = []
    if isinstance(ckpt, dict) and not any(isinstance(v, torch.Tensor) for v in ckpt.values()):
        classes = [str(c) for c in ckpt.get("classes") or []]
        ckpt = ckpt.get("model", ckpt.get("state_dict"))
    if not isinstance(ckpt, dict) or not all(isinstance(k, str) for k in ckpt):
        raise BadInput("checkpoint holds no state dict", where=str(path))
    missing = [k for k in FASTERRCNN_KEYS if k not in ckpt]
    if missing:
        raise BadInput(f"checkpoint is not a fasterrcnn_resnet50_fpn detector (no {missing[0]!r})",
                       where=str(path))
    return ckpt, classes


class FasterRCNNDetector(Detector):
    """``fasterrcnn`` through ``torchvision.models.detection.fasterrcnn_resnet50_fpn``."""

    input_noise = True

    def __init__(self, kind: str, weights: str | Path, options: DetectorOptions):
        import torch
        from torchvision.models.detection import fasterrcnn_resnet50_fpn

        if kind != "fasterrcnn":
            raise BadInput(f"not a torchvision detector kind: {kind!r}", where="--detector")
        super().__init__(options)
        self.name = kind
        path = check_weights(weights)
        self.weights = str(path)
        state, classes = read_state_dict(path)
        n_classes = int(state[_CLS].shape[0])
        model = fasterrcnn_resnet50_fpn(
            weights=None, weights_backbone=None, num_classes=n_classes,
            box_score_thresh=float(options.conf), box_detections_per_img=options.max_det,
            box_nms_thresh=0.5 if options.nms_iou is None else float(options.nms_iou))
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()
            raise BadInput(f"state dict does not fit fasterrcnn_resnet50_fpn: {' '.join(first[:2])[:240]}",
                           where=str(path)) from None
        self.device = torch.device(options.device)
        self.model = model.eval().to(self.device)
        self._noise: InputNoise | None = None
        self.model.transform.register_forward_hook(self._add_noise)
        names = classes if len(classes) == n_classes - 1 else [str(i) for i in range(1, n_classes)]
        self.names = {i + 1: n for i, n in enumerate(names)}

    def describe(self) -> dict:
        return {"detector": self.name, "weights": Path(self.weights).name,
                "architecture": "fasterrcnn_resnet50_fpn", "classes": list(self.names.values()),
                "kernels": self.kernels()}

    @property
    def network(self):
        """The torch module (for its parameter count)."""
        return self.model

    def _add_noise(self, module, args, output):
        """Forward hook of ``model.transform``: the pending noise on its ``ImageList``."""
        if self._noise is None:
            return None
        images, targets = output
        images.tensors = add_input_noise(images.tensors, self._noise)
        return images, targets

    def predict_windows(self, windows: list[np.ndarray], noise: InputNoise | None = None) -> list[Detections]:
        import torch

        h, w = windows[0].shape[:2]
        t = self.model.transform
        if self.options.imgsz is None:
            t.min_size, t.max_size = (min(h, w),), max(h, w)
        else:
            side = self.options.imgsz
            t.min_size, t.max_size = (max(1, round(side * min(h, w) / max(h, w))),), side
        batch = torch.from_numpy(np.stack(windows)).to(self.device)
        batch = batch.permute(0, 3, 1, 2).float().div_(255.0)
        classes = self.options.classes
        self.model.roi_heads.detections_per_img = self.options.max_det if classes is None else _UNCAPPED
        self._noise = noise
        try:
            with torch.inference_mode(), torch.autocast("cuda", torch.float16, enabled=self.options.half):
                out = self.model(list(batch))
        finally:
            self._noise = None
        dets = []
        for o in out:
            if classes is not None:
                o = self._mapped(o, classes)
            xyxy = o["boxes"].float().cpu().numpy().astype(np.float32).reshape(-1, 4)
            score = np.clip(o["scores"].float().cpu().numpy().astype(np.float32), 0.0, 1.0)
            label = np.array([self.names.get(int(c), str(int(c))) for c in o["labels"].cpu().tolist()], object)
            if classes is not None:
                label[:] = classes.target
            ok = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
            dets.append(Detections(xyxy[ok], score[ok], label[ok]))
        return dets

    def _mapped(self, out: dict, classes) -> dict:
        """The boxes of the mapped classes of one uncapped output, merged across those classes
        (one NMS at the model's IoU when several are mapped) and capped at ``max_det``."""
        import torch
        from torchvision.ops import nms

        keep = torch.isin(out["labels"], torch.tensor(classes.ids, device=out["labels"].device))
        out = {k: v[keep] for k, v in out.items()}
        order = torch.argsort(out["scores"], descending=True, stable=True)
        if len(classes.ids) > 1:
            order = nms(out["boxes"].float(), out["scores"].float(), self.model.roi_heads.nms_thresh)
        order = order[:self.options.max_det]
        return {k: v[order] for k, v in out.items()}


DETECTORS.add("fasterrcnn", FasterRCNNDetector)
