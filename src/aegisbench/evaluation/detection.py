"""The detection tracks (``sar``, ``smoke``): reading their predictions and scoring them.

Per source of the track:

1. **Frozen threshold**: maximum pooled F1 on the clean ``<source>_val`` predictions
   under the shared matcher (ties: the higher threshold), over the track's candidates
   (``threshold.TRACK_RULE``: every distinct score on sar, seed 001's grid 0.01..0.20 on
   smoke) or those ``EvaluationParams.threshold_grid`` names; recorded, then applied
   unchanged to every condition.
2. Per config holding the source's test split: every registered per-condition metric
   at that threshold (counts, recall, precision, F1, mAP on all predictions, recall per
   size band, relative drop against the model's own clean score, localization
   stability, the silent-failure flag, effectiveness score S of seed 002), with
   percentile bootstrap intervals from one draw of image resamples per (submission,
   split) shared by all conditions.
3. Smoke track: image-level P/R/F1, time to detect per sequence, and the WARP tests
   of seed 000 on the clean test split when given: the cloud-patch test
   (``warp_patch.parquet``) and the global-noise sweep (``warp_noise.parquet``: each level,
   config ``warp_noise_<a>``, scored as a condition of the clean frames, plus its mAP50-95
   % loss L(a) with an interval).

Not errors, but rows with value null and the reason in ``note``: a config the build left
out for the source because its physics does not hold for the source's sensor (manifest
``not_physical``) gets one row per metric a condition row of that source has, noted
``not physical for <modality>``; a source without a clean ``<source>_val`` (an older or
external repo: builds refuse to leave one out) is not scored: its validation rows are
null, noted ``no clean val split to freeze a threshold on``, and the provenance lists it
under ``sources_skipped``. Only when no source of the track can be scored is the
submission refused (one line naming the sources).

``n`` in ``metrics.parquet``: GT boxes for recall rows, kept predictions for
precision, images for every other detection metric, environments (images with GT)
for effectiveness, sequences for time to detect. The GT's ignore regions enter the one
matching pass as COCO crowd boxes (a prediction on one is neither TP nor FP). With
``params.stratify`` every condition row is repeated per stratum (:mod:`~aegisbench.evaluation.strata`).

>>> sorted(t for t in ("sar", "smoke") if get_track(t).kind == "detection")
['sar', 'smoke']
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import Resamples
from aegisbench.evaluation.coco import map_from_arrays
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.matching import BatchMatch, match_images
from aegisbench.evaluation.results import Evaluation, provenance, results_table
from aegisbench.evaluation.scoring import ConditionScorer
from aegisbench.evaluation.strata import StrataScorers, check_columns, strata_provenance
from aegisbench.evaluation.submission import ValidatedSubmission, read_detection_predictions
from aegisbench.evaluation.threshold import RULES, TRACK_RULE, freeze_threshold, rule_grid
from aegisbench.evaluation.tracks import Track, get_track, register_track
from aegisbench.executor import Executor, map_tasks
from aegisbench.metrics import condition_cells
from aegisbench.progress import progress as progress_bar
from aegisbench.vocab import CLEAN, DETECTION_TRACKS, SAR, SMOKE

log = logging.getLogger(__name__)

#: ``note`` of the null rows of a source without a clean val split.
NO_VAL_NOTE = "no clean val split to freeze a threshold on"
VALIDATION_METRICS = ("frozen_threshold", "val_f1", "val_recall", "val_precision")


def not_physical_note(modality: str) -> str:
    """``note`` of the null rows of a config not built for the source's sensor."""
    return f"not physical for {modality}"

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
    ("deceptions", pa.int64()), ("gamma", pa.float64()), ("gamma_positions", pa.float64())])


@dataclass(eq=False)
class SplitScore:
    """One (config, split): GT, predictions in GT order and the one matching pass."""

    config: str
    gt: object  # SplitGT
    dets: list
    match: BatchMatch

    @classmethod
    def of(cls, sub: ValidatedSubmission, config: str, gt) -> SplitScore:
        return cls.matched(config, gt, [sub.predictions.get_detections(config, gt.split, i) for i in gt.image_ids])

    @classmethod
    def matched(cls, config: str, gt, dets: list) -> SplitScore:
        """Match ``dets`` (GT order) to the boxes of ``gt``, its ignore regions as COCO crowd."""
        m = match_images([d.xyxy for d in dets], [d.score for d in dets], list(gt.boxes),
                         ignore_xyxy=[gt.ignore_boxes(i) for i in range(len(gt))])
        return cls(config, gt, dets, m)

    def subset(self, positions) -> SplitScore:
        """The images at ``positions`` only (a stratum), re-matched (matching is per image)."""
        return SplitScore.matched(self.config, self.gt.subset(positions), [self.dets[i] for i in positions])

    def coco(self, max_dets: int | None) -> dict:
        return map_from_arrays([d.xyxy for d in self.dets], [d.score for d in self.dets], list(self.gt.boxes),
                               max_dets=max_dets, ignore_xyxy=[self.gt.ignore_boxes(i) for i in range(len(self.gt))])

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
    """``(threshold, val F1, val SplitScore)`` of one source (BadInput without a clean val split)."""
    val_split = f"{source}_val"
    if index.split_info(CLEAN, val_split) is None:
        raise BadInput(f"the dataset has no clean validation split {val_split!r}: cannot freeze a threshold",
                       where=str(index.repo))
    val = SplitScore.of(sub, CLEAN, index.gt(CLEAN, val_split))
    grid = threshold_candidates(params, sub.meta.track)[1]
    thr, vf1 = freeze_threshold(val.match, None if grid is None else np.asarray(grid))
    return thr, vf1, val


def threshold_candidates(params, track: str) -> tuple[str, tuple[float, ...] | None]:
    """``(rule, candidates)`` of the threshold search: the track's rule unless ``params``
    names one (``rule`` ``custom`` for a list of values; candidates None: every distinct score).

    >>> from aegisbench.evaluation.evaluator import EvaluationParams
    >>> threshold_candidates(EvaluationParams(), "smoke")[1][:2], threshold_candidates(EvaluationParams(), "sar")
    ((0.01, 0.02), ('scores', None))
    """
    g = params.threshold_grid
    if isinstance(g, tuple):
        return "custom", g
    rule = TRACK_RULE[track] if g is None else g
    return rule, rule_grid(rule)


@dataclass(eq=False)
class SourceScores:
    """Everything one source contributes to an evaluation (independent of other sources)."""

    source: str
    threshold: float
    val_f1: float
    configs: list[str] | None  # None: empty test split, skipped
    skipped: str | None = None  # why the source was not scored (no clean val split)
    strata: dict | None = None  # images per stratum of the test split (evaluate --stratify)
    rows: list[dict] = field(default_factory=list)
    per_image: dict[str, list] = field(default_factory=dict)
    ttd: dict[str, list] = field(default_factory=dict)
    patch_rows: dict[str, list] = field(default_factory=dict)
    warp_docs: dict[str, dict] = field(default_factory=dict)  # warp_patch.json / warp_noise.json -> this source's
    effectiveness: dict | None = None
    degenerate: list[dict] = field(default_factory=list)


def score_source(sub: ValidatedSubmission, index: DatasetIndex, source: str, params,
                 on_config=None) -> SourceScores:
    """Freeze the threshold of ``source`` and score every config holding its test split
    (``on_config()`` is called after each config)."""
    track = sub.meta.track
    if index.split_info(CLEAN, f"{source}_val") is None:
        return _no_val_scores(sub, index, source)
    thr, vf1, val = freeze_for_source(sub, index, source, params)
    out = SourceScores(source, thr, vf1, None)
    _extend(out.per_image, val.per_image(sub.id, thr))
    clean_gt = index.gt(CLEAN, source)
    if len(clean_gt) == 0:
        log.warning("source %s has an empty test split; skipped", source)
        return out
    key = ("aegisbench-bootstrap", index.scoring_digest, sub.id, source)
    resamples = Resamples.draw(len(clean_gt), key, params.bootstrap.n_resamples)
    scorer = ConditionScorer(sub, index, source, thr, params, resamples, key)
    scorer.add_validation_rows(val, vf1)
    strata = StrataScorers(sub, index, source, thr, params, key, clean_gt, params.stratify)
    clean = SplitScore.of(sub, CLEAN, clean_gt)
    out.configs = [CLEAN] + [c for c in index.configs() if c != CLEAN and index.split_info(c, source)]
    for config in out.configs:
        gt = index.gt(config, source)
        paired = set(gt.image_ids) == set(clean_gt.image_ids)
        if paired:
            gt = gt.reordered(clean_gt.image_ids)
        score = clean if config == CLEAN else SplitScore.of(sub, config, gt)
        scorer.score_config(score, clean if paired else None)
        strata.score_config(score, paired)
        _extend(out.per_image, score.per_image(sub.id, thr))
        if track == SMOKE:
            _extend(out.ttd, scorer.smoke_rows(score))
        if on_config is not None:
            on_config()
    if track == SMOKE:
        from aegisbench.evaluation.warp_noise_eval import score_warp_tests
        score_warp_tests(out, sub, scorer, clean, params)
    scorer.add_label_match_row(clean)
    for sc, part in [(scorer, clean), *strata.with_clean()]:
        add_not_physical_rows(sc, part, out.configs, not_physical_configs(index, source))
    out.effectiveness = scorer.effectiveness_summary()
    out.rows, out.degenerate = scorer.rows + strata.rows, scorer.degenerate + strata.degenerate
    out.strata = strata.summary()
    return out


def not_physical_configs(index: DatasetIndex, source: str) -> dict[str, str]:
    """``{config: modality}`` of the configs the build left out for ``source`` as not
    physical for its sensor (manifest ``configs.<config>.not_physical``)."""
    return {c: cfg["not_physical"][source] for c, cfg in sorted(index.manifest["configs"].items())
            if source in (cfg.get("not_physical") or {})}


def _null_row(scorer: ConditionScorer, config: str, metric: str, note: str) -> None:
    scorer.add(config, metric, None)
    scorer.rows[-1]["note"] = note


def add_not_physical_rows(scorer: ConditionScorer, clean: SplitScore, scored: list[str],
                          skipped: dict[str, str]) -> None:
    """Null rows, noted "not physical for <modality>", for every config left out for the
    source: the metric names of a scored condition of the same kind of this source, else
    those a condition paired with clean gets (computed once per kind on the clean split)."""
    by_kind: dict[str, list[str]] = {}
    for row in scorer.rows:
        if row["config"] != CLEAN and row["config"] in scored:
            kind = scorer.index.meta(row["config"]).get("kind")
            names = by_kind.setdefault(kind, [])
            if row["metric"] not in names:
                names.append(row["metric"])
    for config, modality in skipped.items():
        kind = scorer.index.meta(config).get("kind")
        if kind not in by_kind:
            ctx = scorer.context(SplitScore(config, clean.gt, clean.dets, clean.match), clean)
            by_kind[kind] = [name for name, _ in condition_cells(ctx)]
        for metric in by_kind[kind]:
            _null_row(scorer, config, metric, not_physical_note(modality))


def _no_val_scores(sub: ValidatedSubmission, index: DatasetIndex, source: str) -> SourceScores:
    """A source with no clean val split: not scored; null validation rows with the reason."""
    log.warning("source %s has no clean validation split %s_val: not scored (%s)", source, source, NO_VAL_NOTE)
    scorer = ConditionScorer(sub, index, source, float("nan"), None, None, ())
    for metric in VALIDATION_METRICS:
        _null_row(scorer, CLEAN, metric, NO_VAL_NOTE)
    return SourceScores(source, float("nan"), float("nan"), None, skipped=NO_VAL_NOTE, rows=scorer.rows)


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
    no_val = [s for s in sources if index.split_info(CLEAN, f"{s}_val") is None]
    if no_val and len(no_val) == len(sources):
        raise BadInput(f"no source of track {track} has a clean validation split to freeze a threshold on "
                       f"(missing: {', '.join(f'{s}_val' for s in no_val)})", where=str(index.repo))
    check_columns(index, sources, params.stratify)
    total = sum(1 for s in sources if s not in no_val for c in index.configs() if index.split_info(c, s) is not None)
    bar = progress_bar(total, f"evaluate {sub.id}", unit="config", enabled=progress)
    if executor.kind == "local" and executor.workers == 1:
        parts = (score_source(sub, index, s, params, bar.update) for s in sources)
    else:
        parts = map_tasks(_score_source_task, [(sub, index, s, params) for s in sources], executor)
    rows: list[dict] = []
    per_image: dict[str, list] = {}
    ttd: dict[str, list] = {}
    patch_rows: dict[str, list] = {}
    thresholds, val_f1, effectiveness, warp_docs, degenerate, configs_scored = {}, {}, {}, {}, [], {}
    skipped, strata = {}, {}  # source -> why it was not scored / images per stratum (None: not stratified)
    for part in parts:
        if part.skipped is not None:  # not scored: its null rows carry the reason
            skipped[part.source] = part.skipped
            rows.extend(part.rows)
            continue
        thresholds[part.source], val_f1[part.source] = part.threshold, part.val_f1
        _extend(per_image, part.per_image)
        if part.configs is None:
            continue
        configs_scored[part.source] = part.configs
        strata[part.source] = part.strata
        _extend(ttd, part.ttd)
        for name, doc in part.warp_docs.items():  # warp_patch.json, warp_noise.json
            warp_docs.setdefault(name, {})[part.source] = doc
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
    if patch_rows:
        tables["warp_patch_images.parquet"] = _table(patch_rows, PATCH_SCHEMA)
    documents.update(warp_docs)
    prov = provenance(sub, index, params, sorted([*tables, *documents]),
                      **_detection_provenance(sub, index, params, thresholds, val_f1, degenerate, configs_scored),
                      sources_skipped=skipped,
                      configs_not_physical={s: sorted(not_physical_configs(index, s)) for s in configs_scored
                                            if not_physical_configs(index, s)},
                      **({"strata": strata_provenance(params.stratify, strata)} if params.stratify else {}))
    return Evaluation(sub, results_table(rows), _table(per_image, PER_IMAGE_SCHEMA), prov, tables, documents)


def _detection_provenance(sub, index, params, thresholds: dict, val_f1: dict, degenerate: list,
                          configs: dict) -> dict:
    rule, grid = threshold_candidates(params, sub.meta.track)
    return {
        "frozen_threshold": thresholds,
        "threshold_selection": {"rule": "maximum pooled F1 on the clean <source>_val predictions under the shared "
                                "matcher (IoU >= 0.5, greedy, class-agnostic); ties go to the higher threshold; "
                                "applied unchanged to every condition",
                                "candidates": RULES["scores"] if grid is None else list(grid),
                                "grid": rule, "grid_from": "track default" if params.threshold_grid is None
                                else "chosen (evaluate --threshold-grid)",
                                "val_f1": val_f1, "val_split": {s: f"{s}_val" for s in thresholds}},
        "max_dets": params.max_dets,
        "max_dets_note": ("mAP uses every prediction of an image (no maxDets truncation)" if params.max_dets is None
                          else f"mAP keeps the {params.max_dets} highest-scoring predictions per image"),
        "bootstrap": {"n_resamples": params.bootstrap.n_resamples, "percentiles": list(params.bootstrap.percentiles),
                      "unit": "image", "method": "percentile",
                      "rng_key": ["aegisbench-bootstrap", index.scoring_digest, sub.id, "<source>"],
                      "sharing": "one draw of image resamples per (submission, test split), shared by every "
                                 "condition of that split (paired)"},
        "degenerate_intervals": degenerate,
        "configs": configs,
    }


def _summary(sub: ValidatedSubmission) -> str:
    extra = "" if sub.warp_patch is None else f", WARP patch test on {len(sub.warp_patch.entries)} images"
    extra += "" if sub.warp_noise is None else f", WARP noise sweep at {len(sub.warp_noise.levels)} levels"
    return (f"{sub.id}: OK (track {sub.meta.track}, {sub.form} form, {sub.predictions.n_boxes()} boxes on "
            f"{len(sub.predictions)} images{extra})")


_CONTENTS = {
    SAR: "boxes of persons on every config/split of the sar sources (Parquet, COCO results or YOLO txt)",
    SMOKE: "boxes of smoke plumes on every config/split of the smoke sources, optionally warp_patch.parquet and "
           "warp_noise.parquet",
}
for _name in DETECTION_TRACKS:
    register_track(Track(name=_name, kind="detection", contents=_CONTENTS[_name], read=read_detection_predictions,
                         score=score_detection, summary=_summary))
