"""WARP global sanity check (seed 000) from a submission's ``warp_noise.parquet``.

The file holds the smoke model's detections on the clean test frames of the smoke sources
with WARP global noise at level ``a``, each level a config ``warp_noise_<thousandths>``
(``warp_noise_210`` for a = 0.21) that the dataset does not store, in the columns of
``predictions.parquet`` (``config, split, image_id, x1, y1, x2, y2, score[, label]``); a
(level, image) without rows had no detection. ``aegisbench warp-detect`` writes it with
the noise added to the model's input tensor (:mod:`aegisbench.detectors.noise_sweep`) and
records the levels in ``submission.yaml``::

    warp_noise: {levels: [0.02, 0.04, ...], noise_at: model_input}

Without ``levels`` they are the levels the file names. Every level covers every clean test
frame of each smoke source.

Per source and level, over those frames: mAP50-95 (class-agnostic COCO, IoU 0.50:0.05:0.95)
and seed 000's ``L(a) = 100 (mAP_clean - mAP_a) / mAP_clean`` (positive = a loss). L's
interval resamples the images with the split's shared bootstrap draw (the resampled image
sets of every condition), both mAPs recomputed in each resample (:func:`map50_95_samples`).
A step where L falls while ``a`` rises (a non-monotone step) is *within noise* when the
interval of the paired difference ``L(a_k+1) - L(a_k)`` holds 0 (:func:`sweep_curve`).

>>> from aegisbench.predictions import Detections
>>> top_detections(Detections([[0, 0, 1, 1], [0, 0, 2, 2], [0, 0, 3, 3]], [0.2, 0.9, 0.2]), 2).xyxy[:, 2].tolist()
[1.0, 2.0]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import ap50_samples
from aegisbench.evaluation.coco import IOU_THRESHOLDS, map_from_arrays
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.formats import check_labels, parse_parquet
from aegisbench.evaluation.matching import match_images
from aegisbench.evaluation.rows import Frames, Problems, check_rows
from aegisbench.evaluation.warp_eval import patch_images
from aegisbench.metrics import map_percent_loss
from aegisbench.predictions import Detections, PredictionTable, read_parquet_predictions
from aegisbench.readers import MAX_PREDICTION_ROWS
from aegisbench.stats import percentile_interval
from aegisbench.vocab import SMOKE, parse_warp_noise_config, warp_noise_config

log = logging.getLogger(__name__)

DEFINITION = ("L(a) = 100 (mAP50-95 clean - mAP50-95 at noise level a) / mAP50-95 clean over the clean test frames "
              "(seed 000, Eq. 3, positive = a loss); interval: percentile bootstrap over images, the split's shared "
              "draw, both mAPs recomputed per resample; a decreasing step is within noise when the interval of the "
              "paired difference L(a_k+1) - L(a_k) holds 0")


@dataclass(frozen=True, eq=False)
class NoisePredictions:
    """The sweep's ``levels`` (increasing) and its detections (config = the level's name)."""

    levels: tuple[float, ...]
    table: PredictionTable

    @property
    def configs(self) -> list[str]:
        return [warp_noise_config(a) for a in self.levels]


def _declared_levels(declared, where: str, problems: Problems) -> tuple[float, ...] | None:
    from aegisbench.params import noise_levels
    if declared is None:
        return None
    if not isinstance(declared, dict) or "levels" not in declared:
        problems.add(where, None, "warp_noise", "must be a mapping with levels (and noise_at)")
        return None
    try:
        return noise_levels(declared["levels"], f"{where}: warp_noise.levels")
    except BadInput as exc:
        problems.add(where, None, "warp_noise.levels", exc.message)
        return None


def read_noise_predictions(path: Path, index: DatasetIndex, limits, problems: Problems, declared=None,
                           meta_where: str = "submission.yaml") -> NoisePredictions | None:
    """Check ``warp_noise.parquet`` (every problem collected) and load it; ``declared`` is the
    ``warp_noise`` mapping of submission.yaml, if any."""
    if path.stat().st_size > limits.max_file_bytes:
        problems.add(str(path), None, None, f"file is {path.stat().st_size} bytes, larger than the limit of "
                     f"{limits.max_file_bytes} bytes")
        return None
    sizes: dict[str, dict] = {}
    for (split, image_id), wh in patch_images(index).items():
        sizes.setdefault(split, {})[image_id] = wh
    levels = _declared_levels(declared, meta_where, problems)
    raw = parse_parquet(path, problems, MAX_PREDICTION_ROWS)
    if levels is None and declared is None:  # the levels the file names
        named = [parse_warp_noise_config(c) for c in raw.code("config")[0] if c]
        levels = tuple(sorted(a for a in named if a is not None))
    configs = {warp_noise_config(a) for a in levels or ()}
    frames = Frames({(c, s): v for c in configs for s, v in sizes.items()}, configs,
                    {(c, s): SMOKE for c in configs for s in sizes}, SMOKE)
    check_labels(path, SMOKE, problems)
    check_rows(raw, frames, problems, tolerance_px=limits.frame_tolerance_px, max_dets=limits.max_dets_per_image)
    if problems or not levels:
        if not levels and not problems:
            problems.add(str(path), None, "config", "names no WARP noise level (configs warp_noise_<thousandths>)")
        return None
    return NoisePredictions(levels, read_parquet_predictions(path))


def top_detections(d: Detections, k: int | None) -> Detections:
    """The ``k`` highest-scoring boxes, ties in input order (COCO's maxDets cut), kept in input
    order (the matcher visits them by score, ties in input order, as COCO does); all when None."""
    if k is None or len(d) <= k:
        return d
    keep = np.sort(np.argsort(-d.score, kind="stable")[:k])
    return Detections(d.xyxy[keep], d.score[keep], None if d.label is None else d.label[keep])


def map50_95(dets: list, gt, max_dets: int | None = None) -> float:
    """Class-agnostic COCO mAP50-95 of ``dets`` (GT order) on ``gt`` (NaN without a GT box)."""
    r = map_from_arrays([d.xyxy for d in dets], [d.score for d in dets], list(gt.boxes), max_dets=max_dets,
                        ignore_xyxy=[gt.ignore_boxes(i) for i in range(len(gt))])["map50_95"]
    return float(r) if r >= 0 else float("nan")


def map50_95_samples(dets: list, gt, weights_t: np.ndarray, max_dets: int | None = None) -> np.ndarray:
    """mAP50-95 of each bootstrap resample: ``weights_t`` (n_images, B) holds how often each
    image occurs in each resample; the AP at each IoU of 0.50:0.05:0.95 from one matching
    pass at that IoU (:func:`~aegisbench.evaluation.bootstrap.ap50_samples`), averaged. NaN
    where a resample has no GT box. With one resample of weight 1 per image it is
    :func:`map50_95` up to the float32 rounding of precision values."""
    dets = [top_detections(d, max_dets) for d in dets]
    boxes, scores = [d.xyxy for d in dets], [d.score for d in dets]
    ignore = [gt.ignore_boxes(i) for i in range(len(gt))]
    w = np.asarray(weights_t, np.float32).T
    aps = [ap50_samples(match_images(boxes, scores, list(gt.boxes), float(t), ignore_xyxy=ignore), w)
           for t in IOU_THRESHOLDS]
    return np.mean(aps, axis=0)


def _loss_samples(clean: np.ndarray, noisy: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(clean > 0, 100.0 * (clean - noisy) / clean, np.nan)


def sweep_curve(noise: NoisePredictions, gt, clean_dets: list, weights_t: np.ndarray, max_dets: int | None = None,
                percentiles=(2.5, 97.5)) -> dict:
    """L(a) with its interval at every level of ``noise`` over the images of ``gt`` (one
    smoke test split; ``clean_dets`` the clean predictions in GT order, ``weights_t`` the
    split's bootstrap multiplicities), mAP50-95 per level with its interval, and the
    decreasing steps of L with the interval of each paired difference."""
    clean_map = map50_95(clean_dets, gt, max_dets)
    clean_s = map50_95_samples(clean_dets, gt, weights_t, max_dets)
    levels, samples = [], []
    for a, config in zip(noise.levels, noise.configs):
        dets = [noise.table.get_detections(config, gt.split, i) for i in gt.image_ids]
        point, s = map50_95(dets, gt, max_dets), map50_95_samples(dets, gt, weights_t, max_dets)
        samples.append(_loss_samples(clean_s, s))
        lo, hi = percentile_interval(samples[-1], percentiles)
        mlo, mhi = percentile_interval(s, percentiles)
        levels.append({"a": float(a), "config": config, "map50_95": point, "map50_95_lo": mlo, "map50_95_hi": mhi,
                       "loss": map_percent_loss(point, clean_map), "lo": lo, "hi": hi})
    steps = []
    for k in range(1, len(levels)):
        before, after = levels[k - 1], levels[k]
        if after["loss"] < before["loss"]:
            lo, hi = percentile_interval(samples[k] - samples[k - 1], percentiles)
            steps.append({"from": before["a"], "to": after["a"], "change": after["loss"] - before["loss"],
                          "lo": lo, "hi": hi, "within_noise": bool(lo <= 0.0 <= hi)})
    return {"definition": DEFINITION, "n_images": len(gt), "clean_map50_95": clean_map, "levels": levels,
            "decreasing_steps": steps}


def _extend(acc: dict[str, list], part: dict[str, list]) -> None:
    for k, v in part.items():
        acc.setdefault(k, []).extend(v)


def score_warp_tests(out, sub, scorer, clean, params) -> None:
    """The rows and documents of the WARP tests a smoke submission holds, on the clean test
    split ``clean`` (a :class:`~aegisbench.evaluation.detection.SplitScore`), into ``out`` (its
    source's ``SourceScores``): the cloud-patch test (``warp_patch.parquet``) and the noise
    sweep, each level a condition of the clean frames paired with clean (every per-condition
    metric) plus its L(a)."""
    from aegisbench.evaluation.warp_eval import deception_test
    from aegisbench.metrics import image_positive
    if sub.warp_patch is not None:
        res = deception_test(sub.warp_patch, clean.gt, image_positive(clean.match, scorer.thr), scorer.thr)
        out.warp_docs["warp_patch.json"] = scorer.patch_rows(res)
        n = len(res["image_ids"])
        _extend(out.patch_rows, {"submission": [sub.id] * n, "source": [out.source] * n, "image_id": res["image_ids"],
                                 "original_positive": res["original_positive"].tolist(),
                                 **{k: res[k].tolist() for k in ("alpha", "beta", "deceptions", "gamma",
                                                                 "gamma_positions")}})
    if sub.warp_noise is None:
        return
    for config in sub.warp_noise.configs:
        score = type(clean).matched(config, clean.gt, [sub.warp_noise.table.get_detections(config, clean.gt.split, i)
                                                       for i in clean.gt.image_ids])
        scorer.score_config(score, clean)
        _extend(out.per_image, score.per_image(sub.id, scorer.thr))
        _extend(out.ttd, scorer.smoke_rows(score))
    curve = sweep_curve(sub.warp_noise, clean.gt, clean.dets, scorer.resamples.weights_t, params.max_dets,
                        params.bootstrap.percentiles)
    out.warp_docs["warp_noise.json"] = scorer.noise_rows(curve)
