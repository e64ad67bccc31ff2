"""Score a validated submission on every condition and write ``results/<id>/`` atomically.

Per source of the submission's track:

1. **Frozen threshold**: maximum pooled F1 on the clean ``<source>_val`` predictions
   under the shared matcher (ties: the higher threshold), over every distinct score
   or over ``EvaluationParams.threshold_grid``; recorded, then applied unchanged to
   every condition.
2. Per config holding the source's test split: TP / FP / FN, recall, precision, F1
   at that threshold; mAP50 and mAP50-95 on all predictions (``max_dets=None``: no
   per-image truncation); recall per target size band; relative drop against the
   model's own clean score; localization stability and the silent-failure flag;
   effectiveness score S (seed 002) with a per-size breakdown; percentile bootstrap
   intervals from one draw of image resamples per (submission, split), shared by all
   conditions; WARP mAP50-95 % loss for global-noise configs.
3. Smoke track: image-level P/R/F1, time to detect per sequence, and the WARP
   cloud-patch test when ``warp_patch.parquet`` is given.

``n`` in ``metrics.parquet``: GT boxes for recall rows, kept predictions for
precision, images for every other detection metric, environments (images with GT)
for effectiveness, sequences for time to detect.

>>> EvaluationParams(threshold_grid=(0.01, 0.02)).threshold_grid
(0.01, 0.02)
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

import aegisbench
from aegisbench.atomic import replace_dir
from aegisbench.evaluation.bootstrap import BootstrapParams, Resamples
from aegisbench.evaluation.coco import map_from_arrays
from aegisbench.evaluation.dataset import DatasetIndex
from aegisbench.evaluation.matching import IOU_THRESHOLD, BatchMatch, match_images
from aegisbench.evaluation.scoring import ConditionScorer, family_of
from aegisbench.evaluation.submission import ValidatedSubmission, ValidationLimits, validate_submission
from aegisbench.evaluation.threshold import freeze_threshold
from aegisbench.evaluation.version import EVALUATOR_VERSION  # noqa: F401  (re-exported)
from aegisbench.executor import Executor, map_tasks
from aegisbench.hashing import json_sha256
from aegisbench.metrics import SilentFailureParams, image_positive

log = logging.getLogger(__name__)


METRICS_SCHEMA = pa.schema([
    ("submission", pa.string()), ("track", pa.string()), ("source", pa.string()), ("config", pa.string()),
    ("corruption", pa.string()), ("family", pa.string()), ("severity", pa.int64()), ("metric", pa.string()),
    ("value", pa.float64()), ("lo", pa.float64()), ("hi", pa.float64()), ("n", pa.int64())])
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


@dataclass(frozen=True)
class EvaluationParams:
    """Evaluator settings; all of them are recorded (and hashed) in the provenance."""

    threshold_grid: tuple[float, ...] | None = None  # None: every distinct val score
    max_dets: int | None = None  # per-image cap for mAP; None = never truncate
    bootstrap: BootstrapParams = BootstrapParams()
    silent: SilentFailureParams = SilentFailureParams()
    limits: ValidationLimits = ValidationLimits()
    warp_grid: int = 25

    def __post_init__(self) -> None:
        g = self.threshold_grid
        if g is not None:
            if not isinstance(g, tuple) or not g:
                raise TypeError("threshold_grid must be a non-empty tuple of floats or None")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1 for v in g):
                raise ValueError(f"threshold_grid values must lie in [0, 1], got {g!r}")
        m = self.max_dets
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"max_dets must be a positive int or None, got {m!r}")
        if isinstance(self.warp_grid, bool) or not isinstance(self.warp_grid, int) or self.warp_grid < 1:
            raise ValueError(f"warp_grid must be a positive int, got {self.warp_grid!r}")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["threshold_grid"] = None if self.threshold_grid is None else list(self.threshold_grid)
        d["bootstrap"]["percentiles"] = list(self.bootstrap.percentiles)
        d["iou_threshold"] = IOU_THRESHOLD
        return d

    def digest(self) -> str:
        return json_sha256(self.as_dict())


@dataclass(eq=False)
class Evaluation:
    """An evaluation in memory: tables and JSON artefacts to write under ``results/<id>/``."""

    submission: ValidatedSubmission
    metrics: pa.Table
    per_image: pa.Table
    provenance: dict
    tables: dict[str, pa.Table] = field(default_factory=dict)
    documents: dict[str, dict] = field(default_factory=dict)


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


def freeze_for_source(sub: ValidatedSubmission, index: DatasetIndex, source: str, params: EvaluationParams
                      ) -> tuple[float, float, SplitScore]:
    """``(threshold, val F1, val SplitScore)`` of one source."""
    from aegisbench.errors import BadInput
    val_split = f"{source}_val"
    if index.split_info("clean", val_split) is None:
        raise BadInput(f"the dataset has no clean validation split {val_split!r}: cannot freeze a threshold",
                       where=str(index.repo))
    val = SplitScore.of(sub, "clean", index.gt("clean", val_split))
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


def score_source(sub: ValidatedSubmission, index: DatasetIndex, source: str, params: EvaluationParams,
                 on_config=None) -> SourceScores:
    """Freeze the threshold of ``source`` and score every config holding its test split
    (``on_config()`` is called after each config)."""
    from aegisbench.evaluation.warp_eval import deception_test
    track = sub.meta.track
    thr, vf1, val = freeze_for_source(sub, index, source, params)
    out = SourceScores(source, thr, vf1, None)
    _extend(out.per_image, val.per_image(sub.id, thr))
    clean_gt = index.gt("clean", source)
    if len(clean_gt) == 0:
        log.warning("source %s has an empty test split; skipped", source)
        return out
    key = ("aegisbench-bootstrap", index.digest, sub.id, source)
    resamples = Resamples.draw(len(clean_gt), key, params.bootstrap.n_resamples)
    scorer = ConditionScorer(sub, index, source, thr, params, resamples, key)
    scorer.add_validation_rows(val, vf1)
    clean = SplitScore.of(sub, "clean", clean_gt)
    out.configs = ["clean"] + [c for c in index.configs() if c != "clean" and index.split_info(c, source)]
    for config in out.configs:
        gt = index.gt(config, source)
        paired = set(gt.image_ids) == set(clean_gt.image_ids)
        if paired:
            gt = gt.reordered(clean_gt.image_ids)
        score = clean if config == "clean" else SplitScore.of(sub, config, gt)
        scorer.score_config(score, clean if paired else None)
        _extend(out.per_image, score.per_image(sub.id, thr))
        if track == "smoke":
            _extend(out.ttd, scorer.smoke_rows(score))
        if on_config is not None:
            on_config()
    if track == "smoke" and sub.warp_patch is not None:
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


def evaluate(sub: ValidatedSubmission, index: DatasetIndex, params: EvaluationParams = EvaluationParams(),
             progress: bool = False, executor: Executor | None = None) -> Evaluation:
    """Score every condition of the submission's track (in memory). Sources are
    independent: with ``executor`` (local processes or Ray) they are scored in parallel;
    the result is the same in any case."""
    executor = executor or Executor()
    track = sub.meta.track
    sources = [s for s in index.sources(track) if index.split_info("clean", s) is not None]
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
    metrics = pa.Table.from_pylist(rows, schema=METRICS_SCHEMA)
    prov = provenance(sub, index, params, thresholds, val_f1, degenerate, configs_scored,
                      sorted([*tables, *documents]))
    return Evaluation(sub, metrics, _table(per_image, PER_IMAGE_SCHEMA), prov, tables, documents)


def provenance(sub: ValidatedSubmission, index: DatasetIndex, params: EvaluationParams, thresholds: dict,
               val_f1: dict, degenerate: list, configs: dict, artefacts: list) -> dict:
    m = sub.meta
    grid = "every distinct clean _val score" if params.threshold_grid is None else list(params.threshold_grid)
    return {
        "submission": sub.id, "name": m.name, "team": m.team, "model": m.model, "track": m.track,
        "contact": m.contact, "license": m.license, "description": m.description,
        "dataset_version": index.version, "dataset_digest": index.digest,
        "evaluator_version": EVALUATOR_VERSION, "package_version": aegisbench.__version__,
        "params": params.as_dict(), "params_sha256": params.digest(),
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
        "prediction_form": sub.form,
        "submission_files": sub.files,
        "artefacts": artefacts,
    }


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    return obj


def write_results(ev: Evaluation, results_dir: str | Path) -> Path:
    """Write ``results/<id>/`` through a hidden staging folder swapped into place; a
    failure leaves nothing behind (an older result for the id stays untouched)."""
    root = Path(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / ev.submission.id
    staging = Path(tempfile.mkdtemp(prefix=f".{ev.submission.id}.staging-", dir=root))
    try:
        pq.write_table(ev.metrics, staging / "metrics.parquet")
        pq.write_table(ev.per_image, staging / "per_image.parquet")
        for name, table in ev.tables.items():
            pq.write_table(table, staging / name)
        for name, doc in ev.documents.items():
            (staging / name).write_text(json.dumps(_jsonable(doc), indent=1, sort_keys=True) + "\n")
        (staging / "provenance.json").write_text(json.dumps(_jsonable(ev.provenance), indent=1, sort_keys=True) + "\n")
        staging.chmod(0o755)
        replace_dir(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("wrote %s (%d metric rows)", final, ev.metrics.num_rows)
    return final


def evaluate_submission(submission: str | Path, dataset: str | Path = "data/aegisbench",
                        results: str | Path = "results", params: EvaluationParams = EvaluationParams(), *,
                        verify: bool = True, progress: bool = False, executor: Executor | None = None) -> Path:
    """Validate (raising :class:`~aegisbench.evaluation.submission.SubmissionInvalid` with
    every problem, nothing written), score (sources on ``executor``) and write
    ``results/<id>/``; returns the folder."""
    index = DatasetIndex(dataset, verify=verify)
    sub = validate_submission(submission, index, params.limits, params.warp_grid)
    if sub.form == "firespread":
        from aegisbench.evaluation.commands import evaluate_firespread
        return evaluate_firespread(sub, index, results, params)
    return write_results(evaluate(sub, index, params, progress=progress, executor=executor), results)


__all__ = ["EVALUATOR_VERSION", "Evaluation", "EvaluationParams", "SourceScores", "SplitScore", "evaluate",
           "evaluate_submission", "family_of", "freeze_for_source", "score_source", "write_results"]
