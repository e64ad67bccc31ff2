"""The reference detector: a small Ultralytics YOLO trained from its model YAML, offline.

``export_yolo_dataset`` turns a canonical source table into an Ultralytics training
folder. Training uses *native-resolution crops*: each annotated object gets a
``crop`` x ``crop`` window that contains it (position drawn from
``rng_for("reference_detector", source, image_id, ...)``), plus random background
windows, so people keep the pixel size they have at inference (whole 640-px frames,
1024-px tiles) while batches stay cheap on a CPU. ``train_reference`` trains the
packaged ``aegis_yolo_tiny.yaml`` (or any Ultralytics model YAML) with pinned seed
and epochs, plots/AMP/validation-per-epoch off so nothing is fetched, copies the
final checkpoint to ``<out>/weights.pt`` and scores it on the source's clean val
(threshold frozen at maximum F1) and test splits. Training runs in
:func:`aegisbench.kernels.portable` (oneDNN off, ``threads`` torch threads), so the weights
are those of every x86-64 machine; ``train.json`` records the kernels (``kernels``).

>>> raw = {"epochs": 2, "crop": 256, "imgsz": 256, "sources": {"synthetic_smoke": {"epochs": 3}}}
>>> p = ReferenceParams.from_dict(raw, "synthetic_smoke")
>>> p.epochs, p.crop, p.model
(3, 256, 'aegis_yolo_tiny.yaml')
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from aegisbench import isa
from aegisbench.atomic import atomic_write_text
from aegisbench.builders.source_table import SourceRecord, read_source_table
from aegisbench.errors import BadInput
from aegisbench.detectors.checkpoint import portable_checkpoint
from aegisbench.hashing import file_sha256, json_sha256, rng_for
from aegisbench.kernels import GEMMS, check_gemm, describe as describe_kernels, portable
from aegisbench.schema import Declared, param

log = logging.getLogger(__name__)

OPTIMIZERS = ("SGD", "Adam", "AdamW", "NAdam", "RAdam", "RMSProp", "auto")
PACKAGED_MODELS = {"aegis_yolo_tiny.yaml": Path(__file__).with_name("aegis_yolo_tiny.yaml")}
WHERE = "params.yaml: reference_detector"


@dataclass(frozen=True)
class ReferenceParams(Declared, where=WHERE):
    """The ``reference_detector`` section of ``params.yaml`` (all training choices), each
    declared once with its type, range and unit."""

    model: str = param("aegis_yolo_tiny.yaml", doc="Ultralytics model YAML: a packaged name or a path")
    imgsz: int = param(160, lo=32, unit="px", doc="training input size")
    crop: int | None = param(160, lo=32, optional=True, unit="px",
                             doc="native-resolution crop side (none: whole frames, then detect with --imgsz)")
    detect_imgsz: int | None = param(None, type=int, lo=32, optional=True, unit="px",
                                     doc="inference input size recorded for `detect --imgsz trained` (none: native "
                                     "for crop training, imgsz for whole frames); crops shrunk to imgsz < crop "
                                     "need the frame's long side x imgsz / crop")
    crops_per_object: int = param(1, lo=0, doc="crops around each object")
    negatives_per_image: int = param(1, lo=0, doc="background crops per image")
    min_visible: float = param(0.5, lo=0.0, hi=1.0, unit="fraction",
                               doc="a cut object stays labelled if this much of its box is inside")
    epochs: int = param(20, lo=1, unit="epochs")
    batch: int = param(8, lo=1, unit="images")
    seed: int = param(0, lo=0, doc="training seed")
    optimizer: str = param("AdamW", choices=OPTIMIZERS)
    lr0: float = param(0.003, lo=0.0, hi=1.0, lo_open=True, hi_open=True, doc="initial learning rate")
    mosaic: float = param(1.0, lo=0.0, hi=1.0, unit="probability")
    close_mosaic: int = param(5, lo=0, unit="epochs", doc="last epochs without mosaic")
    warmup_epochs: float = param(1.0, lo=0.0, unit="epochs")
    scale: float = param(0.25, lo=0.0, hi=1.0, unit="fraction", doc="scale augmentation gain")
    fliplr: float = param(0.5, lo=0.0, hi=1.0, unit="probability")
    flipud: float = param(0.5, lo=0.0, hi=1.0, unit="probability")
    device: str = param("cpu", type=object, doc="torch device (cpu, cuda:0, ...)")
    threads: int | None = param(1, lo=1, optional=True,
                                doc="torch CPU threads; 1 keeps float sums in one order (none: Ultralytics' cores - 1)")
    onednn: bool = param(False, doc="oneDNN convolutions: faster, weights then depend on the CPU (aegisbench.kernels)")
    gemm: str = param("mkl", choices=GEMMS, doc="CPU convolutions' matrix products: torch's MKL path, or "
                      "NumPy's OpenBLAS (aegisbench.conv_gemm: faster, the same on every x86-64-v3 CPU, other weights)")
    max_images: int | None = param(None, type=int, lo=1, doc="cap on train images (tiny test configs)")
    recall_floor: float | None = param(None, type=float, lo=0.0, hi=1.0, unit="recall",
                                       doc="clean test recall at the frozen threshold this recipe must keep "
                                       "(perf/main_job.py judges it; issue 36: sar 0.80, smoke 0.50)")

    def cross_check(self) -> None:
        if not self.model.endswith((".yaml", ".yml")):
            raise BadInput(f"model must be an Ultralytics model YAML, got {self.model!r}", where=WHERE)
        try:
            check_gemm(self.gemm, "gemm", onednn=self.onednn)
        except ValueError as exc:
            raise BadInput(str(exc), where=f"{WHERE}.gemm") from None

    @classmethod
    def from_dict(cls, raw: dict | None, source: str | None = None) -> "ReferenceParams":
        """Build from the params section; ``sources: {<name>: {...}}`` overrides keys for one source."""
        raw = cls.mapping_of(raw, also={"sources"})
        per_source = raw.pop("sources", None) or {}
        if not isinstance(per_source, dict):
            raise BadInput("sources must map source names to overrides", where=WHERE)
        if source is not None:
            raw.update(cls.mapping_of(per_source.get(source), f"{WHERE}.sources.{source}"))
        return cls(**raw)

    @classmethod
    def check_section(cls, raw: dict | None) -> None:
        """Build the recipe of the base section and of every per-source override: BadInput
        (naming the key) before anything runs, not when a training starts."""
        cls.from_dict(raw)
        for source in ((raw or {}).get("sources") or {}):
            cls.from_dict(raw, source)

    def inference_imgsz(self) -> int | None:
        """Input size at inference (``detect --imgsz trained`` reads it from train.json): the
        declared ``detect_imgsz``, else native (None) for crop training and ``imgsz`` for whole
        frames trained at a reduced size."""
        if self.detect_imgsz is not None:
            return self.detect_imgsz
        return self.imgsz if self.crop is None else None

    def model_path(self) -> str:
        """The YAML to build: a packaged AegisBench model, else the name/path as given."""
        return str(PACKAGED_MODELS.get(self.model, self.model))


# ------------------------------------------------------------------ export


def _crop_origins(rec: SourceRecord, crop: int, params: ReferenceParams) -> list[tuple[int, int]]:
    """Windows covering every object: objects are visited in a seeded order; an object
    not yet inside a window gets one placed at random around it. Repeated
    ``crops_per_object`` times, plus ``negatives_per_image`` random windows."""
    W, H = rec.width, rec.height
    if W <= crop and H <= crop:
        return [(0, 0)]
    cw, ch = min(crop, W), min(crop, H)
    boxes = rec.boxes.astype(np.float64)
    out = []
    for k in range(params.crops_per_object):
        rng = rng_for("reference_detector", rec.source, rec.image_id, "objects", k)
        covered = np.zeros(len(boxes), bool)
        for i in rng.permutation(len(boxes)):
            if covered[i]:
                continue
            x1, y1, x2, y2 = boxes[i]
            lo_x, hi_x = max(0, int(np.ceil(x2)) - cw), min(int(x1), W - cw)
            lo_y, hi_y = max(0, int(np.ceil(y2)) - ch), min(int(y1), H - ch)
            x0 = int(rng.integers(lo_x, hi_x + 1)) if hi_x >= lo_x else int(np.clip((x1 + x2 - cw) / 2, 0, W - cw))
            y0 = int(rng.integers(lo_y, hi_y + 1)) if hi_y >= lo_y else int(np.clip((y1 + y2 - ch) / 2, 0, H - ch))
            covered |= ((boxes[:, 0] >= x0) & (boxes[:, 1] >= y0)
                        & (boxes[:, 2] <= x0 + cw) & (boxes[:, 3] <= y0 + ch))
            covered[i] = True
            out.append((x0, y0))
    for k in range(params.negatives_per_image):
        rng = rng_for("reference_detector", rec.source, rec.image_id, "background", k)
        out.append((int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))))
    return out


def crop_labels(boxes: np.ndarray, window: tuple[int, int, int, int], min_visible: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(boxes, kept)``: boxes clipped to ``window`` in window pixels, for the objects whose
    visible fraction is >= ``min_visible`` (``kept`` is the mask over the input boxes).

    >>> b, k = crop_labels(np.array([[10, 10, 30, 30], [90, 0, 130, 10]], np.float32), (0, 0, 100, 100), 0.5)
    >>> b.tolist(), k.tolist()
    ([[10.0, 10.0, 30.0, 30.0]], [True, False])
    """
    x0, y0, x1, y1 = window
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    c = np.stack([np.clip(b[:, 0], x0, x1), np.clip(b[:, 1], y0, y1),
                  np.clip(b[:, 2], x0, x1), np.clip(b[:, 3], y0, y1)], axis=1)
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    vis = (c[:, 2] - c[:, 0]) * (c[:, 3] - c[:, 1])
    keep = (vis > 0) & (vis >= min_visible * area)
    return (c[keep] - np.array([x0, y0, x0, y0], np.float64)).astype(np.float32), keep


def _yolo_lines(boxes: np.ndarray, classes: list[int], w: int, h: int) -> str:
    lines = []
    for (x1, y1, x2, y2), c in zip(boxes.tolist(), classes):
        lines.append(f"{c} {(x1 + x2) / 2 / w:.6f} {(y1 + y2) / 2 / h:.6f} {(x2 - x1) / w:.6f} {(y2 - y1) / h:.6f}")
    return "\n".join(lines) + ("\n" if lines else "")


def export_yolo_dataset(source_table: str | Path, out_dir: str | Path, params: ReferenceParams) -> Path:
    """Write ``images/{train,val}``, ``labels/{train,val}`` and ``data.yaml``; returns the YAML path."""
    import yaml

    out = Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    names = sorted({lab for rec in read_source_table(source_table, ["train"]) for lab in rec.labels})
    if not names:
        raise BadInput("the train split has no annotated objects", where=str(source_table))
    cls_of = {n: i for i, n in enumerate(names)}
    counts = {"train": [0, 0], "val": [0, 0]}
    for split in ("train", "val"):
        (out / "images" / split).mkdir(parents=True)
        (out / "labels" / split).mkdir(parents=True)
        for n_img, rec in enumerate(read_source_table(source_table, [split])):
            if split == "train" and params.max_images is not None and n_img >= params.max_images:
                break
            image = rec.image()
            origins = [(0, 0)] if params.crop is None else _crop_origins(rec, params.crop, params)
            cw = rec.width if params.crop is None else min(params.crop, rec.width)
            ch = rec.height if params.crop is None else min(params.crop, rec.height)
            for k, (x0, y0) in enumerate(origins):
                win = (x0, y0, x0 + cw, y0 + ch)
                boxes, kept = crop_labels(rec.boxes, win, params.min_visible)
                labs = [cls_of[lab] for lab, is_kept in zip(rec.labels, kept) if is_kept]
                stem = f"{rec.image_id}_{k:03d}"
                crop = np.ascontiguousarray(image[y0:y0 + ch, x0:x0 + cw, ::-1])
                if not cv2.imwrite(str(out / "images" / split / f"{stem}.png"), crop):
                    raise OSError(f"cannot write {stem}.png")
                (out / "labels" / split / f"{stem}.txt").write_text(_yolo_lines(boxes, labs, cw, ch))
                counts[split][0] += 1
                counts[split][1] += len(boxes)
    if counts["train"][0] == 0 or counts["val"][0] == 0:
        raise BadInput("source table needs train and val images", where=str(source_table))
    data = {"path": str(out.resolve()), "train": "images/train", "val": "images/val",
            "names": {i: n for i, n in enumerate(names)}}
    atomic_write_text(out / "data.yaml", yaml.safe_dump(data, sort_keys=True))
    log.info("exported %s: train %d crops / %d boxes, val %d crops / %d boxes",
             out, counts["train"][0], counts["train"][1], counts["val"][0], counts["val"][1])
    return out / "data.yaml"


# ------------------------------------------------------------------ training


def train_reference(source_table: str | Path, out_dir: str | Path, params: ReferenceParams,
                    *, score: bool = True, track: str | None = None, score_tile: int | None = None) -> dict:
    """Train the reference detector; writes ``weights.pt`` and ``train.json`` into ``out_dir``.
    ``score``: clean val/test scores the way the evaluator scores a row of ``track`` (its
    threshold rule), detected with ``score_tile``-px tiles (None: ``detect``'s default)."""
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    isa.require("the reference detector's weights")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import_ultralytics()
    # the exported crops and Ultralytics' run folder live in a scratch folder next to
    # ``out`` and are removed: the output is the weights, train.json and nothing else
    with tempfile.TemporaryDirectory(prefix=".train-", dir=out.parent) as scratch:
        work = Path(scratch)
        data_yaml = export_yolo_dataset(source_table, work / "dataset", params)
        t0, c0 = time.perf_counter(), time.process_time()
        trained_threads = _fit(data_yaml, work, params, f"train {Path(source_table).stem}")
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        last = work / "train" / "weights" / "last.pt"
        if not last.exists():  # pragma: no cover - Ultralytics always writes last.pt
            raise RuntimeError(f"training wrote no checkpoint at {last}")
        portable_checkpoint(last, out / "weights.pt")
    stale = out / "work"  # written by earlier versions
    if stale.is_dir():
        shutil.rmtree(stale)
    # train.json is part of the output and holds no timings (they differ run to run)
    report = {"source_table": Path(source_table).name, "params": dataclasses.asdict(params),
              "params_sha256": json_sha256(dataclasses.asdict(params)),
              "torch_threads": trained_threads, "weights": "weights.pt",
              "kernels": describe_kernels(trained_threads, onednn=params.onednn, device=params.device,
                                         gemm=params.gemm),
              "weights_sha256": file_sha256(out / "weights.pt"),
              "detect_imgsz": params.inference_imgsz()}
    if score:
        from aegisbench.detectors.interface import DetectorOptions, load_detector
        from aegisbench.detectors.tiling import TilingParams

        tiling = TilingParams() if score_tile is None else TilingParams(tile=score_tile)
        det = load_detector("yolo", out / "weights.pt", DetectorOptions(device=params.device,
                                                                         imgsz=params.inference_imgsz(),
                                                                         tiling=tiling, gemm=params.gemm))
        with portable(1, gemm=params.gemm):  # the detect stage's kernels, so a row detected from these weights scores the same
            report["scores"] = {**score_on_source(det, source_table, track), "tile": tiling.tile}
    atomic_write_text(out / "train.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    report.update(train_seconds=round(seconds, 1), train_cpu_seconds=round(cpu_seconds, 1))
    log.info("reference detector trained in %.0f s -> %s", seconds, out / "weights.pt")
    return report


def _fit(data_yaml: Path, work: Path, params: ReferenceParams, label: str) -> int:
    """Build the model and train it with the recipe in :func:`aegisbench.kernels.portable`
    (oneDNN off unless ``params.onednn``) on ``params.threads``; returns the torch threads it
    trained on."""
    import torch
    from ultralytics import YOLO

    from aegisbench.progress import trainer_progress

    threads = params.threads
    with portable(threads or torch.get_num_threads(), onednn=params.onednn, gemm=params.gemm):
        model = YOLO(params.model_path())  # (its stride probe is a forward pass: on these kernels too)
        trainer_progress(model, label)
        if threads is not None:  # Ultralytics sets cpu_count - 1 threads when its trainer starts
            model.add_callback("on_pretrain_routine_start", lambda _t: torch.set_num_threads(threads))
        model.train(data=str(data_yaml), epochs=params.epochs, imgsz=params.imgsz, batch=params.batch,
                    seed=params.seed, deterministic=True, workers=0, device=params.device,
                    project=str(work.resolve()), name="train", exist_ok=True, plots=False, amp=False,
                    val=False, verbose=False, pretrained=False, optimizer=params.optimizer, lr0=params.lr0,
                    mosaic=params.mosaic, close_mosaic=params.close_mosaic, warmup_epochs=params.warmup_epochs,
                    scale=params.scale, fliplr=params.fliplr, flipud=params.flipud, cache=False,
                    save_period=-1, time=None, patience=params.epochs + 1)
        return torch.get_num_threads()


def score_on_source(detector, source_table: str | Path, track: str | None = None, batch_frames: int = 8) -> dict:
    """Freeze the threshold at maximum F1 on the clean ``val`` split with ``track``'s rule
    (``threshold.TRACK_RULE``, as the evaluator does for that track's rows; None: every
    distinct score), then report recall, precision, F1 at it and threshold-free mAP50 /
    mAP50-95 on ``test`` (shared matcher)."""
    from aegisbench.evaluation import freeze_threshold, map_from_arrays, match_images
    from aegisbench.evaluation.threshold import TRACK_RULE, f1_curve, rule_grid

    rule = TRACK_RULE.get(track, "scores")

    def run(split: str):
        preds, gts, frames = [], [], []
        recs = list(read_source_table(source_table, [split]))
        for s in range(0, len(recs), batch_frames):
            chunk = recs[s:s + batch_frames]
            preds += detector.predict([r.image() for r in chunk])
            gts += [r.boxes for r in chunk]
            frames += [r.ignore for r in chunk]  # ignore regions: COCO crowd in the matcher and mAP
        return preds, gts, frames

    vp, vg, vi = run("val")
    thr, val_f1 = freeze_threshold(match_images([d.xyxy for d in vp], [d.score for d in vp], vg, ignore_xyxy=vi),
                                   rule_grid(rule))
    tp_, tg, ti = run("test")
    m = match_images([d.xyxy for d in tp_], [d.score for d in tp_], tg, ignore_xyxy=ti)
    c = f1_curve(m, [thr])
    maps = map_from_arrays([d.xyxy for d in tp_], [d.score for d in tp_], tg, ignore_xyxy=ti)
    return {"rule": rule, "threshold": thr, "val_f1": round(val_f1, 4), "test_recall": round(float(c["recall"][0]), 4),
            "test_precision": round(float(c["precision"][0]), 4), "test_f1": round(float(c["f1"][0]), 4),
            "test_map50": round(float(maps["map50"]), 4), "test_map50_95": round(float(maps["map50_95"]), 4),
            "test_images": len(tg), "test_objects": int(sum(len(g) for g in tg))}
