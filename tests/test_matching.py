"""The shared greedy matcher: hand cases, a naive reference, and the filter-after-match property."""

from __future__ import annotations

import numpy as np
import pytest

from aegisbench.evaluation.matching import box_iou, match_images
from aegisbench.evaluation.threshold import f1_curve, freeze_threshold, seed_001_grid
from aegisbench.hashing import rng_for


def one(pred, score, gt):
    return match_images([np.array(pred, float).reshape(-1, 4)], [np.array(score, float)],
                        [np.array(gt, float).reshape(-1, 4)])


def naive_match(pred, score, gt, thr=0.5):
    """Obviously-correct reference: loop in stable score order, best IoU (ties -> later GT)."""
    order = sorted(range(len(score)), key=lambda i: -np.float32(score[i]))
    taken = [False] * len(gt)
    out = [-1] * len(score)
    for i in order:
        best, best_iou = -1, thr
        for j in range(len(gt)):
            if taken[j]:
                continue
            v = box_iou(pred[i:i + 1], gt[j:j + 1])[0, 0]
            if v >= best_iou:
                best, best_iou = j, v
        if best >= 0:
            taken[best] = True
            out[i] = best
    return out


def random_image(rng, n_gt, n_pred, ties=True):
    g = rng.uniform(0, 80, (n_gt, 2))
    gt = np.concatenate([g, g + rng.uniform(4, 30, (n_gt, 2))], axis=1).round(1)
    src = gt[rng.integers(0, n_gt, n_pred)] if n_gt else rng.uniform(0, 80, (n_pred, 4))
    pred = src + rng.normal(0, 3, (n_pred, 4))
    pred[:, 2:] = np.maximum(pred[:, 2:], pred[:, :2] + 1)
    score = rng.integers(0, 10, n_pred) / 10 if ties else rng.random(n_pred)
    return pred, score, gt


def test_perfect_match_all_missed_only_false_positives_empty():
    m = one([[0, 0, 10, 10], [20, 20, 30, 30]], [0.9, 0.8], [[0, 0, 10, 10], [20, 20, 30, 30]])
    assert m.tp.tolist() == [True, True] and m.counts(0.0).tolist() == [[2, 0, 0]]
    assert m.gt_pred.tolist() == [0, 1] and m.pred_iou.tolist() == [1.0, 1.0]
    missed = one(np.zeros((0, 4)), [], [[0, 0, 10, 10]])
    assert missed.counts(0.0).tolist() == [[0, 0, 1]] and missed.gt_pred.tolist() == [-1]
    only_fp = one([[0, 0, 10, 10]], [0.5], np.zeros((0, 4)))
    assert only_fp.counts(0.0).tolist() == [[0, 1, 0]] and only_fp.pred_gt.tolist() == [-1]
    empty = one(np.zeros((0, 4)), [], np.zeros((0, 4)))
    assert empty.counts(0.5).tolist() == [[0, 0, 0]]


def test_duplicate_predictions_on_one_box_second_is_false_positive():
    m = one([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]], [0.3, 0.9, 0.6], [[0, 0, 10, 10]])
    assert m.tp.tolist() == [False, True, False]
    assert m.counts(0.0).tolist() == [[1, 2, 0]]


def test_threshold_exactly_at_a_score_keeps_it():
    m = one([[0, 0, 10, 10], [50, 50, 60, 60]], [0.7, 0.3], [[0, 0, 10, 10]])
    assert m.counts(0.7).tolist() == [[1, 0, 0]]
    assert m.counts(0.3).tolist() == [[1, 1, 0]]
    assert m.counts(np.nextafter(np.float32(0.7), np.float32(1))).tolist() == [[0, 0, 1]]


def test_iou_threshold_is_inclusive_and_iou_ties_go_to_later_gt():
    assert box_iou(np.array([[0, 0, 2, 1]]), np.array([[0, 0, 1, 1]]))[0, 0] == 0.5
    assert one([[0, 0, 2, 1]], [0.5], [[0, 0, 1, 1]]).tp.tolist() == [True]
    # the prediction overlaps both GT boxes with IoU 0.5 exactly: the later GT wins
    m = one([[0, 0, 2, 1]], [0.5], [[0, 0, 1, 1], [1, 0, 2, 1]])
    assert m.pred_gt.tolist() == [1]


def test_score_ties_are_broken_by_input_order():
    m = one([[0, 0, 10, 10], [0, 0, 10, 10]], [0.5, 0.5], [[0, 0, 10, 10]])
    assert m.pred_gt.tolist() == [0, -1]


def test_greedy_not_optimal_assignment():
    # the top prediction takes the GT it overlaps most, leaving the second one without a
    # partner although pred0 -> gt0, pred1 -> gt1 would give two true positives
    gt = [[0, 0, 10, 10], [3, 0, 13, 10]]
    pred = [[2, 0, 12, 10], [4, 0, 14, 10]]
    iou = box_iou(np.array(pred, float), np.array(gt, float))
    assert iou[0, 1] > iou[0, 0] >= 0.5 and iou[1, 0] < 0.5 <= iou[1, 1]
    m = one(pred, [0.9, 0.8], gt)
    assert m.pred_gt.tolist() == [1, -1]
    assert m.counts(0.0).tolist() == [[1, 1, 1]]


def test_box_iou_matches_bruteforce():
    rng = rng_for("test", "box_iou")
    a = np.sort(rng.uniform(0, 20, (7, 2, 2)), axis=1).transpose(0, 2, 1).reshape(7, 4)[:, [0, 2, 1, 3]]
    b = np.sort(rng.uniform(0, 20, (5, 2, 2)), axis=1).transpose(0, 2, 1).reshape(5, 4)[:, [0, 2, 1, 3]]
    ref = np.zeros((7, 5))
    for i, p in enumerate(a):
        for j, q in enumerate(b):
            w = max(0, min(p[2], q[2]) - max(p[0], q[0]))
            h = max(0, min(p[3], q[3]) - max(p[1], q[1]))
            u = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - w * h
            ref[i, j] = w * h / u
    np.testing.assert_allclose(box_iou(a, b), ref, rtol=1e-12)


def test_batch_matches_naive_reference_on_random_workloads():
    rng = rng_for("test", "matching", "naive")
    preds, scores, gts = [], [], []
    for _ in range(150):
        p, s, g = random_image(rng, int(rng.integers(0, 6)), int(rng.integers(0, 12)))
        preds.append(p), scores.append(s), gts.append(g)
    m = match_images(preds, scores, gts)
    off_p = np.concatenate([[0], np.cumsum([len(s) for s in scores])])
    off_g = np.concatenate([[0], np.cumsum([len(g) for g in gts])])
    assert m.tp.sum() > 100  # the workload really exercises matching
    for i in range(len(gts)):
        got = m.pred_gt[off_p[i]:off_p[i + 1]]
        got = np.where(got >= 0, got - off_g[i], -1).tolist()
        assert got == naive_match(preds[i], scores[i], gts[i]), i


def naive_match_with_ignore(pred, score, gt, ignore, thr=0.5):
    """Reference: as naive_match; a prediction left without a GT box takes an ignore region
    when intersection / its own area >= thr (pycocotools' crowd IoU), any number per region."""
    out = naive_match(pred, score, gt, thr)
    area = (pred[:, 2] - pred[:, 0]) * (pred[:, 3] - pred[:, 1])
    ignored = []
    for i, j in enumerate(out):
        w = np.minimum(pred[i, 2], ignore[:, 2]) - np.maximum(pred[i, 0], ignore[:, 0])
        h = np.minimum(pred[i, 3], ignore[:, 3]) - np.maximum(pred[i, 1], ignore[:, 1])
        ignored.append(bool(j < 0 and ((w > 0) & (h > 0) & (w * h / area[i] >= thr)).any()))
    return out, ignored


def test_ignore_regions_match_naive_reference_and_filter_property():
    rng = rng_for("test", "matching", "ignore")
    preds, scores, gts, igs = [], [], [], []
    for _ in range(120):
        p, s, g = random_image(rng, int(rng.integers(0, 5)), int(rng.integers(0, 12)), ties=True)
        xy = rng.uniform(0, 70, (int(rng.integers(0, 3)), 2))
        preds.append(p), scores.append(s), gts.append(g)
        igs.append(np.concatenate([xy, xy + rng.uniform(10, 50, xy.shape)], axis=1))
    m = match_images(preds, scores, gts, ignore_xyxy=igs)
    off_p = np.concatenate([[0], np.cumsum([len(s) for s in scores])])
    off_g = np.concatenate([[0], np.cumsum([len(g) for g in gts])])
    assert m.ignored.sum() > 20 and m.tp.sum() > 50 and m.fp.sum() > 20
    for i in range(len(gts)):
        got = m.pred_gt[off_p[i]:off_p[i + 1]]
        want, ignored = naive_match_with_ignore(preds[i], scores[i], gts[i], igs[i])
        assert np.where(got >= 0, got - off_g[i], -1).tolist() == want, i
        assert m.ignored[off_p[i]:off_p[i + 1]].tolist() == ignored, i
    for thr in (0.0, 0.3, 0.6, 0.9):
        keep = [np.float32(s) >= np.float32(thr) for s in scores]
        re = match_images([p[k] for p, k in zip(preds, keep)], [s[k] for s, k in zip(scores, keep)], gts,
                          ignore_xyxy=igs)
        assert np.array_equal(re.counts(0.0), m.counts(thr))
        assert np.array_equal(re.ignored, m.ignored[m.kept(thr)])


def test_match_once_then_filter_equals_rematching_after_filter():
    """Property: removing predictions below a threshold leaves every kept match unchanged."""
    rng = rng_for("test", "matching", "filter")
    preds, scores, gts = [], [], []
    for _ in range(80):
        p, s, g = random_image(rng, int(rng.integers(0, 6)), int(rng.integers(0, 15)), ties=True)
        preds.append(p), scores.append(s), gts.append(g)
    full = match_images(preds, scores, gts)
    for thr in (0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0):
        keep = [np.float32(s) >= np.float32(thr) for s in scores]
        re = match_images([p[k] for p, k in zip(preds, keep)], [s[k] for s, k in zip(scores, keep)], gts)
        assert np.array_equal(re.counts(0.0), full.counts(thr))
        kept = full.kept(thr)
        assert np.array_equal(re.tp, full.tp[kept])
        assert np.array_equal(re.gt_detected(0.0), full.gt_detected(thr))


def test_freeze_threshold_max_f1_ties_to_higher_threshold():
    # scores 0.9 (TP), 0.8 (FP), 0.7 (TP) with 2 GT: F1 at 0.9 = 2/3, at 0.8 = 0.5, at 0.7 = 0.8
    m = one([[0, 0, 10, 10], [40, 40, 50, 50], [20, 20, 30, 30]], [0.9, 0.8, 0.7],
            [[0, 0, 10, 10], [20, 20, 30, 30]])
    assert freeze_threshold(m) == (0.7, 0.8)
    # equal F1 at 0.9 and 0.7 (1 TP / 0 FP vs 2 TP / 2 FP with 2 GT ... both 2/3): higher wins
    m2 = one([[0, 0, 10, 10], [40, 40, 50, 50], [60, 60, 70, 70], [20, 20, 30, 30]], [0.9, 0.8, 0.8, 0.7],
             [[0, 0, 10, 10], [20, 20, 30, 30]])
    curve = f1_curve(m2, [0.7, 0.9])
    assert curve["f1"][0] == curve["f1"][1]
    assert freeze_threshold(m2) == (0.9, pytest.approx(2 / 3))
    assert freeze_threshold(one(np.zeros((0, 4)), [], [[0, 0, 1, 1]])) == (1.0, 0.0)


def test_freeze_threshold_on_grid_and_curve_matches_counts():
    rng = rng_for("test", "threshold", "grid")
    preds, scores, gts = [], [], []
    for _ in range(60):
        p, s, g = random_image(rng, int(rng.integers(0, 5)), int(rng.integers(0, 10)), ties=False)
        preds.append(p), scores.append(s * 0.25), gts.append(g)
    m = match_images(preds, scores, gts)
    grid = seed_001_grid()
    assert grid[0] == 0.01 and grid[-1] == 0.2 and len(grid) == 20
    curve = f1_curve(m, grid)
    for t, tp, fp, fn in zip(grid, curve["tp"], curve["fp"], curve["fn"]):
        assert [tp, fp, fn] == m.counts(t).sum(axis=0).tolist()
    thr, best = freeze_threshold(m, grid)
    assert thr in grid.tolist() and best == curve["f1"].max()
    assert thr == grid[np.flatnonzero(curve["f1"] == best)[-1]]
    with pytest.raises(ValueError):
        freeze_threshold(m, [1.5])


def test_input_validation():
    with pytest.raises(ValueError):
        match_images([np.zeros((1, 4))], [], [])
    with pytest.raises(ValueError):
        match_images([np.zeros((2, 4))], [np.zeros(1)], [np.zeros((0, 4))])
    with pytest.raises(ValueError):
        match_images([np.zeros((0, 4))], [np.zeros(0)], [np.zeros((0, 4))], iou_threshold=0.0)
