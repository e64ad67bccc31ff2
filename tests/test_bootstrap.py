"""Bootstrap intervals: scipy cross-check, degenerate intervals, AP50 resampling."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from aegisbench.evaluation.bootstrap import (BootstrapParams, Resamples, ap50_samples, condition_intervals,
                                             count_intervals, multiplicities, resample_indices)
from aegisbench.evaluation.coco import map_from_arrays
from aegisbench.evaluation.matching import match_images
from aegisbench.hashing import rng_for


def workload(key, n_img=40, ties=False):
    rng = rng_for("test", "bootstrap", *key)
    preds, scores, gts = [], [], []
    for _ in range(n_img):
        n_gt = int(rng.integers(0, 5))
        g = rng.uniform(0, 200, (n_gt, 2))
        gt = np.concatenate([g, g + rng.uniform(5, 40, (n_gt, 2))], axis=1)
        n_p = int(rng.integers(0, 8))
        src = gt[rng.integers(0, n_gt, n_p)] if n_gt else rng.uniform(0, 200, (n_p, 4))
        p = src + rng.normal(0, 4, (n_p, 4))
        p[:, 2:] = np.maximum(p[:, 2:], p[:, :2] + 1)
        preds.append(p)
        scores.append(rng.integers(1, 10, n_p) / 10 if ties else rng.random(n_p))
        gts.append(gt)
    return preds, scores, gts


def test_count_intervals_equal_scipy_percentile_bootstrap():
    rng = rng_for("test", "bootstrap", "counts")
    counts = np.stack([rng.integers(0, 5, 60), rng.integers(0, 3, 60), rng.integers(0, 4, 60)], axis=1)
    key = ("sub", "low_light_s1", "sard")
    ours = count_intervals(counts, key, n_resamples=1000)

    def make(stat):
        def f(tp, fp, fn, axis=-1):
            tp, fp, fn = tp.sum(axis=axis), fp.sum(axis=axis), fn.sum(axis=axis)
            return {"recall": tp / (tp + fn), "precision": tp / (tp + fp), "f1": 2 * tp / (2 * tp + fp + fn)}[stat]
        return f

    for stat in ("recall", "precision", "f1"):
        ref = stats.bootstrap((counts[:, 0], counts[:, 1], counts[:, 2]), make(stat), paired=True, vectorized=True,
                              n_resamples=1000, method="percentile", confidence_level=0.95, rng=rng_for(*key))
        assert ours[stat] == pytest.approx(tuple(ref.confidence_interval), rel=1e-9), stat


def test_degenerate_interval_for_collapsed_recall():
    counts = np.array([[0, 0, 3], [0, 0, 1], [0, 0, 2]])  # nothing detected anywhere
    ci = count_intervals(counts, ("collapse",))
    assert ci["recall"] == (0.0, 0.0) and ci["precision"] == (0.0, 0.0) and ci["f1"] == (0.0, 0.0)
    perfect = count_intervals(np.array([[2, 0, 0], [1, 0, 0]]), ("perfect",))
    assert perfect["recall"] == (1.0, 1.0)


def test_recall_thresholds_reached_without_search_equal_searchsorted():
    from aegisbench.evaluation.bootstrap import _first_reached
    from aegisbench.evaluation.coco import RECALL_THRESHOLDS

    for dtype in (np.float32, np.float64):
        for n_gt in [*range(1, 260), 997, 4096, 65536]:
            tp = np.arange(n_gt + 1, dtype=dtype)[:, None]
            ref = np.searchsorted(RECALL_THRESHOLDS, tp[:, 0].astype(np.float64) / n_gt, side="right")
            got = np.cumsum(_first_reached(tp, np.array([n_gt], dtype)), axis=0)[:, 0]
            assert np.array_equal(got, ref), (dtype, n_gt)


def test_resampling_is_deterministic_per_key():
    a = resample_indices(30, ("k", 1), 50)
    assert np.array_equal(a, resample_indices(30, ("k", 1), 50))
    assert not np.array_equal(a, resample_indices(30, ("k", 2), 50))
    W = multiplicities(a, 30)
    assert W.shape == (50, 30) and (W.sum(axis=1) == 30).all()
    assert np.array_equal(W[3], np.bincount(a[3], minlength=30))


def test_ap50_identity_resample_equals_map_from_arrays():
    for ties in (False, True):
        preds, scores, gts = workload(("identity", ties), ties=ties)
        m = match_images(preds, scores, gts)
        ap = ap50_samples(m, np.ones((1, len(gts)), np.int64))[0]
        assert ap == pytest.approx(map_from_arrays(preds, scores, gts)["map50"], rel=1e-6)


def test_ap50_weighted_resample_equals_materialised_resample():
    preds, scores, gts = workload(("materialise",), n_img=25)
    m = match_images(preds, scores, gts)
    idx = resample_indices(len(gts), ("materialise",), 5)
    W = multiplicities(idx, len(gts))
    got = ap50_samples(m, W)
    for b in range(5):
        order = np.sort(idx[b])  # copies of an image adjacent, images in reference order
        ref = map_from_arrays([preds[i] for i in order], [scores[i] for i in order], [gts[i] for i in order])
        assert got[b] == pytest.approx(ref["map50"], rel=1e-6)


def test_ap50_resample_without_gt_is_left_out():
    box = np.array([[0, 0, 10, 10.0]])
    m = match_images([box, box], [[0.8], [0.9]], [box, np.zeros((0, 4))])  # the FP ranks first
    s = ap50_samples(m, np.array([[0, 2], [1, 1], [2, 0]]))
    assert np.isnan(s[0]) and s[1] == 0.5 and s[2] == 1.0


def test_condition_intervals_cover_point_estimates():
    preds, scores, gts = workload(("condition",), n_img=80)
    m = match_images(preds, scores, gts)
    ci = condition_intervals(m, 0.5, ("sub", "clean", "sard"))
    pooled = m.counts(0.5).sum(axis=0)
    rec = pooled[0] / (pooled[0] + pooled[2])
    assert ci["recall"][0] <= rec <= ci["recall"][1]
    ap = map_from_arrays(preds, scores, gts)["map50"]
    assert ci["map50"][0] <= ap <= ci["map50"][1]
    assert ci == condition_intervals(m, 0.5, ("sub", "clean", "sard"))
    shared = Resamples.draw(m.n_images, ("sub", "clean", "sard"))
    assert condition_intervals(m, 0.5, resamples=shared) == ci
    # the count intervals are exactly the standalone ones for the same key
    assert {k: ci[k] for k in ("recall", "precision", "f1")} == count_intervals(m.counts(0.5), ("sub", "clean", "sard"))
    with pytest.raises(ValueError):
        condition_intervals(m, 0.5, resamples=Resamples.draw(3, ("x",)))
    with pytest.raises(ValueError):
        condition_intervals(m, 0.5)
    with pytest.raises(ValueError):
        BootstrapParams(n_resamples=0)
    with pytest.raises(ValueError):
        BootstrapParams(percentiles=(97.5, 2.5))


def test_resamples_without_gt_are_left_out_of_recall_not_counted_as_zero():
    # one image with GT (found), two without: a perfect detector
    counts = np.array([[1, 0, 0], [0, 0, 0], [0, 0, 0]])
    ci = count_intervals(counts, ("no-gt",))
    assert ci["recall"] == (1.0, 1.0) and ci["f1"] == (1.0, 1.0)
    W = multiplicities(resample_indices(3, ("no-gt",)), 3)
    assert (W[:, 0] == 0).any()  # some resamples really had no GT box


def _reference_ap50_t(match, Wt):
    """The AP50 resampling as first written (key sort, row-by-row envelope, np.diff), kept
    to check that the faster one gives the same bits."""
    from aegisbench.evaluation.bootstrap import _UNREACHED_AT_EXACT, RECALL_THRESHOLDS
    n, _ = Wt.shape
    s = np.asarray(match.score, np.float32) + np.float32(0)
    key = ((~s.view(np.uint32)).astype(np.uint64) << np.uint64(32)) | np.arange(s.size, dtype=np.uint64)
    order = (np.sort(key) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    order = order[~match.ignored[order]]
    tp_sorted, img, n_gt = match.tp[order], match.pred_image[order], match.n_gt()
    if not tp_sorted.any():
        npig = n_gt.astype(np.float64) @ Wt
        return np.where(npig > 0, 0.0, np.nan)
    runs = np.cumsum(tp_sorted & ~np.r_[False, tp_sorted[:-1]])
    R = int(runs[-1])
    row = np.where(tp_sorted, runs - 1, R + runs)
    A = np.bincount(row * n + img, minlength=(2 * R + 1) * n).reshape(2 * R + 1, n)
    np.cumsum(A[:R], axis=0, out=A[:R])
    np.cumsum(A[R:2 * R], axis=0, out=A[R:2 * R])
    A[R:2 * R] += A[:R]
    A[2 * R] = n_gt
    ft = np.float32 if int(A.max()) * n < 2**24 else np.float64
    X = A.astype(ft) @ Wt.astype(ft)
    tp, den, npig = X[:R], X[R:2 * R], X[2 * R]
    pr = tp / np.maximum(den, 1)
    for r in range(R - 2, -1, -1):
        np.maximum(pr[r], pr[r + 1], out=pr[r])
    x = tp * np.asarray(100, tp.dtype) / np.maximum(npig, 1)
    q = np.floor(x)
    hit = np.flatnonzero(q == x)
    q.flat[hit] -= _UNREACHED_AT_EXACT[q.flat[hit].astype(np.int64)]
    ap = np.einsum("rb,rb->b", pr, np.diff(q, axis=0, prepend=np.asarray(-1, q.dtype)),
                   dtype=np.float64) / len(RECALL_THRESHOLDS)
    ap[npig == 0] = np.nan
    return ap


def test_ap50_and_count_samples_are_bit_identical_to_the_direct_computation():
    from aegisbench.evaluation.bootstrap import _ap50_t, _ratio_samples, count_statistics
    for n_img, ties in ((40, False), (40, True), (7, True), (120, False)):
        preds, scores, gts = workload(("bits", n_img, ties), n_img=n_img, ties=ties)
        m = match_images(preds, scores, gts)
        res = Resamples.draw(m.n_images, ("bits", n_img), 300)
        assert _ap50_t(m, res.weights_t, total=m.n_images).tobytes() == _reference_ap50_t(m, res.weights_t).tobytes()
        counts = m.counts(0.4)
        ref = count_statistics(res.weights_t.T.astype(np.float64) @ counts.astype(np.float64), empty=np.nan)
        got = _ratio_samples(counts, res.weights_t, m.n_images)
        for row, name in zip(got, ("recall", "precision", "f1")):
            assert row.tobytes() == ref[name].tobytes(), name


def test_percentile_intervals_equal_numpy_percentile_bit_for_bit():
    from aegisbench.stats import percentile_interval, percentile_intervals
    rng = rng_for("test", "percentiles")
    hexes = lambda t: tuple(float(v).hex() for v in t)  # noqa: E731  (tells -0.0 from 0.0)
    for trial in range(400):
        B = int(rng.choice([1, 2, 3, 39, 40, 999, 1000]))
        rows = [rng.random(B), np.round(rng.random(B), 1), rng.integers(0, 4, B) / 3.0,
                np.where(rng.random(B) < 0.5, -0.0, 0.0), rng.normal(0, 1e300, B),
                rng.choice([np.nan, 1.0, 2.0, np.inf], B)]
        rows[trial % 5][rng.random(B) < 0.1] = np.nan
        pct = [(2.5, 97.5), (0.0, 100.0), (25.0, 75.0), (5, 95), (np.float32(2.5), np.float32(97.5))][trial % 5]
        with np.errstate(invalid="ignore"):
            want = [percentile_interval(r, pct, fallback=(0.0, 0.0)) for r in rows]
        got = percentile_intervals(rows, pct, fallback=(0.0, 0.0))
        assert [hexes(g) for g in got] == [hexes(w) for w in want]
    assert percentile_intervals(np.full((2, 5), np.nan)) == [percentile_interval([np.nan] * 5)] * 2
    with pytest.raises(ValueError):
        percentile_intervals(np.zeros(5))


def test_suffix_max_equals_the_row_by_row_envelope():
    from aegisbench.evaluation.bootstrap import _suffix_max
    rng = rng_for("test", "suffix-max")
    for R in [*range(1, 40), 99, 100, 121]:
        pr = rng.random((R, 7)).astype(np.float32)
        ref = pr.copy()
        for r in range(R - 2, -1, -1):
            np.maximum(ref[r], ref[r + 1], out=ref[r])
        _suffix_max(pr)
        assert pr.tobytes() == ref.tobytes(), R
    with pytest.raises(ValueError):
        _suffix_max(np.zeros((4, 3), np.float32).T)


def test_effectiveness_interval_is_the_mean_over_resampled_environments():
    from aegisbench.metrics.detection import effectiveness_interval
    from aegisbench.stats import percentile_interval
    b, a, n = np.array([3, 1, 4, 2, 0]), np.array([1, 1, 2, 2, 0]), np.array([4, 1, 5, 2, 1])
    terms = (b - a) / n
    ref = percentile_interval(terms[resample_indices(5, ("eff",), 500)].mean(axis=1))
    assert effectiveness_interval(b, a, n, ("eff",), 500) == ref
