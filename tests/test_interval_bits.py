"""The faster interval code gives the bits of the algorithm it replaced.

Each test keeps a private copy of the previous algorithm (as it stood before issue 17's
second bootstrap pass: a full stable sort of the predictions for AP50, a product of its own
for recall / precision / F1, ``terms[idx].mean(axis=1)`` for the effectiveness score) and
compares bytes on generated conditions: several seeds, score ties, zeros and -0.0, ignore
regions, images without predictions or GT, conditions without a TP, a GT box or a
prediction (0/0), and one resample.
"""

from __future__ import annotations

import numpy as np
import pytest

from aegisbench.evaluation.bootstrap import (BootstrapParams, Resamples, _ap50_t, _condition_samples,
                                             _first_reached, _ratio_samples, _suffix_max, ap50_samples,
                                             condition_intervals)
from aegisbench.evaluation.coco import RECALL_THRESHOLDS
from aegisbench.evaluation.matching import match_images
from aegisbench.hashing import rng_for
from aegisbench.metrics import ConditionContext, effectiveness_interval, effectiveness_of, effectiveness_score
from aegisbench.stats import count_ratios, percentile_interval, resample_indices


# ------------------------------------------------------------ previous algorithms


def _old_desc_order(score):
    s = np.asarray(score, np.float32)
    if not s.size or s.min() >= 0:
        return np.argsort(-s, kind="stable")
    s = s + np.float32(0)
    if s.min() < 0:
        return np.argsort(-s.astype(np.float64), kind="stable")
    key = ((~s.view(np.uint32)).astype(np.uint64) << np.uint64(32)) | np.arange(s.size, dtype=np.uint64)
    return (np.sort(key) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _old_ap50_t(match, Wt, total):
    n, _ = Wt.shape
    order = _old_desc_order(match.score)
    if match.ignored.any():
        order = order[~match.ignored[order]]
    tp_sorted = match.tp[order]
    n_gt = match.n_gt()
    if not tp_sorted.any():
        npig = n_gt.astype(np.float64) @ Wt
        return np.where(npig > 0, 0.0, np.nan)
    start = tp_sorted.copy()
    start[1:] &= ~tp_sorted[:-1]
    runs_before = np.cumsum(start)
    R = int(runs_before[-1])
    row = np.where(tp_sorted, runs_before - 1, R + runs_before)
    row *= n
    row += match.pred_image[order]
    A = np.bincount(row, minlength=(2 * R + 1) * n).reshape(2 * R + 1, n)
    np.cumsum(A[:R], axis=0, out=A[:R])
    np.cumsum(A[R:2 * R], axis=0, out=A[R:2 * R])
    A[R:2 * R] += A[:R]
    A[2 * R] = n_gt
    ft = np.float32 if int(A.max(initial=0)) * total < 2**24 else np.float64
    X = A.astype(ft) @ Wt.astype(ft, copy=False)
    tp, den, npig = X[:R], X[R:2 * R], X[2 * R]
    np.add(den, den == 0, out=den)
    pr = np.divide(tp, den, out=den)
    _suffix_max(pr)
    if npig.max() > 2**16:
        tp, npig = tp.astype(np.float64), npig.astype(np.float64)
    first = _first_reached(tp, np.maximum(npig, 1))
    ap = np.einsum("rb,rb->b", pr, first, dtype=np.float64) / len(RECALL_THRESHOLDS)
    ap[npig == 0] = np.nan
    return ap


_OLD_TERMS = np.array([[1, 1, 2, 1, 1, 2], [0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 1]])


def _old_ratio_samples(counts, Wt, total):
    terms = np.asarray(counts, np.int64) @ _OLD_TERMS
    ft = np.float32 if int(terms.max(initial=0)) * total < 2**24 and terms.min(initial=0) >= 0 else np.float64
    sums = (terms.T.astype(ft) @ Wt.astype(ft, copy=False)).astype(np.float64)
    num, den = sums[:3], sums[3:]
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)


def _old_condition_intervals(match, threshold, resamples, percentiles=(2.5, 97.5)):
    Wt = resamples.weights_t
    rows = list(_old_ratio_samples(match.counts(threshold), Wt, match.n_images))
    ap = _old_ap50_t(match, Wt, match.n_images)
    out = {k: percentile_interval(v, percentiles, fallback=(0.0, 0.0))
           for k, v in zip(("recall", "precision", "f1", "map50"), [*rows, ap])}
    if np.isnan(ap).all():
        out["map50"] = (float("nan"), float("nan"))
    return out


def _old_effectiveness_interval(b, a, n, key, n_resamples, percentiles):
    terms = (np.asarray(b, np.float64) - np.asarray(a, np.float64)) / np.asarray(n, np.float64)
    idx = rng_for(*key).integers(0, len(terms), (n_resamples, len(terms)))
    return percentile_interval(terms[idx].mean(axis=1), percentiles)


# ------------------------------------------------------------------ workloads


def _condition(seed, n_img, *, ties=False, ignore=False, no_gt=False, no_pred=False, no_tp=False, zeros=False):
    """Matched predictions of ``n_img`` images drawn from ``seed``."""
    rng = rng_for("test", "interval-bits", seed, n_img, ties, ignore, no_gt, no_pred, no_tp, zeros)
    preds, scores, gts, regions = [], [], [], []
    for _ in range(n_img):
        k = 0 if no_gt else int(rng.integers(0, 6))
        g = rng.uniform(0, 300, (k, 2))
        gt = np.concatenate([g, g + rng.uniform(5, 40, (k, 2))], axis=1)
        hits = gt[rng.random(k) < 0.7]
        hits = hits + rng.normal(0, 2, hits.shape)
        if no_tp:
            hits = hits[:0]
        n_fp = 0 if no_pred else int(rng.integers(0, 12))
        xy = rng.uniform(400, 600, (n_fp, 2))
        p = np.concatenate([hits, np.concatenate([xy, xy + rng.uniform(4, 30, (n_fp, 2))], axis=1)])
        if no_pred:
            p = p[:0]
        p[:, 2:] = np.maximum(p[:, 2:], p[:, :2] + 1)
        if ties:
            s = rng.integers(0, 5, len(p)) / 4
        else:
            s = rng.random(len(p))
        if zeros:
            s = np.where(rng.random(len(p)) < 0.3, np.where(rng.random(len(p)) < 0.5, -0.0, 0.0), s)
        preds.append(p)
        scores.append(s.astype(np.float32))
        gts.append(gt)
        regions.append(np.array([[400.0, 400.0, 480.0, 480.0]]) if ignore and rng.random() < 0.5
                       else np.zeros((0, 4)))
    return match_images(preds, scores, gts, ignore_xyxy=regions)


CASES = [dict(), dict(ties=True), dict(ignore=True), dict(ties=True, ignore=True), dict(zeros=True),
         dict(no_gt=True), dict(no_pred=True), dict(no_tp=True), dict(ties=True, zeros=True, ignore=True)]


def _hex(interval):
    return tuple(float(v).hex() for v in interval)


# ---------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c) or "plain")
def test_ap50_and_ratio_samples_equal_the_previous_algorithm_bit_for_bit(case):
    for seed in range(3):
        for n_img in (1, 2, 9, 40):
            m = _condition(seed, n_img, **case)
            for B in (1, 64):
                res = Resamples.draw(n_img, ("bits", seed, n_img, B), B)
                Wt = res.weights_t
                want_ap = _old_ap50_t(m, Wt, n_img)
                assert _ap50_t(m, Wt, total=n_img).tobytes() == want_ap.tobytes()
                assert ap50_samples(m, res.weights_t.T).tobytes() == _old_ap50_t(m, Wt, int(Wt.sum(0).max())).tobytes()
                for thr in (0.0, 0.5, 1.1):  # 1.1: nothing kept, precision 0/0 everywhere
                    counts = m.counts(thr)
                    want = _old_ratio_samples(counts, Wt, n_img)
                    assert _ratio_samples(counts, Wt, n_img).tobytes() == want.tobytes()
                    ratios, ap = _condition_samples(m, counts, Wt, n_img)
                    assert ratios.tobytes() == want.tobytes() and ap.tobytes() == want_ap.tobytes()


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c) or "plain")
def test_condition_intervals_equal_the_previous_algorithm(case):
    for seed in range(4):
        m = _condition(seed, 30, **case)
        res = Resamples.draw(30, ("ci", seed), 300)
        for thr in (0.0, 0.4, 1.1):
            got = condition_intervals(m, thr, params=BootstrapParams(n_resamples=300), resamples=res)
            want = _old_condition_intervals(m, thr, res)
            assert {k: _hex(v) for k, v in got.items()} == {k: _hex(v) for k, v in want.items()}
            ratios = count_ratios(m.counts(thr).sum(axis=0), empty=np.nan)
            if np.isnan(ratios["precision"]):  # 0/0 at the point: every resample 0/0, the (0, 0) convention
                assert got["precision"] == (0.0, 0.0)


def test_counts_too_large_for_float32_take_the_float64_product():
    m = _condition(0, 12, ties=True)
    big = Resamples.draw(12, ("big",), 20)
    Wt = big.weights_t * np.float32(2**20)  # sums far above 2**24: float64 on both sides
    total = int(Wt.sum(axis=0).max())
    counts = m.counts(0.3)
    ratios, ap = _condition_samples(m, counts, Wt, total)
    assert ratios.tobytes() == _old_ratio_samples(counts, Wt, total).tobytes()
    assert ap.tobytes() == _old_ap50_t(m, Wt, total).tobytes()


def test_negative_and_nan_scores_follow_the_whole_order():
    m = _condition(5, 20, ties=True)
    for bad in (-0.25, np.nan):
        score = m.score.copy()
        score[::3] = bad
        m2 = type(m)(**{**m.__dict__, "score": score})
        Wt = Resamples.draw(20, ("neg", str(bad)), 50).weights_t
        assert _ap50_t(m2, Wt, total=20).tobytes() == _old_ap50_t(m2, Wt, 20).tobytes()


def test_effectiveness_interval_equals_the_previous_algorithm():
    rng = rng_for("test", "eff-bits")
    for trial in range(60):
        n = int(rng.choice([1, 2, 3, 7, 37, 40]))
        n_gt = rng.integers(1, 7, n)
        b = rng.integers(0, 7, n).clip(max=n_gt + 1)
        a = rng.integers(0, 7, n).clip(max=n_gt + 1)
        if trial % 4 == 0:
            a = b.copy()  # no effect anywhere: a degenerate (0, 0) interval
        key, B, pct = ("eff", trial), int(rng.choice([1, 5, 1000])), [(2.5, 97.5), (0.0, 100.0)][trial % 2]
        assert _hex(effectiveness_interval(b, a, n_gt, key, B, pct)) == _hex(
            _old_effectiveness_interval(b, a, n_gt, key, B, pct))


def test_effectiveness_of_a_condition_keeps_value_interval_and_breakdown():
    from aegisbench.metrics import ConditionBootstrap, effectiveness_breakdown, size_band
    clean = _condition(7, 25, ties=True)

    class GT:  # the two things effectiveness_of reads from the clean split's ground truth
        boxes = [clean.gt_xyxy[clean.gt_image == i] for i in range(25)]

        @staticmethod
        def n_gt():
            return clean.n_gt()

    boot = Resamples.draw(25, ("eff-ctx",), 200)
    bootstrap = ConditionBootstrap(boot.weights_t, ("eff-ctx",), 200, (2.5, 97.5), dict, dict)
    c0 = ConditionContext(track="sar", source="s", config="clean", kind="clean", threshold=0.3,
                          counts=clean.counts(0.3), match=clean, gt=GT, bootstrap=bootstrap)
    c1 = ConditionContext(track="sar", source="s", config="fog_s3", kind="weather", threshold=0.3,
                          counts=clean.counts(0.6), match=clean, gt=GT, clean=c0, paired=True, bootstrap=bootstrap)
    e = effectiveness_of(c1)
    env = np.flatnonzero(clean.n_gt() > 0)
    b, a, n = c0.counts[env, 0], c1.counts[env, 0], clean.n_gt()[env]
    assert (b != a).any()  # a condition with an effect
    assert e["value"] == effectiveness_score(b, a, n) and e["n_environments"] == len(env)
    assert _hex((e["lo"], e["hi"])) == _hex(_old_effectiveness_interval(
        b, a, n, ("eff-ctx", "fog_s3", "effectiveness"), 200, (2.5, 97.5)))
    levels = [size_band(float(np.median((GT.boxes[i][:, 2] - GT.boxes[i][:, 0]) *
                                        (GT.boxes[i][:, 3] - GT.boxes[i][:, 1])))) for i in env]
    assert e["size"] == effectiveness_breakdown(b, a, n, {"size": levels})["size"]
    assert effectiveness_of(ConditionContext(**{**c1.__dict__, "bootstrap": None, "cache": {}}))["lo"] is None


def test_resample_indices_are_generator_integers():
    for n in (1, 2, 37):
        assert np.array_equal(resample_indices(n, ("ri", n), 9), rng_for("ri", n).integers(0, n, (9, n)))
