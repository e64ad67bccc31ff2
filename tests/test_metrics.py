"""Metrics: hand-computed cases, numbers from the seed papers, scikit-learn cross-checks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import calibration_curve as sk_calibration_curve
from sklearn.metrics import auc, average_precision_score, brier_score_loss, precision_recall_curve

from aegisbench import metrics as M
from aegisbench.evaluation.matching import match_images
from aegisbench.hashing import rng_for


def test_counts_metrics_and_directions():
    per_image = np.array([[3, 1, 1], [0, 0, 2], [1, 0, 0]])
    assert M.recall(per_image) == 4 / 7 and M.precision(per_image) == 4 / 5
    assert M.f1(per_image) == pytest.approx(2 * 4 / (2 * 4 + 1 + 3))
    # 0/0 is undefined (NaN, a null row noted "0/0"), never 0; x/y with y > 0 stays a number
    assert np.isnan(M.recall([0, 3, 0])) and np.isnan(M.precision([0, 0, 5])) and np.isnan(M.f1([0, 0, 0]))
    assert M.recall([0, 0, 5]) == 0.0 and M.precision([0, 2, 5]) == 0.0 and M.f1([0, 0, 5]) == 0.0
    with pytest.raises(ValueError):
        M.recall([-1, 0, 0])
    state = M._counts_update(None, per_image[:2])
    assert M._counts_update(state, per_image[2:]).tolist() == [4, 1, 3]
    # directions are the registry's, by the name the rows carry
    for name, d in [("recall", True), ("f1", True), ("relative_drop_recall", False), ("brier", False),
                    ("ece", False), ("average_precision", True), ("effectiveness", False),
                    ("time_to_detect_min", False), ("time_to_detect_min_sd", None), ("loc_iou", True),
                    ("ece_floor", None), ("loc_n_both", True)]:
        assert M.higher_is_better(name) is d, name
    assert M.higher_is_better(M.recall) is True  # a function named like its metric
    with pytest.raises(KeyError, match="not registered"):
        M.higher_is_better(M.brier_score)  # a helper, not a row name: no direction of its own


def test_recall_by_size_bands_are_half_open():
    gt = np.array([[0, 0, 15, 16], [0, 0, 16, 16], [0, 0, 32, 32], [0, 0, 96, 96], [0, 0, 100, 100]], float)
    out = M.recall_by_size(gt, [True, False, True, True, False])
    assert {k: v["n_gt"] for k, v in out.items()} == {"tiny": 1, "small": 1, "medium": 1, "large": 2}
    assert out["tiny"]["recall"] == 1.0 and out["small"]["recall"] == 0.0 and out["large"]["recall"] == 0.5
    assert np.isnan(M.recall_by_size(gt[:1], [True])["large"]["recall"])


def test_relative_drop_and_map_percent_loss():
    assert M.relative_drop(0.8, 0.2) == pytest.approx(0.75)
    assert np.isnan(M.relative_drop(0.0, 0.0)) and np.isnan(M.relative_drop(0.0, 0.3))
    assert np.isnan(M.relative_drop(float("nan"), 0.3)) and np.isnan(M.relative_drop(0.8, float("nan")))
    assert M.map_percent_loss(0.25, 0.5) == 50.0  # a loss is positive, as in seed 000's tables
    assert M.map_percent_loss(0.6, 0.5) == pytest.approx(-20.0)
    assert M.higher_is_better("warp_map_loss") is False
    assert M.map_percent_loss(0.5, 0.5) == 0.0


def test_localization_stability_and_silent_failure():
    gt = [np.array([[0, 0, 10, 10], [50, 50, 60, 60]], float)]
    clean = match_images([np.array([[0, 0, 10, 10], [50, 50, 60, 60]], float)], [np.array([0.9, 0.9])], gt)
    corr = match_images([np.array([[1, 0, 11, 10]], float)], [np.array([0.8])], gt)
    out = M.localization_stability(clean, corr, 0.5)
    assert out["n_both"] == 1 and out["n_clean_detected"] == 2
    assert out["stability"] == pytest.approx(90 / 110)
    assert out["center_shift"] == pytest.approx(1 / np.sqrt(200))
    assert np.isnan(M.localization_stability(clean, corr, 0.85)["stability"])  # nothing survives
    other = match_images([np.zeros((0, 4))], [np.zeros(0)], [gt[0][:1]])
    with pytest.raises(ValueError):
        M.localization_stability(clean, other, 0.5)
    # (clean recall, recall, stability, n_both, clean FP/image, FP/image)
    # recall 0.89 -> 0.00 with nothing left: silent; -> 0.40 with boxes on target: silent
    assert M.silent_failure(0.89, 0.0, float("nan"), 0, 0.5, 0.0) is True
    assert M.silent_failure(0.89, 0.40, 0.80, 120, 0.5, 0.5) is True  # FP per image unchanged
    assert M.silent_failure(0.89, 0.40, 0.80, 120, 0.5, 0.51) is False  # more false alarms: a sign
    assert not M.silent_failure(0.89, 0.40, 0.50, 120, 0.5, 0.0)  # survivors drift off target: not silent
    assert not M.silent_failure(0.89, 0.80, 0.90, 300, 0.5, 0.0)  # recall did not collapse
    assert M.silent_failure(0.0, 0.0, float("nan"), 0, 0.0, 0.0) is False
    assert M.silent_failure(float("nan"), float("nan"), float("nan"), 0, 0.0, 0.0) is None  # no GT: 0/0
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="fp_per_image"):
            M.silent_failure(0.89, 0.0, float("nan"), 0, 0.5, bad)
    with pytest.raises(ValueError):
        M.SilentFailureParams(min_stability=1.5)


def test_warp_flip_probabilities_and_deception():
    orig = [True, False, True]
    patched = np.array([[True, False, False, True], [False, True, False, False], [True, True, True, True]])
    alpha, beta = M.flip_probabilities(orig, patched)
    assert alpha.tolist() == [0.5, 0.0, 0.0] and beta.tolist() == [0.0, 0.25, 0.0]
    with pytest.raises(ValueError):
        M.flip_probabilities(orig, patched[:2])
    from aegisbench.evaluation.warp_eval import patch_boxes  # the engine's boxes, clipped: the one source
    patches = patch_boxes(250, 100, grid=5, patch_px=10)
    assert patches.shape == (25, 4) and patches[6].tolist() == [70.0, 25.0, 80.0, 35.0]  # row 1, col 1
    dets = [np.zeros((0, 4))] * 25
    dets[6] = np.array([[70, 25, 80, 35], [71, 25, 81, 35], [0, 0, 5, 5]], float)
    dets[2] = np.array([[120, 5, 145, 30]], float)  # overlaps its patch with IoU < 0.5
    counts = M.deception_counts(patches, dets)
    assert counts.tolist() == [0] * 6 + [2] + [0] * 18
    per_img = np.stack([counts, np.zeros(25, int)])
    # seed 000's D_i counts deceiving detections: the two boxes on position 6 make D = 2 of A = 25
    assert M.gamma_rates(per_img).tolist() == [2 / 25, 0.0]
    # ... and they deceive one position of 25 (the share of positions deceived, its own metric)
    assert M.deceived_position_rates(per_img).tolist() == [1 / 25, 0.0]
    assert [(d, n) for d, _, n in M.gamma_count_table(per_img)] == [(0, 1), (2, 1)]
    assert M.deception_heatmap(per_img, (5, 5))[1, 1] == 2


def test_warp_gamma_table_reproduces_paper_expected_rates():
    # WARP Table 5: gamma value counts over 1661 test images, 625 grid positions each
    for table, expected in [({0: 1629, 1: 32}, 3.08e-5), ({0: 1570, 1: 85, 2: 5, 3: 1}, 9.44e-5)]:
        rows = []
        for d, n in table.items():
            r = np.zeros((n, 625), int)
            r[:, :d] = 1
            rows.append(r)
        per_pos = np.concatenate(rows)
        gamma = M.gamma_rates(per_pos)
        assert M.warp_summary([0], [0], gamma)["gamma"] == pytest.approx(expected, rel=2e-3)
        assert [(d, n) for d, _, n in M.gamma_count_table(per_pos)] == sorted(table.items())
        assert M.gamma_count_table(per_pos)[1][1] == 0.0016


# Seed 002, Table 1 (vase detections out of 500 frames); environments in the order
# (center, right) x (halogen, LED) x distance 1, 5, 10, 15, 20 inches
BASE = [182, 404, 500, 298, 499, 0, 500, 500, 500, 500] * 2
PATCHES = {
    "composite_cxo": [7, 20, 0, 0, 0, 419, 500, 27, 0, 0, 0, 0, 206, 0, 0, 2, 247, 500, 479, 0],
    "imagenet_cxo": [0, 0, 0, 0, 0, 955, 391, 0, 0, 0, 18, 206, 0, 0, 0, 457, 500, 500, 500, 0],
    "imagenet_o": [500, 500, 30, 1, 32, 500, 500, 500, 500, 28, 499, 500, 302, 26, 1, 500, 500, 500, 500, 0],
    "white": [500, 500, 0, 0, 0, 500, 500, 456, 0, 0, 479, 313, 1, 0, 0, 500, 500, 500, 490, 120],
}


def test_effectiveness_score_reproduces_seed_table_2():
    expected = {"composite_cxo": 0.536, "imagenet_cxo": 0.424, "imagenet_o": 0.135, "white": 0.241}
    for name, counts in PATCHES.items():
        assert round(M.effectiveness_score(BASE, counts, 500), 3) == expected[name], name
    assert M.effectiveness_score(BASE, BASE, 500) == 0.0  # no patch
    # not clipped: 955 detections in 500 frames count as they are
    assert M.effectiveness_score([0], [955], 500) == pytest.approx(-1.91)
    assert M.effectiveness_score(BASE, PATCHES["imagenet_cxo"], 500) == pytest.approx((7766 - 3527) / 10000)
    with pytest.raises(ValueError):
        M.effectiveness_score([1, 2], [1], 500)
    with pytest.raises(ValueError):
        M.effectiveness_score([1], [1], 0)


def test_effectiveness_breakdown_and_interval():
    bulb = (["halogen"] * 5 + ["led"] * 5) * 2
    location = ["center"] * 10 + ["right"] * 10
    out = M.effectiveness_breakdown(BASE, PATCHES["composite_cxo"], 500, {"bulb": bulb, "location": location})
    assert out["bulb"]["halogen"] == pytest.approx((2 * 1883 - 27 - 206) / (10 * 500))
    assert out["location"]["right"] == pytest.approx((3883 - 206 - 1228) / (10 * 500))
    lo, hi = M.effectiveness_interval(BASE, PATCHES["composite_cxo"], 500, ("composite",))
    assert lo <= 0.5359 <= hi
    assert (lo, hi) == M.effectiveness_interval(BASE, PATCHES["composite_cxo"], 500, ("composite",))


def test_image_level_prf_and_time_to_detect():
    out = M.image_level_prf([True, True, False, False, True], [True, False, True, False, True])
    assert (out["tp"], out["fp"], out["fn"]) == (2, 1, 1)
    assert out["precision"] == pytest.approx(2 / 3) and out["recall"] == pytest.approx(2 / 3)
    box = np.array([[0, 0, 10, 10.0]])
    m = match_images([box, np.zeros((0, 4)), box], [[0.3], [], [0.9]], [box, box, np.zeros((0, 4))])
    assert M.image_positive(m, 0.5).tolist() == [False, False, True]
    frames = np.arange(10)
    det = np.zeros(10, bool)
    det[[1, 5, 7]] = True
    r = M.time_to_detect(frames, det, 3, time_s=frames * 30.0)
    assert r == {"detected": True, "frames": 2, "minutes": 1.0}
    assert M.time_to_detect(frames, det, 3, seconds_per_frame=60)["minutes"] == 2.0
    assert M.time_to_detect(frames, det, 8)["detected"] is False
    with pytest.raises(ValueError):
        M.time_to_detect(frames[4:], det[4:], 3, time_s=frames[4:] * 30.0)
    s = M.time_to_detect_summary([r, {"detected": True, "frames": 4, "minutes": 3.0},
                                  {"detected": False, "frames": None, "minutes": None}])
    assert s["n_sequences"] == 3 and s["n_detected"] == 2
    assert s["mean_minutes"] == 2.0 and s["sd_minutes"] == pytest.approx(np.sqrt(2))


def random_probs(key, n=500):
    rng = rng_for("test", "calibration", key)
    edges = np.linspace(0, 1, 11)
    p = np.where(rng.random(n) < 0.3, rng.choice(edges, n), rng.random(n))  # many exactly on bin edges
    y = (rng.random(n) < p).astype(int)
    return p, y


def test_calibration_and_brier_equal_sklearn_including_bin_edges():
    for key in range(5):
        p, y = random_probs(key)
        assert M.brier_score(p, y) == pytest.approx(brier_score_loss(y, p), rel=1e-12)
        for n_bins in (10, 5, 7):
            ours = M.calibration_curve(p, y, n_bins)
            ref = sk_calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
            assert np.array_equal(ours[0], ref[0]) and np.array_equal(ours[1], ref[1])
            counts = np.bincount(np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], p), minlength=n_bins)
            ece = np.sum(counts[counts > 0] / len(p) * np.abs(ref[0] - ref[1]))
            assert M.expected_calibration_error(p, y, n_bins) == pytest.approx(ece, rel=1e-12)
    # right-closed: 0.1 belongs to the first of ten bins, 0.1000001 to the second
    assert M.calibration_curve([0.1, 0.1000001], [1, 0], 10)[1].tolist() == [0.1, 0.1000001]
    with pytest.raises(ValueError):
        M.brier_score([1.2], [1])
    with pytest.raises(ValueError):
        M.calibration_curve([0.5], [1], 0)


def test_brier_decomposition():
    rng = rng_for("test", "murphy")
    p = (rng.integers(0, 10, 2000) + 0.5) / 10  # constant within each of ten bins
    y = (rng.random(2000) < p ** 1.5).astype(int)
    d = M.brier_decomposition(p, y, 10)
    assert d["brier"] == pytest.approx(d["reliability"] - d["resolution"] + d["uncertainty"], abs=1e-12)
    assert d["residual"] == pytest.approx(0.0, abs=1e-12)
    assert d["uncertainty"] == pytest.approx(y.mean() * (1 - y.mean()), rel=1e-9)
    calibrated = M.brier_decomposition([0.25] * 4, [1, 0, 0, 0], 10)
    assert calibrated["reliability"] == 0.0 and calibrated["brier"] == pytest.approx(0.1875)


def test_average_precision_and_trapezoid_equal_sklearn():
    for key in range(6):
        rng = rng_for("test", "ap", key)
        y = (rng.random(300) < 0.3).astype(int)
        s = np.round(rng.random(300) + 0.3 * y, 1 if key % 2 else 6)  # ties when rounded to 0.1
        assert M.average_precision(s, y) == pytest.approx(average_precision_score(y, s), rel=1e-12)
        prec, rec, _ = precision_recall_curve(y, s)
        assert M.auc_pr_trapezoid(s, y) == pytest.approx(auc(rec, prec), rel=1e-12)
    assert M.average_precision([0.9, 0.1], [1, 0]) == 1.0
    assert M.average_precision([0.9, 0.1], [0, 0]) == 0.0
    with pytest.raises(ValueError):
        M.average_precision([0.5], [2])


# ---- one AP: the formulas the shared curve replaced, written out as they were (the pixel
# path of metrics.forecast and the per-score-table path of the fire-spread scorer)

def _old_pr_curve(score, y):
    s = np.asarray(score, np.float64).reshape(-1)
    t = np.asarray(y).reshape(-1)
    order = np.argsort(s, kind="mergesort")[::-1]
    s, t = s[order], t[order].astype(np.float64)
    ends = np.r_[np.flatnonzero(np.diff(s)), t.size - 1]
    tps = np.cumsum(t)[ends]
    fps = 1 + ends - tps
    prec = np.divide(tps, tps + fps, out=np.zeros(tps.size), where=(tps + fps) != 0)
    rec = np.ones(tps.size) if tps[-1] == 0 else tps / tps[-1]
    return np.r_[prec[::-1], 1.0], np.r_[rec[::-1], 0.0]


def _old_weighted_pr_areas(pos, neg):
    keep = (pos + neg) > 0
    pos, neg = pos[keep], neg[keep]
    tps, fps = np.cumsum(pos), np.cumsum(neg)
    prec = np.divide(tps, tps + fps, out=np.zeros(tps.size), where=(tps + fps) != 0)
    rec = np.ones(tps.size) if tps[-1] == 0 else tps / tps[-1]
    prec_c, rec_c = np.r_[prec[::-1], 1.0], np.r_[rec[::-1], 0.0]
    ap = float(max(0.0, -np.sum(np.diff(rec_c) * prec_c[:-1])))
    return ap, float(abs(np.trapezoid(prec_c, rec_c)))


def _bits(*values) -> bytes:
    return b"".join(np.asarray(v, np.float64).tobytes() for v in values)


def _random_scores(rng, i: int):
    n = int(rng.integers(1, 500))
    p = [rng.integers(0, 11, n) / 10, rng.random(n), np.round(rng.random(n), 2).astype(np.float32),
         np.full(n, 0.5)][i % 4]
    y = rng.random(n) < (0.3 if i % 4 == 3 else p)
    if i % 13 == 0:
        y[:] = False
    return p, y


def test_average_precision_is_bit_identical_to_the_formula_it_replaced():
    rng = rng_for("test", "one-ap", "pixels")
    for i in range(400):
        p, y = _random_scores(rng, i)
        prec, rec = _old_pr_curve(p, y)
        assert _bits(*M._pr_curve(p, y)) == _bits(prec, rec)
        assert _bits(M.average_precision(p, y)) == _bits(max(0.0, -np.sum(np.diff(rec) * prec[:-1])))
        assert _bits(M.auc_pr_trapezoid(p, y)) == _bits(abs(np.trapezoid(prec, rec)))


def test_weighted_pr_areas_is_bit_identical_to_the_formula_it_replaced_and_to_the_pixel_path():
    rng = rng_for("test", "one-ap", "tables")
    for i in range(400):
        units = int(rng.integers(1, 6))
        pos = rng.integers(0, 6, (units, int(rng.integers(1, 80)))).astype(np.float64)
        neg = rng.integers(0, 6, pos.shape).astype(np.float64)
        pos[:, rng.random(pos.shape[1]) < 0.2] = 0  # scores of zero weight, skipped
        neg[:, 0] += 1
        if i % 11 == 0:
            pos[:] = 0
        w = rng.integers(0, 4, units).astype(np.float64) if i % 2 else np.ones(units)  # a bootstrap resample
        if not (w @ (pos + neg)).any():
            w[:] = 1
        wp, wn = w @ pos, w @ neg
        assert _bits(*M.weighted_pr_areas(wp, wn)) == _bits(*_old_weighted_pr_areas(wp, wn))
        # the same samples as pixels (score k repeated by its weights): the same bits
        scores = np.arange(len(wp), 0, -1) / len(wp)
        s = np.r_[np.repeat(scores, wp.astype(int)), np.repeat(scores, wn.astype(int))]
        t = np.r_[np.ones(int(wp.sum())), np.zeros(int(wn.sum()))]
        assert _bits(*M.weighted_pr_areas(wp, wn)) == _bits(M.average_precision(s, t), M.auc_pr_trapezoid(s, t))
