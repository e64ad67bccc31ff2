"""Contract tests over the whole metric registry (``aegisbench.metrics.REGISTRY``).

Every registered metric needs its entry in :data:`SETTINGS` (checked below): the hand-made
case that computes it through the code the evaluator runs, its value there (``value``,
worked out by hand in the comments of each case) and in the same case with a perfect model
(``perfect``). Each value must lie in the declared bounds, and for an ordered metric the
perfect model may not score worse than the flawed one in the declared direction.

The cases (4 images of one smoke split, one GT box of each size band; two sequences of two
frames, fire from frame 0, 30 s apart; frozen threshold 0.5):

* ``condition``: every per-condition function (:func:`aegisbench.metrics.condition_cells`) on
  a condition against an exact clean run. The condition misses the tiny box (image 0), keeps
  an extra box on image 2 (score 0.6, a false positive) and shifts the large box 10 px
  (IoU 9/11). mAP: 101 recall points, precision 1 up to recall 3/4 at IoU <= 0.80 (76/101)
  and up to 1/2 above (51/101, 3 of 10 IoU thresholds): mAP50-95 = 685/1010.
* ``validation``: the clean validation rows, the condition's predictions as the validation
  split (threshold frozen over the scores {0.6, 0.9}), and the label-match share.
* ``warp_patch`` / ``warp_noise``: the WARP patch test on a 2x2 grid and the noise sweep.
* ``firespread``: the fire-spread scorer on two maps of four pixels (below).
"""

from __future__ import annotations

import math
from functools import cache
from types import SimpleNamespace

import numpy as np
import pytest

from aegisbench import metrics as M
from aegisbench.dataset.index import SplitGT
from aegisbench.evaluation.detection import SplitScore
from aegisbench.evaluation.firespread_scoring import MapSet, ScoreConfig, score_mapset
from aegisbench.evaluation.scoring import ConditionScorer
from aegisbench.evaluation.threshold import freeze_threshold
from aegisbench.evaluation.warp_eval import PatchPredictions, deception_test, patch_boxes
from aegisbench.evaluation.warp_noise_eval import sweep_curve
from aegisbench.predictions import Detections

HERE = "tests/test_metrics_contract.py"
R = math.sqrt(2) / 60  # the large box's centre moves 10 px, its diagonal is 100 sqrt(2): mean over 3 boxes
SD2 = math.sqrt(0.5)  # sample SD of (1, 0)

# name -> (case, value in the case, value with a perfect model); None: no value (0/0)
SETTINGS = {
    # per condition: TP 3, FP 1, FN 1 at 0.5
    "tp": ("condition", 3, 4), "fp": ("condition", 1, 0), "fn": ("condition", 1, 0),
    "recall": ("condition", 0.75, 1), "precision": ("condition", 0.75, 1), "f1": ("condition", 0.75, 1),
    "map50": ("condition", 76 / 101, 1), "map50_95": ("condition", 685 / 1010, 1),
    "recall_tiny": ("condition", 0, 1), "recall_small": ("condition", 1, 1),
    "recall_medium": ("condition", 1, 1), "recall_large": ("condition", 1, 1),
    "relative_drop_recall": ("condition", 0.25, 0), "relative_drop_precision": ("condition", 0.25, 0),
    "relative_drop_f1": ("condition", 0.25, 0), "relative_drop_map50": ("condition", 25 / 101, 0),
    "relative_drop_map50_95": ("condition", 325 / 1010, 0),
    "loc_iou": ("condition", (2 + 9 / 11) / 3, 1), "loc_center_shift": ("condition", R, 0),
    "loc_n_both": ("condition", 3, 4), "silent_failure": ("condition", 0, 0),
    "effectiveness": ("condition", 0.25, 0), "effectiveness_size_tiny": ("condition", 1, 0),
    "effectiveness_size_small": ("condition", 0, 0), "effectiveness_size_medium": ("condition", 0, 0),
    "effectiveness_size_large": ("condition", 0, 0),
    # image level: image 0 has no kept box; TP 3, FP 0, FN 1
    "image_precision": ("condition", 1, 1), "image_recall": ("condition", 0.75, 1),
    "image_f1": ("condition", 6 / 7, 1),
    # sequence 1 found one frame (30 s) late, sequence 2 at once
    "time_to_detect_min": ("condition", 0.25, 0), "time_to_detect_min_sd": ("condition", SD2 / 2, 0),
    "time_to_detect_frames": ("condition", 0.5, 0), "time_to_detect_frames_sd": ("condition", SD2, 0),
    "sequences_detected": ("condition", 1, 1),
    # validation: F1 6/7 at 0.9 (TP 3, FP 0, FN 1) beats 3/4 at 0.6; kept clean boxes equal to a label: 2 of 4
    "frozen_threshold": ("validation", 0.9, 0.9), "val_f1": ("validation", 6 / 7, 1),
    "val_recall": ("validation", 0.75, 1), "val_precision": ("validation", 1, 1),
    "label_match": ("validation", 0.5, 1),
    # patch test (per image, then the mean over the 4): alpha (0, 2/4, 0, 0), beta (3/4, 0, 0, 0),
    # deceiving boxes (0, 0, 0, 3) over 4 positions, positions deceived (0, 0, 0, 2)
    "alpha": ("warp_patch", 0.125, 0), "beta": ("warp_patch", 0.1875, 0),
    "gamma": ("warp_patch", 0.1875, 0), "gamma_positions": ("warp_patch", 0.125, 0),
    # noise sweep: the exact clean run (mAP50-95 1) against the condition's boxes
    "warp_map_loss": ("warp_noise", 100 * 325 / 1010, 0),
    # fire spread (see _firespread): bins of 0.9 (4 px, 3 burnt) and 0.1 (4 px, 1 burnt)
    "average_precision": ("firespread", 0.6875, 1), "auc_pr_trapezoid": ("firespread", 0.8125, 1),
    "ece": ("firespread", 0.15, 0), "ece_seed003": ("firespread", 0.25, 0), "ece_floor": ("firespread", 0.125, 0.125),
    "brier": ("firespread", 0.21, 0), "brier_reliability": ("firespread", 0.0225, 0),
    "brier_resolution": ("firespread", 0.0625, 0.25), "brier_uncertainty": ("firespread", 0.25, 0.25),
    "brier_residual": ("firespread", 0, 0), "oracle_brier": ("firespread", 0.25, 0.25),
    "excess_brier": ("firespread", -0.04, -0.25),
    "precision_sd_maps": ("firespread", 0.25, 0), "recall_sd_maps": ("firespread", 1 / 6, 0),
    "f1_sd_maps": ("firespread", (0.8 - 2 / 3) / 2, 0), "average_precision_sd_maps": ("firespread", 5 / 24, 0),
    "brier_sd_maps": ("firespread", 0, 0),
}

GT_BOXES = ([10, 10, 20, 20], [10, 10, 30, 30], [10, 10, 50, 50], [50, 50, 150, 150])  # tiny .. large
EXTRA = [100, 100, 140, 140]
SHIFTED = [60, 50, 160, 150]


def _gt(config: str) -> SplitGT:
    n = len(GT_BOXES)
    return SplitGT(config, "demo", "demo", "test", tuple(f"img_{k}" for k in range(n)), np.full(n, 200),
                   np.full(n, 200), tuple(np.array([b], np.float64) for b in GT_BOXES), (("smoke",),) * n,
                   np.array(["g1", "g1", "g2", "g2"], object), np.array([0, 1, 0, 1]),
                   np.array([0.0, 30.0, 0.0, 30.0]), np.zeros(n, np.int64))


def _dets(perfect: bool) -> list[Detections]:
    if perfect:
        boxes = [[b] for b in GT_BOXES]
        scores = [[0.9]] * 4
    else:
        boxes = [[], [GT_BOXES[1]], [GT_BOXES[2], EXTRA], [SHIFTED]]
        scores = [[], [0.9], [0.9, 0.6], [0.9]]
    return [Detections(np.array(b, np.float64).reshape(-1, 4), np.array(s, np.float32)) for b, s in zip(boxes, scores)]


def _context(score: SplitScore, clean=None) -> M.ConditionContext:
    return M.ConditionContext(track="smoke", source="demo", config=score.config, kind="corruption" if clean else "clean",
                              threshold=0.5, counts=score.match.counts(0.5), match=score.match, gt=score.gt,
                              coco=score.coco(None), clean=clean, paired=True)


def _condition(perfect: bool) -> dict:
    clean = _context(SplitScore.matched("clean", _gt("clean"), _dets(True)))
    ctx = _context(SplitScore.matched("low_light_s3", _gt("low_light_s3"), _dets(perfect)), clean)
    return {name: cell.value for name, cell in M.condition_cells(ctx)}


def _scorer() -> ConditionScorer:
    sub = SimpleNamespace(id="demo", meta=SimpleNamespace(track="smoke"),
                          warp_patch=SimpleNamespace(grid=2, patch_px=None, images=None))
    params = SimpleNamespace(bootstrap=SimpleNamespace(n_resamples=20, percentiles=(2.5, 97.5)))
    return ConditionScorer(sub, SimpleNamespace(meta=lambda config: {}), "demo", 0.5, params, None, ("demo",))


def _validation(perfect: bool) -> dict:
    scorer = _scorer()
    val = SplitScore.matched("clean", _gt("clean"), _dets(perfect))
    scorer.thr, vf1 = freeze_threshold(val.match)
    scorer.add_validation_rows(val, vf1)
    scorer.thr = 0.5
    scorer.add_label_match_row(val)
    return {r["metric"]: r["value"] for r in scorer.rows}


def _warp_patch(perfect: bool) -> dict:
    gt, split = _gt("clean"), "demo"
    patches = patch_boxes(200, 200, 2)
    positions = [(0, 1, 2, 3)] * 4 if perfect else [(1, 2, 3), (2, 3), (0, 1, 2, 3), (0, 1, 2, 3)]
    entries = {}
    for k, pos in enumerate(positions):
        rows = [(j, GT_BOXES[k]) for j in pos]
        if k == 3 and not perfect:  # boxes on the cloud patch itself: one at position 0, two at position 1
            rows += [(0, patches[0]), (1, patches[1]), (1, patches[1])]
        entries[(split, f"img_{k}")] = (np.array([j for j, _ in rows], np.int64),
                                        np.array([b for _, b in rows], np.float64).reshape(-1, 4),
                                        np.full(len(rows), 0.9, np.float32))
    original = np.array([perfect, True, True, True])  # the clean outcome: image 0 negative in the flawed run
    res = deception_test(PatchPredictions(2, None, None, entries), gt, original, 0.5)
    scorer = _scorer()
    scorer.patch_rows(res)
    return {r["metric"]: r["value"] for r in scorer.rows}


def _warp_noise(perfect: bool) -> dict:
    gt, dets = _gt("clean"), _dets(perfect)
    noise = SimpleNamespace(levels=(0.1,), configs=["warp_noise_100"],
                            table=SimpleNamespace(get_detections=lambda c, s, i: dets[int(i[-1])]))
    scorer = _scorer()
    scorer.noise_rows(sweep_curve(noise, gt, _dets(True), np.ones((4, 5))))
    return {r["metric"]: r["value"] for r in scorer.rows}


def _firespread(perfect: bool) -> dict:
    """Two maps (units 0, 1) of four pixels forecast (0.9, 0.9, 0.1, 0.1) (perfect: the outcome);
    burnt (1, 0, 0, 0) and (1, 1, 1, 0); the ensemble statistic 0.5 everywhere, outcomes drawn from
    it (1, 1, 1, 0) and (1, 1, 0, 0). Pooled at 0.5: TP 3, FP 1, FN 1; Brier 1.68 / 8; ECE
    (|0.75 - 0.9| + |0.25 - 0.1|) / 2; per map (15 bins) 1.0 / 4 each; AP 0.75 * 0.75 + 0.25 * 0.5;
    trapezoid over (0, 1), (0.75, 0.75), (1, 0.5). Per map: precision (0.5, 1), recall (1, 2/3),
    F1 (2/3, 0.8), AP (0.5, 11/12), Brier (0.21, 0.21); SD over maps = half the difference."""
    y = np.array([[1, 0, 0, 0], [1, 1, 1, 0]], bool)
    p = y.astype(np.float64) if perfect else np.array([[0.9, 0.9, 0.1, 0.1]] * 2)
    ms = MapSet(p=p, y=y, unit=np.array([0, 1]), oracle=np.full((2, 4), 0.5),
                floor_y=np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool))
    rows, _ = score_mapset(ms, ScoreConfig(n_boot=20), ("contract",))
    return {r["metric"]: r["value"] for r in rows if r["stratum"] == "all" and r["t"] is None}


CASES = {"condition": _condition, "validation": _validation, "warp_patch": _warp_patch, "warp_noise": _warp_noise,
         "firespread": _firespread}


@cache
def computed(case: str, perfect: bool) -> dict:
    return CASES[case](perfect)


def test_every_registered_metric_has_test_settings():
    names = set(M.REGISTRY.names())
    assert not names - set(SETTINGS), f"add test settings for metric(s) {sorted(names - set(SETTINGS))} to {HERE}"
    assert not set(SETTINGS) - names, f"{HERE} has settings for unregistered metric(s) {sorted(set(SETTINGS) - names)}"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_metric_value_bounds_and_direction_on_its_hand_made_case(name):
    spec = M.REGISTRY[name]
    case, expected, best = SETTINGS[name]
    flawed, perfect = computed(case, False), computed(case, True)
    assert name in flawed and name in perfect, f"{case} case wrote no {name} row"
    for got, want in ((flawed[name], expected), (perfect[name], best)):
        assert got == pytest.approx(want, abs=1e-9), (name, got, want)
        assert spec.within(got), (name, got, spec.bounds)
    if spec.sign is not None:  # the perfect model never scores worse in the declared direction
        assert spec.sign * (perfect[name] - flawed[name]) >= 0, (name, spec.direction, flawed[name], perfect[name])
    if spec.integer:
        assert float(flawed[name]).is_integer()


def test_every_ordered_metric_separates_some_case():
    """The cases are not all ties: most ordered metrics tell the flawed model from the perfect one."""
    ordered = [n for n in SETTINGS if M.REGISTRY[n].sign is not None]
    differ = [n for n in ordered if SETTINGS[n][1] != SETTINGS[n][2]]
    assert len(differ) >= 0.75 * len(ordered), sorted(set(ordered) - set(differ))
