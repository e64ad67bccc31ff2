"""Percentile bootstrap over images: 1000 resamples, 2.5th-97.5th percentiles.

One index matrix ``idx = rng.integers(0, n, (B, n))`` is drawn per condition from
``rng_for(*key)`` (the same call ``scipy.stats.bootstrap`` makes, so its intervals
are reproducible with scipy) and turned into multiplicities ``W[b, i]`` = how often
image ``i`` occurs in resample ``b``. Every statistic of a condition uses the same
``W`` (paired resampling); nothing is re-matched.

* recall / precision / F1: ``W @ counts`` sums the per-image (TP, FP, FN) at the
  frozen threshold (in :func:`condition_intervals` one product sums every numerator and
  denominator, exact integers). A resample in which a ratio is 0/0 (no GT box for recall, no
  detection for precision) is left out of that ratio's interval, as for AP50, instead
  of counting as 0; when every resample is 0/0 the whole set is too, and the interval
  is the point value's (0, 0).
* AP50 (class-agnostic, pycocotools' 101-point interpolation) reuses the per-
  prediction TP flags of the one matching pass: a resampled image contributes its
  predictions ``W[b, i]`` times, adjacent in the score order (ties keep the reference
  order). In the score-sorted list, consecutive TPs with no FP between them form a
  *run*; along a run precision can only rise, so the interpolated precision
  (envelope) only needs the run ends. One matrix product gives, per resample and run
  end, the weighted TP and TP + FP counts (``W @ [TPcum | (TP+FP)cum]`` with per-image
  cumulative counts); predictions on an ignore region are left out of the list (neither
  TP nor FP, as in pycocotools). The recall thresholds first reached at each run end follow
  from ``floor(100 TP / n_gt)``, with pycocotools' exact float comparison at the
  boundaries; AP = sum(envelope * thresholds reached) / 101. Arithmetic is float32
  while exact for the integers involved (precision values to ~1e-7). Resamples
  without any GT box are left out.

Intervals are percentiles with linear interpolation (numpy/scipy default), the numbers
of ``np.percentile`` from one sort of a condition's sample rows
(:func:`aegisbench.stats.percentile_intervals`); a statistic that is constant across
resamples gives a degenerate interval such as ``(0.0, 0.0)``.

>>> import numpy as np
>>> counts = np.array([[1, 0, 1], [2, 1, 0], [0, 0, 2]])
>>> ci = count_intervals(counts, ("doc",), n_resamples=200)
>>> sorted(ci), ci["recall"][0] <= ci["recall"][1]
(['f1', 'precision', 'recall'], True)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aegisbench.evaluation.coco import RECALL_THRESHOLDS
from aegisbench.evaluation.matching import BatchMatch
from aegisbench.schema import Declared, param
from aegisbench.stats import (NAN_INTERVAL, count_ratios, multiplicities, percentile_interval, percentile_intervals,
                              resample_indices)

__all__ = ["BootstrapParams", "Resamples", "ap50_samples", "condition_intervals", "count_intervals",
           "count_statistics", "multiplicities", "percentile_interval", "resample_indices"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BootstrapParams(Declared):
    """The bootstrap of every interval: resamples and the percentiles of the interval."""

    n_resamples: int = param(1000, lo=1, unit="resamples", doc="bootstrap resamples per interval")
    percentiles: tuple[float, float] = param((2.5, 97.5), doc="lower and upper percentile of the interval (in %)")

    def cross_check(self) -> None:
        lo, hi = self.percentiles
        if not 0 <= lo < hi <= 100:
            raise ValueError(f"percentiles must satisfy 0 <= lo < hi <= 100, got {self.percentiles}")


def _intervals(stats: dict[str, np.ndarray], percentiles) -> dict[str, tuple[float, float]]:
    """Percentile intervals of several ratio sample vectors; NaN samples (resamples where
    the ratio is 0/0) are left out, and a vector that is all NaN gives the 0/0 point
    convention's (0, 0)."""
    return dict(zip(stats, percentile_intervals(list(stats.values()), percentiles, fallback=(0.0, 0.0))))


#: recall, precision, F1 from summed (..., 3) TP/FP/FN counts (:func:`aegisbench.stats.count_ratios`)
count_statistics = count_ratios


def count_intervals(counts: np.ndarray, key: Sequence, n_resamples: int = 1000,
                    percentiles: tuple[float, float] = (2.5, 97.5), *, weights: np.ndarray | None = None
                    ) -> dict[str, tuple[float, float]]:
    """Percentile intervals of pooled recall/precision/F1 from per-image (TP, FP, FN)."""
    counts = np.asarray(counts, np.int64).reshape(-1, 3)
    W = multiplicities(resample_indices(len(counts), key, n_resamples), len(counts)) if weights is None else weights
    return _intervals(count_statistics(_weighted_sum(W, counts), empty=np.nan), percentiles)


def _weighted_sum(W: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``W @ counts`` through float BLAS (exact: integer values far below 2**53)."""
    return W.astype(np.float64) @ np.asarray(counts, np.float64)


#: per-image (TP, FP, FN) -> numerators TP, TP, 2 TP and denominators TP + FN, TP + FP, 2 TP + FP + FN
_RATIO_TERMS = np.array([[1, 1, 2, 1, 1, 2], [0, 0, 0, 0, 1, 1], [0, 0, 0, 1, 0, 1]])


def _ratio_samples(counts: np.ndarray, Wt: np.ndarray, total: int) -> np.ndarray:
    """(3, B) recall, precision, F1 of each resample (NaN where 0/0), the numbers of
    ``count_statistics(W @ counts, empty=np.nan)``: every numerator and denominator is
    an integer summed exactly in one product with image-major ``Wt`` (n, B), float32
    while the sums stay below 2**24 (``total`` bounds the column sums of ``Wt``)."""
    terms = _ratio_terms(counts)
    ft = np.float32 if _fits_float32(terms, total) else np.float64
    return _ratios_of(terms.T.astype(ft) @ Wt.astype(ft, copy=False))


def _ratio_terms(counts: np.ndarray) -> np.ndarray:
    return np.asarray(counts, np.int64) @ _RATIO_TERMS


def _fits_float32(A: np.ndarray, total: int) -> bool:
    """Whether sums of ``total`` rows of the integers ``A`` stay exact in float32."""
    return int(A.max(initial=0)) * total < 2**24 and A.min(initial=0) >= 0


def _ratios_of(sums: np.ndarray) -> np.ndarray:
    """(3, B) ratios from the (6, B) summed numerators and denominators (NaN where 0/0)."""
    sums = sums.astype(np.float64)
    num, den = sums[:3], sums[3:]
    return np.divide(num, den, out=np.full(num.shape, np.nan), where=den > 0)


def _suffix_max(pr: np.ndarray) -> None:
    """``pr[r] = max(pr[r:])`` for every row, in place, in about 3 sqrt(R) array operations
    (blocks of k rows from the end, then the carries, then the rows before the blocks)."""
    if not pr.flags.c_contiguous:
        raise ValueError("pr must be C-contiguous (it is updated through a reshaped view)")
    R = len(pr)
    k = max(1, math.isqrt(R))
    m = R // k
    h = R - m * k
    blocks = pr[h:].reshape(m, k, -1)  # a view: pr is C-contiguous
    for j in range(k - 2, -1, -1):
        np.maximum(blocks[:, j], blocks[:, j + 1], out=blocks[:, j])
    for i in range(m - 2, -1, -1):
        np.maximum(blocks[i], blocks[i + 1, 0], out=blocks[i])
    for r in range(h - 1, -1, -1):
        np.maximum(pr[r], pr[r + 1], out=pr[r])


# recall thresholds that a recall of exactly j/100 does not reach, because
# np.linspace gives e.g. 0.35000000000000003 for 0.35 (pycocotools compares rc >= r)
_UNREACHED_AT_EXACT = np.array([not RECALL_THRESHOLDS[j] <= j / 100 for j in range(101)] + [False])


def _first_reached(tp: np.ndarray, n_gt: np.ndarray) -> np.ndarray:
    """(R, B): how many recall thresholds are first reached at each run end, from the
    integer-valued TP counts (R, B) and GT counts (B,); ``tp`` is overwritten (the
    result is written into it).

    The number of thresholds ``<= TP / n_gt`` (pycocotools' comparison) is
    ``floor(100 TP / n_gt) + 1``, minus one where ``100 TP / n_gt`` is exactly an
    integer ``j`` whose linspace threshold sits one ulp above ``j / 100``. Off an
    integer the quotient is at least ``1 / n_gt`` away from one, far above the
    rounding error (float32 is used only while ``n_gt <= 2**16``)."""
    x = tp
    x *= np.asarray(100, x.dtype)
    x /= n_gt
    q = np.floor(x)
    hit = np.flatnonzero(q == x)
    if hit.size:
        qv = q.reshape(-1)  # a view: q is a new contiguous array
        qv[hit] -= _UNREACHED_AT_EXACT[qv[hit].astype(np.intp)]
    first = x  # np.diff of q with -1 prepended
    np.subtract(q[1:], q[:-1], out=first[1:])
    np.subtract(q[0], -1, out=first[0])
    return first


def _desc_order(score: np.ndarray) -> np.ndarray:
    """Stable descending order of float32 scores (ties, -0.0 with 0.0 included, by index)."""
    s = np.asarray(score, np.float32)
    if not s.size or s.min() >= 0:  # scores in [0, 1]: a stable sort of -s
        return np.argsort(-s, kind="stable")
    s = s + np.float32(0)  # -0.0 -> +0.0; below: negative scores, or NaN (sorted first)
    if s.min() < 0:
        return np.argsort(-s.astype(np.float64), kind="stable")
    key = ((~s.view(np.uint32)).astype(np.uint64) << np.uint64(32)) | np.arange(s.size, dtype=np.uint64)
    return (np.sort(key) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _run_rows(match: BatchMatch, n: int) -> tuple[np.ndarray, int]:
    """``(rows, R)``: the row of :func:`_ap50_t`'s count matrix (times ``n``, plus the image)
    of every prediction off the ignore regions, and the number of TP runs (0: no TP).

    Only the TPs are sorted (descending float32 score, ties by flat index, as
    :func:`_desc_order`); each FP's place among them is a binary search of the same key.
    TP ``j`` of the score order starts a run when an FP lies between TP ``j - 1`` and it."""
    s = np.asarray(match.score, np.float32)
    tp = match.tp & ~match.ignored
    if s.size and not s.min() >= 0:  # a negative or NaN score: the whole order
        return _run_rows_from_order(match, n, tp)
    tp_idx = np.flatnonzero(tp)
    m = len(tp_idx)
    if not m:
        return np.zeros(0, np.int64), 0
    bits = (s + np.float32(0)).view(np.uint32)  # -0.0 -> +0.0
    key = np.invert(bits).astype(np.uint64)
    key <<= np.uint64(32)
    key |= np.arange(s.size, dtype=np.uint64)  # unique: ties by flat index
    tp_key = np.sort(key[tp_idx])
    tp_idx = (tp_key & np.uint64(0xFFFFFFFF)).astype(np.intp)
    fp_idx = np.flatnonzero(match.fp)
    k = np.searchsorted(tp_key, key[fp_idx])  # TPs ahead of each FP
    start = np.bincount(k, minlength=m + 1)[:m] > 0
    start[0] = True
    runs = np.cumsum(start)  # runs started at or before each TP
    R = int(runs[-1])
    rows = np.empty(m + len(fp_idx), np.int64)
    np.subtract(runs, 1, out=rows[:m])  # TPs: their run
    np.add(np.concatenate(([0], runs))[k], R, out=rows[m:])  # FPs: R + the runs before them
    rows *= n
    rows[:m] += match.pred_image[tp_idx]
    rows[m:] += match.pred_image[fp_idx]
    return rows, R


def _run_rows_from_order(match: BatchMatch, n: int, tp: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`_run_rows` from the order of every counted prediction (any float32 scores)."""
    order = _desc_order(match.score)
    order = order[~match.ignored[order]]
    tp_sorted = tp[order]
    if not tp_sorted.any():
        return np.zeros(0, np.int64), 0
    start = tp_sorted.copy()
    start[1:] &= ~tp_sorted[:-1]
    runs_before = np.cumsum(start)  # runs started at or before each position
    R = int(runs_before[-1])
    row = np.where(tp_sorted, runs_before - 1, R + runs_before)
    row *= n
    row += match.pred_image[order]
    return row, R


def _ap_counts(match: BatchMatch, n: int) -> tuple[np.ndarray | None, int]:
    """``(A, R)``: the (2R + 1, n) integer counts whose weighted sums give the AP of a
    resample (None without a TP): rows 0..R-1 the TPs up to each run end per image,
    rows R..2R-1 the TPs + FPs up to each run end, row 2R the GT boxes."""
    row, R = _run_rows(match, n)
    if not R:
        return None, 0
    A = np.bincount(row, minlength=(2 * R + 1) * n).reshape(2 * R + 1, n)
    np.cumsum(A[:R], axis=0, out=A[:R])  # rows R..2R before the sums: FPs after 0..R runs
    np.cumsum(A[R:2 * R], axis=0, out=A[R:2 * R])
    A[R:2 * R] += A[:R]  # TP + FP at each run end
    A[2 * R] = match.n_gt()
    return A, R


def _ap_of(X: np.ndarray, R: int) -> np.ndarray:
    """AP per resample from the weighted sums ``X`` (2R + 1, B) of :func:`_ap_counts`'s
    rows (float32 or float64, C-contiguous rows; overwritten)."""
    tp, den, npig = X[:R], X[R:2 * R], X[2 * R]
    np.maximum(den, 1, out=den)  # TP = 0 whenever TP + FP = 0
    pr = np.divide(tp, den, out=den)
    _suffix_max(pr)  # envelope: running max from the last run end
    if npig.max() > 2**16:  # keep the recall-threshold arithmetic exact
        tp, npig = tp.astype(np.float64), npig.astype(np.float64)
    first = _first_reached(tp, np.maximum(npig, 1))  # in tp's memory: X is not read again
    ap = np.einsum("rb,rb->b", pr, first, dtype=np.float64) / len(RECALL_THRESHOLDS)
    ap[npig == 0] = np.nan
    return ap


def _no_tp_ap(match: BatchMatch, Wt: np.ndarray) -> np.ndarray:
    """AP per resample without a single TP: 0, or NaN without a GT box."""
    npig = match.n_gt().astype(np.float64) @ Wt
    return np.where(npig > 0, 0.0, np.nan)


def _ap50_t(match: BatchMatch, Wt: np.ndarray, total: int | None = None) -> np.ndarray:
    """AP per resample from image-major integer multiplicities ``Wt`` (n, B) float32;
    ``total`` bounds the column sums (the number of images for a bootstrap draw)."""
    A, R = _ap_counts(match, Wt.shape[0])
    if A is None:
        return _no_tp_ap(match, Wt)
    total = int(Wt.sum(axis=0).max()) if total is None else total
    ft = np.float32 if int(A.max(initial=0)) * total < 2**24 else np.float64
    X = A.astype(ft) @ Wt.astype(ft, copy=False)  # exact: integer values below 2**24 (float32) / 2**53
    return _ap_of(X, R)


def _condition_samples(match: BatchMatch, counts: np.ndarray, Wt: np.ndarray, total: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """``(_ratio_samples(counts, Wt, total), _ap50_t(match, Wt, total))`` from one matrix
    product when both fit float32 (each sum is an exact integer, so the bits are those of
    the two products)."""
    A, R = _ap_counts(match, Wt.shape[0])
    terms = _ratio_terms(counts)
    if A is None or not (_fits_float32(A, total) and _fits_float32(terms, total)):
        return _ratio_samples(counts, Wt, total), _ap50_t(match, Wt, total)
    k = len(A)
    M = np.empty((k + terms.shape[1], A.shape[1]), np.float32)
    M[:k] = A
    M[k:] = terms.T
    X = M @ Wt.astype(np.float32, copy=False)
    return _ratios_of(X[k:]), _ap_of(X[:k], R)


def ap50_samples(match: BatchMatch, W: np.ndarray) -> np.ndarray:
    """Class-agnostic AP at the match's IoU threshold for each resample row of ``W`` (B, n);
    equal to :func:`~aegisbench.evaluation.coco.map_from_arrays` on the materialised
    resample up to float32 rounding of the precision values (~1e-7)."""
    return _ap50_t(match, np.ascontiguousarray(np.asarray(W).T, dtype=np.float32))


@dataclass(frozen=True, eq=False)
class Resamples:
    """One bootstrap draw over ``n`` images: indices (B, n) and image-major
    multiplicities (n, B). Share one across the conditions of a split to draw once
    and to pair the conditions (every condition sees the same resampled image sets)."""

    idx: np.ndarray
    weights_t: np.ndarray

    @classmethod
    def draw(cls, n: int, key: Sequence, n_resamples: int = 1000) -> Resamples:
        idx = resample_indices(n, key, n_resamples)
        return cls(idx, np.ascontiguousarray(multiplicities(idx, n).T, dtype=np.float32))

    @property
    def n_images(self) -> int:
        return self.weights_t.shape[0]


def condition_intervals(match: BatchMatch, threshold: float, key: Sequence | None = None,
                        params: BootstrapParams = BootstrapParams(), *, with_ap50: bool = True,
                        resamples: Resamples | None = None, counts: np.ndarray | None = None
                        ) -> dict[str, tuple[float, float]]:
    """Intervals of recall, precision, F1 (at ``threshold``) and AP50 with one shared
    resampling: drawn from ``rng_for(*key)``, or the given ``resamples``; ``counts``:
    ``match.counts(threshold)`` when the caller has it."""
    if resamples is None:
        if key is None:
            raise ValueError("give a key or resamples")
        resamples = Resamples.draw(match.n_images, key, params.n_resamples)
    elif resamples.n_images != match.n_images:
        raise ValueError(f"resamples cover {resamples.n_images} images, the match {match.n_images}")
    Wt = resamples.weights_t
    counts = match.counts(threshold) if counts is None else counts
    names = ["recall", "precision", "f1"]
    if with_ap50:
        samples, ap = _condition_samples(match, counts, Wt, match.n_images)
        dropped = int(np.isnan(ap).sum())
        if dropped:
            log.info("AP50 bootstrap: %d of %d resamples had no GT box and were left out", dropped, len(ap))
        samples, names = [*samples, ap], [*names, "map50"]
    else:
        samples = _ratio_samples(counts, Wt, match.n_images)
    out = dict(zip(names, percentile_intervals(samples, params.percentiles, fallback=(0.0, 0.0))))
    if with_ap50 and dropped == len(ap):  # no resample with a GT box: no interval
        out["map50"] = NAN_INTERVAL
    return out
