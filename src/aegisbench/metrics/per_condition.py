"""The per-condition detection metrics: one registered function per row name (or per
enumerable family), each computing its rows of one condition from a
:class:`~aegisbench.metrics.condition.ConditionContext`. The evaluator runs them in the
order they are registered here; a new metric is one more decorated function.

Counts and rates are at the frozen threshold; ``map50`` / ``map50_95`` use every
prediction; ``n`` is GT boxes for recall, kept predictions for precision, images for the
rest, environments (images with GT) for effectiveness and sequences for time to detect.
A value with a zero denominator (precision without a kept detection, recall or mAP without
a GT box, a mean over no boxes, a drop against a clean value of 0) is undefined: its row
has a null value and interval and the note ``0/0`` (:data:`~aegisbench.metrics.condition.ZERO_DIVISION`).

>>> [p.name for p in REGISTRY.producers("sar")][:8]
['tp', 'fp', 'fn', 'recall', 'precision', 'f1', 'map50', 'map50_95']
>>> RECALL_BY_SIZE.name_of("tiny"), RELATIVE_DROP.name_of("map50")
('recall_tiny', 'relative_drop_map50')
"""

from __future__ import annotations

import logging
import math

import numpy as np

import aegisbench.metrics.detection as D
import aegisbench.metrics.smoke as S
from aegisbench.metrics.condition import Cell, ConditionContext
from aegisbench.metrics.registry import HIGHER, LOWER, REGISTRY, UNORDERED, MetricSpec, family, metric, metric_group
from aegisbench.vocab import FIRESPREAD, SMOKE, TRACKS

log = logging.getLogger(__name__)
INF = math.inf
UNIT = (0.0, 1.0)
_SIZE_TEXT = {"tiny": "under 16x16 px", "small": "16x16 to 32x32 px", "medium": "32x32 to 96x96 px",
              "large": "96x96 px or more"}
SIZE_TEXT = {name: f"{_SIZE_TEXT[name]} (area in [{lo:g}, {hi:g}) px^2)" for name, lo, hi in D.SIZE_BANDS}
DROP_BASES = {"recall": "Recall", "precision": "Precision", "f1": "F1", "map50": "mAP50", "map50_95": "mAP50-95"}


def _values(ctx: ConditionContext) -> dict[str, float]:
    """recall / precision / F1 at the threshold and the two mAPs of a condition."""
    def compute():
        c = ctx.counts
        # pycocotools' -1: no GT box, so AP is 0/0
        ap = {k: ctx.coco[k] if ctx.coco[k] >= 0 else math.nan for k in ("map50", "map50_95")}
        return {"recall": D.recall(c), "precision": D.precision(c), "f1": D.f1(c), **ap}
    return ctx.cached("values", compute)


def _shared_ci(ctx: ConditionContext, name: str):
    """The split's shared-draw interval of recall / precision / F1 / map50 (None without one)."""
    if ctx.bootstrap is None or ctx.n_images == 0:
        return None
    return ctx.cached("shared_intervals", ctx.bootstrap.shared).get(name)


# ------------------------------------------------------------ counts and rates


@metric(direction=HIGHER, label="TP count", bounds=(0, INF), unit="boxes", integer=True,
        description="True positives: GT boxes matched by a kept prediction (IoU >= 0.5, greedy, class-agnostic).")
def tp(ctx: ConditionContext) -> Cell:
    return Cell(float(ctx.pooled[0]))


@metric(direction=LOWER, label="FP count", bounds=(0, INF), unit="boxes", integer=True,
        description="False positives: kept predictions matched to no GT box.")
def fp(ctx: ConditionContext) -> Cell:
    return Cell(float(ctx.pooled[1]))


@metric(direction=LOWER, label="FN count", bounds=(0, INF), unit="boxes", integer=True,
        description="False negatives: GT boxes no kept prediction matched.")
def fn(ctx: ConditionContext) -> Cell:
    return Cell(float(ctx.pooled[2]))


@metric(direction=HIGHER, label="Recall", bounds=UNIT, full_scale=True, interval=True, tracks=TRACKS,
        track_labels={FIRESPREAD: "F2R recall"},
        description="Share of the positives found: GT boxes matched at the frozen threshold (detection), "
                    "burnt pixels forecast burnt, p > threshold (fire spread); null (n/a, 0/0) without positives.")
def recall(ctx: ConditionContext) -> Cell:
    tp_, _, fn_ = (int(v) for v in ctx.pooled)
    return Cell(_values(ctx)["recall"], _shared_ci(ctx, "recall"), tp_ + fn_)


@metric(direction=HIGHER, label="Precision", bounds=UNIT, full_scale=True, interval=True, tracks=TRACKS,
        track_labels={FIRESPREAD: "F2R precision"},
        description="Share of the kept predictions (detection) or of the pixels forecast burnt (fire spread) "
                    "that are right; null (n/a, 0/0) without a single kept prediction.")
def precision(ctx: ConditionContext) -> Cell:
    tp_, fp_, _ = (int(v) for v in ctx.pooled)
    return Cell(_values(ctx)["precision"], _shared_ci(ctx, "precision"), tp_ + fp_)


@metric(direction=HIGHER, label="F1", bounds=UNIT, full_scale=True, interval=True, tracks=TRACKS,
        track_labels={FIRESPREAD: "F2R F1"},
        description="Harmonic mean of precision and recall, 2 TP / (2 TP + FP + FN), pooled; null (n/a, 0/0) "
                    "with neither a GT box nor a kept prediction.")
def f1(ctx: ConditionContext) -> Cell:
    return Cell(_values(ctx)["f1"], _shared_ci(ctx, "f1"))


@metric(direction=HIGHER, label="mAP50", bounds=UNIT, full_scale=True, interval=True,
        description="COCO average precision at IoU 0.5 (101-point, class-agnostic) over every prediction, "
                    "no maxDets truncation; null (n/a, 0/0) without a GT box.")
def map50(ctx: ConditionContext) -> Cell:
    return Cell(_values(ctx)["map50"], _shared_ci(ctx, "map50"))


@metric(direction=HIGHER, label="mAP50-95", bounds=UNIT, full_scale=True,
        description="COCO average precision averaged over IoU 0.50:0.05:0.95, every prediction.")
def map50_95(ctx: ConditionContext) -> Cell:
    return Cell(_values(ctx)["map50_95"])


RECALL_BY_SIZE = family("recall_by_size", "recall_{}", SIZE_TEXT, label="Recall ({member})", bounds=UNIT,
                        direction=HIGHER, description="Recall at the frozen threshold of the GT boxes {text}.")


@metric_group(RECALL_BY_SIZE)
def recall_by_size(ctx: ConditionContext) -> dict[str, Cell]:
    bands = D.recall_by_size(ctx.match.gt_xyxy, ctx.match.gt_detected(ctx.threshold))
    return {RECALL_BY_SIZE.name_of(b): Cell(r["recall"], n=r["n_gt"]) for b, r in bands.items() if r["n_gt"]}


# ------------------------------------------------------------- against clean

RELATIVE_DROP = family("relative_drop", "relative_drop_{}", DROP_BASES, label="{text} drop vs own clean",
                       direction=LOWER, bounds=(-INF, 1.0),
                       description="(clean - condition) / clean of the model's own {member} (null, 0/0, "
                                   "when clean is 0 or undefined); "
                                   "0.25 = a quarter lost, negative = better than clean.")


@metric_group(RELATIVE_DROP)
def relative_drop(ctx: ConditionContext) -> dict[str, Cell] | None:
    if ctx.is_clean:
        return None
    base, vals = _values(ctx.clean), _values(ctx)
    return {RELATIVE_DROP.name_of(b): Cell(D.relative_drop(base[b], vals[b])) for b in DROP_BASES}


def _stability(ctx: ConditionContext) -> dict | None:
    """Localization stability against clean (None unpaired, or when the GT boxes differ)."""
    def compute():
        if ctx.is_clean or not ctx.paired:
            return None
        try:
            return D.localization_stability(ctx.clean.match, ctx.match, ctx.threshold)
        except ValueError as exc:
            log.warning("%s/%s: %s; no localization stability", ctx.config, ctx.source, exc)
            return None
    return ctx.cached("stability", compute)


@metric(direction=HIGHER, label="Localization IoU", bounds=UNIT, full_scale=True,
        description="Mean IoU between the predictions matched to the same GT box in clean and in this "
                    "condition, over the GT boxes detected in both.")
def loc_iou(ctx: ConditionContext) -> Cell | None:
    loc = _stability(ctx)
    return None if loc is None else Cell(loc["stability"], n=loc["n_both"])


@metric(direction=LOWER, label="Localization centre shift", bounds=(0, INF), unit="GT diagonals",
        description="Mean distance between those two predictions' centres, divided by the GT box diagonal.")
def loc_center_shift(ctx: ConditionContext) -> Cell | None:
    loc = _stability(ctx)
    return None if loc is None else Cell(loc["center_shift"], n=loc["n_both"])


@metric(direction=HIGHER, label="GT boxes detected in both", bounds=(0, INF), unit="boxes", integer=True,
        description="GT boxes detected both in clean and in this condition (n: those detected in clean).")
def loc_n_both(ctx: ConditionContext) -> Cell | None:
    loc = _stability(ctx)
    return None if loc is None else Cell(float(loc["n_both"]), n=loc["n_clean_detected"])


@metric(direction=LOWER, label="Silent failure", bounds=UNIT, full_scale=True,
        description="1 when detections vanish without a sign: recall falls by at least half of its clean value, "
                    "the surviving detections stay on target (localization IoU >= 0.7, or none left) and false "
                    "positives per image at the frozen threshold are not above clean's; else 0 (null without GT).")
def silent_failure(ctx: ConditionContext) -> Cell | None:
    loc = _stability(ctx)
    if loc is None:
        return None
    flag = D.silent_failure(_values(ctx.clean)["recall"], _values(ctx)["recall"], loc["stability"], loc["n_both"],
                            ctx.clean.fp_per_image, ctx.fp_per_image, ctx.silent)
    return Cell(None if flag is None else float(flag))


def effectiveness_of(ctx: ConditionContext) -> dict | None:
    """Seed 002's S(P, E) of a paired condition against clean: value, interval, environments
    and the per-size breakdown (None on clean, unpaired, or without environments). Like
    the silent-failure flag it is only scored where localization stability is."""
    def compute():
        if _stability(ctx) is None:
            return None
        n_gt = ctx.clean.gt.n_gt()
        env = np.flatnonzero(n_gt > 0)
        if not len(env):
            return None
        terms = D._eff_terms(ctx.clean.counts[env, 0], ctx.counts[env, 0], n_gt[env])  # once for all three
        boot = ctx.bootstrap  # None: no interval
        lo, hi = (None, None) if boot is None else D._interval_of(
            terms, (*boot.key, ctx.config, "effectiveness"), boot.n_resamples, boot.percentiles)
        boxes = ctx.clean.gt.boxes
        levels = [D.size_band(float(np.median((boxes[i][:, 2] - boxes[i][:, 0]) * (boxes[i][:, 3] - boxes[i][:, 1]))))
                  for i in env]
        size = D._breakdown_of(terms, {"size": levels})["size"]
        return {"value": D._score_of(terms), "lo": lo, "hi": hi, "n_environments": len(env),
                "size": size, "size_n": {k: levels.count(k) for k in size}}
    return ctx.cached("effectiveness", compute)


@metric(direction=LOWER, label="Effectiveness S(P, E)", bounds=(-1.0, 1.0), interval=True,
        description="Seed 002: mean over images with GT of (TP clean - TP condition) / n_gt; the corruption's "
                    "effectiveness, so higher hurts the model.")
def effectiveness(ctx: ConditionContext) -> Cell | None:
    e = effectiveness_of(ctx)
    return None if e is None else Cell(e["value"], (e["lo"], e["hi"]), e["n_environments"])


EFFECTIVENESS_BY_SIZE = family("effectiveness_by_size", "effectiveness_size_{}", SIZE_TEXT,
                               label="Effectiveness S ({member})", direction=LOWER, bounds=(-1.0, 1.0),
                               description="S(P, E) over the images whose median GT box is {text}.")


@metric_group(EFFECTIVENESS_BY_SIZE)
def effectiveness_by_size(ctx: ConditionContext) -> dict[str, Cell] | None:
    e = effectiveness_of(ctx)
    if e is None:
        return None
    return {EFFECTIVENESS_BY_SIZE.name_of(b): Cell(v, n=e["size_n"][b]) for b, v in e["size"].items()}


# ------------------------------------------------------------------- smoke


def _image_level(ctx: ConditionContext) -> tuple[dict, dict, int]:
    """Image-level P/R/F1, their shared-draw intervals and the number of images."""
    def compute():
        g, p = ctx.gt.n_gt() > 0, S.image_positive(ctx.match, ctx.threshold)
        counts = S.image_counts(g, p)
        ci = ctx.bootstrap.counts(counts) if len(counts) and ctx.bootstrap is not None else {}
        return S.image_level_prf(g, p), ci, len(counts)
    return ctx.cached("image_level", compute)


def _image_cell(ctx: ConditionContext, base: str) -> Cell:
    il, ci, n = _image_level(ctx)
    return Cell(il[base], ci.get(base), n)


@metric(direction=HIGHER, label="Image-level precision", bounds=UNIT, interval=True, tracks=(SMOKE,),
        description="Share of the images with a kept box that hold smoke (seed 001's image-level decision).")
def image_precision(ctx: ConditionContext) -> Cell:
    return _image_cell(ctx, "precision")


@metric(direction=HIGHER, label="Image-level recall", bounds=UNIT, interval=True, tracks=(SMOKE,),
        description="Share of the images with smoke that have a kept box.")
def image_recall(ctx: ConditionContext) -> Cell:
    return _image_cell(ctx, "recall")


@metric(direction=HIGHER, label="Image-level F1", bounds=UNIT, interval=True, tracks=(SMOKE,),
        description="Harmonic mean of image-level precision and recall.")
def image_f1(ctx: ConditionContext) -> Cell:
    return _image_cell(ctx, "f1")


def sequence_delays_of(ctx: ConditionContext) -> list[dict]:
    """Time to detect of every smoke sequence of the condition (:func:`aegisbench.metrics.smoke.sequence_delays`)."""
    return ctx.cached("delays", lambda: S.sequence_delays(ctx.gt, ctx.match, ctx.threshold))


def _ttd(name: str, direction: str, label: str, unit: str, description: str) -> MetricSpec:
    return MetricSpec(name, (SMOKE,), direction, label, description, bounds=(0, INF), unit=unit,
                      family="time_to_detect")


TIME_TO_DETECT = (
    _ttd("time_to_detect_min", LOWER, "Time to detect (min)", "min", "Mean delay from the fire start to the "
         "first correct detection, over the detected sequences (n: detected sequences)."),
    _ttd("time_to_detect_min_sd", UNORDERED, "Time to detect SD (min)", "min",
         "Sample SD (ddof 1) of that delay over the detected sequences."),
    _ttd("time_to_detect_frames", LOWER, "Time to detect (frames)", "frames",
         "Mean delay in frames from the fire start to the first correct detection."),
    _ttd("time_to_detect_frames_sd", UNORDERED, "Time to detect SD (frames)", "frames",
         "Sample SD (ddof 1) of the delay in frames over the detected sequences."),
)


@metric_group(TIME_TO_DETECT)
def time_to_detect(ctx: ConditionContext) -> dict[str, Cell] | None:
    delays = sequence_delays_of(ctx)
    if not delays:
        return None
    s = S.time_to_detect_summary(delays)
    k = s["n_detected"]
    return {"time_to_detect_min": Cell(s["mean_minutes"], n=k), "time_to_detect_min_sd": Cell(s["sd_minutes"], n=k),
            "time_to_detect_frames": Cell(s["mean_frames"], n=k),
            "time_to_detect_frames_sd": Cell(s["sd_frames"], n=k)}


@metric(direction=HIGHER, label="Sequences detected", bounds=UNIT, tracks=(SMOKE,),
        description="Share of the smoke sequences with a correct detection at or after the fire start.")
def sequences_detected(ctx: ConditionContext) -> Cell | None:
    delays = sequence_delays_of(ctx)
    if not delays:
        return None
    s = S.time_to_detect_summary(delays)
    return Cell(s["n_detected"] / s["n_sequences"], n=s["n_sequences"])

