"""Registered names that a track's scorer computes in bulk rather than per condition:
the clean validation rows and the WARP cloud-patch test and noise sweep of the detection tracks, and
the fire-spread cells (F2R and F2S side by side, seed 003), which
:mod:`aegisbench.evaluation.firespread_scoring` computes from pooled sufficient statistics.
``precision``, ``recall`` and ``f1`` of fire spread are the detection metrics' names
(:mod:`aegisbench.metrics.per_condition`), read there as F2R scores.

>>> SD_MAPS.name_of("brier"), REGISTRY["brier"].label_for("firespread")
('brier_sd_maps', 'F2S Brier')
"""

from __future__ import annotations

import math

from aegisbench.metrics.registry import HIGHER, LOWER, REGISTRY, UNORDERED, MetricSpec, declare, family
from aegisbench.vocab import DETECTION_TRACKS, FIRESPREAD, SMOKE

UNIT = (0.0, 1.0)
QUARTER = (0.0, 0.25)  # a variance of binary outcomes, or a part of one

# ------------------------------------------------------------- clean validation

VALIDATION = declare(
    MetricSpec("frozen_threshold", DETECTION_TRACKS, UNORDERED, "Frozen threshold", bounds=UNIT, unit="score",
               description="Confidence threshold frozen at the maximum pooled F1 on clean validation "
                           "(ties: the higher) over the track's candidates (smoke: seed 001's grid 0.01..0.20; sar: "
                           "every clean validation score), applied unchanged to every condition."),
    MetricSpec("val_f1", DETECTION_TRACKS, HIGHER, "Validation F1", bounds=UNIT,
               description="Pooled F1 on the clean validation split at the frozen threshold."),
    MetricSpec("val_recall", DETECTION_TRACKS, HIGHER, "Validation recall", bounds=UNIT,
               description="Recall on the clean validation split at the frozen threshold."),
    MetricSpec("val_precision", DETECTION_TRACKS, HIGHER, "Validation precision", bounds=UNIT,
               description="Precision on the clean validation split at the frozen threshold."),
)

#: share of kept clean test boxes at which a row is flagged "matches the published test labels"
LABEL_MATCH_FLAG = 0.5
#: IoU at which a kept box counts as a copy of the GT box it is matched to
LABEL_MATCH_IOU = 0.99
LABEL_MATCH = declare(
    MetricSpec("label_match", DETECTION_TRACKS, UNORDERED, "Share of kept boxes equal to a test label", bounds=UNIT,
               description=f"Share of the kept clean test predictions whose IoU with the GT box they are matched "
                           f"to is at least {LABEL_MATCH_IOU}: a detector rarely draws a box to the pixel; predictions "
                           f"made from the published test labels do. At {LABEL_MATCH_FLAG} or more the row is "
                           "flagged as matching the published test labels (flagged, not hidden)."),
)

# ------------------------------------------------------ WARP cloud-patch test

WARP_PATCH = declare(
    MetricSpec("alpha", (SMOKE,), LOWER, "α: positive image turned negative", bounds=UNIT, full_scale=True,
               interval=True, description="WARP patch test: share of the patch positions at which an image with a "
                                          "kept box on the clean frame loses them all (mean over the images)."),
    MetricSpec("beta", (SMOKE,), LOWER, "β: negative image turned positive", bounds=UNIT, full_scale=True,
               interval=True, description="WARP patch test: share of the patch positions at which an image "
                                          "without a kept box gains one."),
    MetricSpec("gamma", (SMOKE,), LOWER, "γ: deceiving detections per patch position", bounds=(0.0, math.inf),
               interval=True, description="WARP patch test, seed 000's gamma_i = D_i / A: kept boxes on the cloud "
                                          "patch itself (IoU >= 0.5) per patch position, every such box counted "
                                          "(two on one patch count twice; mean over the images)."),
    MetricSpec("gamma_positions", (SMOKE,), LOWER, "Patch positions deceived", bounds=UNIT, full_scale=True,
               interval=True, description="WARP patch test: share of the patch positions with at least one kept "
                                          "box on the cloud patch (IoU >= 0.5), however many (mean over the "
                                          "images): the chance that a cloud at a random position fools the model."),
)

# ------------------------------------------------------ WARP global noise sweep

WARP_NOISE_METRICS = declare(
    MetricSpec("warp_map_loss", (SMOKE,), LOWER, "WARP mAP loss % (lower is better)", bounds=(-math.inf, 100.0),
               unit="%", interval=True,
               description="WARP global noise at level a (config warp_noise_<a>): L(a) = 100 (mAP50-95 clean - "
                           "mAP50-95 noisy) / mAP50-95 clean over the clean test frames, positive = a loss, as seed "
                           "000 reports it; the interval resamples the images (both mAPs recomputed)."),
)

# ---------------------------------------------------------------- fire spread


def _fs(name: str, direction: str, label: str, description: str, bounds=UNIT, **kw) -> MetricSpec:
    return MetricSpec(name, (FIRESPREAD,), direction, label, description, bounds=bounds, interval=True, **kw)


FIRESPREAD_CELLS = declare(
    _fs("average_precision", HIGHER, "F2R AP", "Step-wise average precision of the pixel forecasts against "
        "each held-out realization (scikit-learn's average_precision_score).", full_scale=True),
    _fs("auc_pr_trapezoid", HIGHER, "F2R AUC-PR (trapezoid)", "Trapezoidal area under the pixel PR curve, "
        "as seed 003 reports it (not AP).", full_scale=True),
    _fs("ece", LOWER, "F2S ECE", "Expected calibration error over uniform right-closed bins (ece_bins), every "
        "pixel of the cell pooled: sum of |I_k| / N |mean y_k - mean p_k|."),
    _fs("ece_seed003", LOWER, "F2S ECE, seed 003 (per map)", "Seed 003's ECE as its code "
        "computes it (calibration.get_ece per sample): the ECE of each map over 15 equal-width bins, averaged over "
        "the maps whose outcomes hold both burnt and unburnt cells; n counts those maps."),
    _fs("ece_floor", UNORDERED, "ECE floor", "ECE of the ensemble statistic against as many fresh realizations "
        "of its own ensemble: an ece inside its range is finite-sample noise."),
    _fs("brier", LOWER, "F2S Brier", "Mean squared error of the burn probabilities against the realizations."),
    _fs("brier_reliability", LOWER, "F2S Brier reliability", "Murphy reliability: the calibration part of "
        "the Brier score over the calibration bins."),
    _fs("brier_resolution", HIGHER, "F2S Brier resolution", "Murphy resolution: how far the binned outcome "
        "rates spread from the base rate.", bounds=QUARTER),
    _fs("brier_uncertainty", UNORDERED, "Brier uncertainty", "Variance of the outcomes, ybar (1 - ybar): a "
        "property of the realizations, not of the forecast.", bounds=QUARTER),
    _fs("brier_residual", UNORDERED, "Brier residual", "brier - (reliability - resolution + uncertainty): the "
        "within-bin forecast-spread term (0 when forecasts are constant within bins).", bounds=(-1.0, 1.0)),
    _fs("oracle_brier", UNORDERED, "Oracle Brier", "Brier score of the ensemble statistic against the same "
        "realizations: the floor of unconditional forecasts."),
    _fs("excess_brier", LOWER, "F2S Excess Brier", "brier - oracle_brier: how much worse than the ensemble "
        "statistic.", bounds=(-1.0, 1.0)),
)

SD_MAPS = family("sd_maps", "{}_sd_maps", {"precision": "Precision", "recall": "Recall", "f1": "F1",
                                           "average_precision": "AP", "brier": "Brier"},
                 label="SD over maps: {text}", direction=UNORDERED, bounds=(0.0, 0.5), tracks=(FIRESPREAD,),
                 description="Standard deviation over the maps of the cell of the per-map {text} (seed 003 "
                             "Fig. 7); no interval.")
declare(SD_MAPS)

__all__ = ["FIRESPREAD_CELLS", "REGISTRY", "SD_MAPS", "VALIDATION", "WARP_NOISE_METRICS", "WARP_PATCH"]
