"""The detection tracks (``sar``, ``smoke``): reading their predictions and scoring them.

Per source of the track:

1. **Frozen threshold**: maximum pooled F1 on the clean ``<source>_val`` predictions
   under the shared matcher (ties: the higher threshold), over every distinct score
   or over ``EvaluationParams.threshold_grid``; recorded, then applied unchanged to
   every condition.
2. Per config holding the source's test split: every registered per-condition metric
   at that threshold (counts, recall, precision, F1, mAP on all predictions, recall per
   size band, relative drop against the model's own clean score, localization
   stability, the silent-failure flag, effectiveness score S of seed 002), with
   percentile bootstrap intervals from one draw of image resamples per (submission,
   split) shared by all conditions; WARP mAP50-95 % loss for global-noise configs.
3. Smoke track: image-level P/R/F1, time to detect per sequence, and the WARP
   cloud-patch test when ``warp_patch.parquet`` is given.

``n`` in ``metrics.parquet``: GT boxes for recall rows, kept predictions for
precision, images for every other detection metric, environments (images with GT)
for effectiveness, sequences for time to detect.

>>> sorted(t for t in ("sar", "smoke") if get_track(t).kind == "detection")
['sar', 'smoke']
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from aegisbench.evaluation.bootstrap import Resamples
from aegisbench.evaluation.coco import map_from_arrays
from aegisbench.evaluation.dataset import DatasetIndex
from aegisbench.evaluation.matching import BatchMatch, match_images
from aegisbench.evaluation.results import Evaluation, provenance, results_table
from aegisbench.evaluation.scoring import ConditionScorer
from aegisbench.evaluation.submission import ValidatedSubmission, read_detection_predictions
from aegisbench.evaluation.threshold import freeze_threshold
from aegisbench.evaluation.tracks import Track, get_track, register_track
from aegisbench.executor import Executor, map_tasks
from aegisbench.metrics import image_positive
from aegisbench.vocab import CLEAN, DETECTION_TRACKS, SAR, SMOKE

log = logging.getLogger(__name__)

PER_IMAGE_SCHEMA = pa.schema([
    ("submission", pa.string()), ("source", pa.string()), ("config", pa.string()), ("split", pa.string()),
    ("image_id", pa.string()), ("n_gt", pa.int64()), ("n_pred", pa.int64()), ("n_pred_kept", pa.int64()),
    ("tp", pa.int64()), ("fp", pa.int64()), ("fn", pa.int64()), ("max_score", pa.float64())])
TTD_SCHEMA = pa.schema([
    ("submission", pa.string()), ("source", pa.string()), ("config", pa.string()), ("group_id", pa.string()),
    ("fire_start_frame", pa.int64()), ("n_frames", pa.int64()), ("detected", pa.bool_()),
    ("frames", pa.int64()), ("minutes", pa.float64())])
PATCH_SCHEMA = pa.schema([
    ("submission", pa.string()), ("source", pa.string()), ("image_id", pa.string()),
    ("original_positive", pa.bool_()), ("alpha", pa.float64()), ("beta", pa.float64()),
    ("deceptions", pa.int64()), ("gamma", pa.float64())])


@dataclass(eq=False)
class SplitScore:
    """One (config, split): GT, predictions in GT order and the one matching pass."""

    config: str
    gt: object  # SplitGT
    dets: list
    match: BatchMatch

    @classmethod
    def of(cls, sub: ValidatedSubmission, config: str, gt) -> SplitScore:
        dets = [sub.predictions.get_detections(config, gt.split, i) for i in gt.image_ids]
        m = match_images([d.xyxy for d in dets], [d.score for d in dets], list(gt.boxes))
        return cls(config, gt, dets, m)

    def coco(self, max_dets: int | None) -> dict:
        return map_from_arrays([d.xyxy for d in self.dets], [d.score for d in self.dets], list(self.gt.boxes),
                               max_dets=max_dets)

    def per_image(self, submission: str, threshold: float) -> dict[str, list]:
        c = self.match.counts(threshold)
        kept = np.bincount(self.match.pred_image[self.match.kept(threshold)], minlength=len(self.dets))
        return {"submission": [submission] * len(self.dets), "source": [self.gt.source] * len(self.dets),
                "config": [self.config] * len(self.dets), "split": [self.gt.split] * len(self.dets),
                "image_id": list(self.gt.image_ids), "n_gt": self.gt.n_gt().tolist(),
                "n_pred": [len(d) for d in self.dets], "n_pred_kept": kept.tolist(),
                "tp": c[:, 0].tolist(), "fp": c[:, 1].tolist(), "fn": c[:, 2].tolist(),
                "max_score": [float(d.score.max()) if len(d) else None for d in self.dets]}


def _table(columns: dict[str, list], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pydict({f.name: columns.get(f.name, []) for f in schema}, schema=schema)


def _extend(acc: dict[str, list], part: dict[str, list]) -> None:
    for k, v in part.items():
        acc.setdefault(k, []).extend(v)


def freeze_for_source(sub: ValidatedSubmission, index: DatasetIndex, source: str, params
                      ) -> tuple[float, float, SplitScore]:
    """``(threshold, val F1, val SplitScore)`` of one source."""
    from aegisbench.errors import BadInput
    val_split = f"{source}_val"
    if index.split_info(CLEAN, val_split) is None:
        raise BadInput(f"the dataset has no clean validation split {val_split!r}: cannot freeze a threshold",
                       where=str(index.repo))
    val = SplitScore.of(sub, CLEAN, index.gt(CLEAN, val_split))
    thr, vf1 = freeze_threshold(val.match, None if params.threshold_grid is None else np.asarray(params.threshold_grid))
    return thr, vf1, val


@dataclass(eq=False)
class SourceScores:
    """Everything one source contributes to an evaluation (independent of other sources)."""

    source: str
    threshold: float
    val_f1: float
    configs: list[str] | None  # None: empty test split, skipped
    rows: list[dict] = field(default_factory=list)
    per_image: dict[str, list] = field(default_factory=dict)
    ttd: dict[str, list] = field(default_factory=dict)
    patch_rows: dict[str, list] = field(default_factory=dict)
    patch_doc: dict | None = None
    effectiveness: dict | None = None
    degenerate: list[dict] = field(default_factory=list)


def score_source(sub: ValidatedSubmission, index: DatasetIndex, source: str, params,
                 on_config=None) -> SourceScores:
    """Freeze the threshold of ``source`` and score every config holding its test split
    (``on_config()`` is called after each config)."""
    from aegisbench.evaluation.warp_eval import deception_test
    track = sub.meta.track
    thr, vf1, val = freeze_for_source(sub, index, source, params)
    out = SourceScores(source, thr, vf1, None)
    _extend(out.per_image, val.per_image(sub.id, thr))
    clean_gt = index.gt(CLEAN, source)
    if len(clean_gt) == 0:
        log.warning("source %s has an empty test split; skipped", source)
        return out
    key = ("aegisbench-bootstrap", index.digest, sub.id, source)
    resamples = Resamples.draw(len(clean_gt), key, params.bootstrap.n_resamples)
    scorer = ConditionScorer(sub, index, source, thr, params, resamples, key)
    scorer.add_validation_rows(val, vf1)
    clean = SplitScore.of(sub, CLEAN, clean_gt)
    out.configs = [CLEAN] + [c for c in index.configs() if c != CLEAN and index.split_info(c, source)]
    for config in out.configs:
        gt = index.gt(config, source)
        paired = set(gt.image_ids) == set(clean_gt.image_ids)
        if paired:
            gt = gt.reordered(clean_gt.image_ids)
        score = clean if config == CLEAN else SplitScore.of(sub, config, gt)
        scorer.score_config(score, clean if paired else None)
        _extend(out.per_image, score.per_image(sub.id, thr))
        if track == SMOKE:
            _extend(out.ttd, scorer.smoke_rows(score))
        if on_config is not None:
            on_config()
    if track == SMOKE and sub.warp_patch is not None:
        res = deception_test(sub.warp_patch, clean_gt, image_positive(clean.match, thr), thr)
        out.patch_doc = scorer.patch_rows(res)
        n = len(res["image_ids"])
        _extend(out.patch_rows, {"submission": [sub.id] * n, "source": [source] * n, "image_id": res["image_ids"],
                                 "original_positive": res["original_positive"].tolist(),
                                 "alpha": res["alpha"].tolist(), "beta": res["beta"].tolist(),
                                 "deceptions": res["deceptions"].tolist(), "gamma": res["gamma"].tolist()})
    out.effectiveness = scorer.effectiveness_summary()
    out.rows, out.degenerate = scorer.rows, scorer.degenerate
    return out


def _score_source_task(args) -> SourceScores:
    return score_source(*args)


def score_detection(sub: ValidatedSubmission, index: DatasetIndex, params, executor: Executor | None = None,
                    progress: bool = False) -> Evaluation:
    """Score every condition of a detection track (in memory). Sources are independent:
    with ``executor`` (local processes or Ray) they are scored in parallel; the result is
    the same in any case."""
    executor = executor or Executor()
    track = sub.meta.track
    sources = [s for s in index.sources(track) if index.split_info(CLEAN, s) is not None]
    total = sum(1 for s in sources for c in index.configs() if index.split_info(c, s) is not None)
    bar = tqdm(total=total, desc=f"evaluate {sub.id}", unit="config", disable=None if progress else True)
    if executor.kind == "local" and executor.workers == 1:
        parts = (score_source(sub, index, s, params, bar.update) for s in sources)
    else:
        parts = map_tasks(_score_source_task, [(sub, index, s, params) for s in sources], executor)
    rows: list[dict] = []
    per_image: dict[str, list] = {}
    ttd: dict[str, list] = {}
    patch_rows: dict[str, list] = {}
    thresholds, val_f1, effectiveness, patch_doc, degenerate, configs_scored = {}, {}, {}, {}, [], {}
    for part in parts:
        thresholds[part.source], val_f1[part.source] = part.threshold, part.val_f1
        _extend(per_image, part.per_image)
        if part.configs is None:
            continue
        configs_scored[part.source] = part.configs
        _extend(ttd, part.ttd)
        if part.patch_doc is not None:
            patch_doc[part.source] = part.patch_doc
            _extend(patch_rows, part.patch_rows)
        effectiveness[part.source] = part.effectiveness
        rows.extend(part.rows)
        degenerate.extend(part.degenerate)
        if not (executor.kind == "local" and executor.workers == 1):
            bar.update(len(part.configs))
    bar.close()
    tables, documents = {}, {"effectiveness.json": effectiveness}
    if ttd:
        tables["time_to_detect.parquet"] = _table(ttd, TTD_SCHEMA)
    if patch_doc:
        tables["warp_patch_images.parquet"] = _table(patch_rows, PATCH_SCHEMA)
        documents["warp_patch.json"] = patch_doc
    prov = provenance(sub, index, params, sorted([*tables, *documents]),
                      **_detection_provenance(sub, index, params, thresholds, val_f1, degenerate, configs_scored))
    return Evaluation(sub, results_table(rows), _table(per_image, PER_IMAGE_SCHEMA), prov, tables, documents)


def _detection_provenance(sub, index, params, thresholds: dict, val_f1: dict, degenerate: list,
                          configs: dict) -> dict:
    grid = "every distinct clean _val score" if params.threshold_grid is None else list(params.threshold_grid)
    return {
        "frozen_threshold": thresholds,
        "threshold_selection": {"rule": "maximum pooled F1 on the clean <source>_val predictions under the shared "
                                "matcher (IoU >= 0.5, greedy, class-agnostic); ties go to the higher threshold; "
                                "applied unchanged to every condition", "candidates": grid,
                                "val_f1": val_f1, "val_split": {s: f"{s}_val" for s in thresholds}},
        "max_dets": params.max_dets,
        "max_dets_note": ("mAP uses every prediction of an image (no maxDets truncation)" if params.max_dets is None
                          else f"mAP keeps the {params.max_dets} highest-scoring predictions per image"),
        "bootstrap": {"n_resamples": params.bootstrap.n_resamples, "percentiles": list(params.bootstrap.percentiles),
                      "unit": "image", "method": "percentile",
                      "rng_key": ["aegisbench-bootstrap", index.digest, sub.id, "<source>"],
                      "sharing": "one draw of image resamples per (submission, test split), shared by every "
                                 "condition of that split (paired)"},
        "degenerate_intervals": degenerate,
        "configs": configs,
    }


def _summary(sub: ValidatedSubmission) -> str:
    extra = "" if sub.warp_patch is None else f", WARP patch test on {len(sub.warp_patch.entries)} images"
    return (f"{sub.id}: OK (track {sub.meta.track}, {sub.form} form, {sub.predictions.n_boxes()} boxes on "
            f"{len(sub.predictions)} images{extra})")


_CONTENTS = {
    SAR: "boxes of persons on every config/split of the sar sources (Parquet, COCO results or YOLO txt)",
    SMOKE: "boxes of smoke plumes on every config/split of the smoke sources, optionally warp_patch.parquet",
}
for _name in DETECTION_TRACKS:
    register_track(Track(name=_name, kind="detection", contents=_CONTENTS[_name], read=read_detection_predictions,
                         score=score_detection, summary=_summary))
