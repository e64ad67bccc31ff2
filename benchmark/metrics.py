"""Metrics of the three tracks, functions first. Each public metric carries
``higher_is_better`` (True, False, or None for multi-valued results), read with
:func:`higher_is_better`. Streaming use goes through the ``_update`` / ``_compute``
pairs (counts, calibration bins).

Detection counts come from the shared matcher (:mod:`aegisbench.evaluation.matching`);
a 0/0 ratio is reported as 0 (scikit-learn's ``zero_division=0``).

>>> recall([[3, 1, 1], [0, 0, 2]]), precision([[3, 1, 1]]), round(f1([[3, 1, 1]]), 4)
(0.5, 0.75, 0.75)
>>> higher_is_better(recall), higher_is_better(brier_score)
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from aegisbench.evaluation.bootstrap import percentile_interval
from aegisbench.evaluation.matching import BatchMatch, pair_iou
from aegisbench.hashing import rng_for


def metric(higher: bool | None) -> Callable:
    """Decorator recording the direction of a metric on the function."""
    def deco(fn: Callable) -> Callable:
        fn.higher_is_better = higher
        return fn
    return deco


def higher_is_better(fn: Callable) -> bool | None:
    return fn.higher_is_better


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den > 0 else 0.0


# ------------------------------------------------------------ counts: P / R / F1


def _counts_update(state: np.ndarray | None, counts) -> np.ndarray:
    """Add (n, 3) or (3,) TP/FP/FN counts to a pooled (3,) state."""
    c = np.asarray(counts, np.int64).reshape(-1, 3)
    if (c < 0).any():
        raise ValueError("counts must be non-negative")
    total = c.sum(axis=0)
    return total if state is None else state + total


@metric(True)
def recall(counts) -> float:
    tp, _, fn = _counts_update(None, counts)
    return _ratio(tp, tp + fn)


@metric(True)
def precision(counts) -> float:
    tp, fp, _ = _counts_update(None, counts)
    return _ratio(tp, tp + fp)


@metric(True)
def f1(counts) -> float:
    tp, fp, fn = _counts_update(None, counts)
    return _ratio(2 * tp, 2 * tp + fp + fn)


# Target size bands by GT box area in pixels of the full frame, half-open [lo, hi).
SIZE_BANDS: tuple[tuple[str, float, float], ...] = (
    ("tiny", 0.0, 16.0**2), ("small", 16.0**2, 32.0**2), ("medium", 32.0**2, 96.0**2), ("large", 96.0**2, np.inf))


@metric(True)
def recall_by_size(gt_xyxy: np.ndarray, gt_detected: np.ndarray, bands=SIZE_BANDS) -> dict[str, dict]:
    """Recall per size band: ``{band: {"n_gt", "n_detected", "recall"}}`` (recall NaN for an empty band)."""
    g = np.asarray(gt_xyxy, np.float64).reshape(-1, 4)
    hit = np.asarray(gt_detected, bool)
    area = (g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1])
    out = {}
    for name, lo, hi in bands:
        sel = (area >= lo) & (area < hi)
        n, k = int(sel.sum()), int(hit[sel].sum())
        out[name] = {"n_gt": n, "n_detected": k, "recall": k / n if n else float("nan")}
    return out


@metric(False)
def relative_drop(clean: float, corrupted: float) -> float:
    """``(clean - corrupted) / clean`` (NaN when clean is 0): 0.25 = a quarter lost."""
    return (clean - corrupted) / clean if clean else float("nan")


# ------------------------------------------------------- localization stability


@metric(True)
def localization_stability(clean: BatchMatch, corrupted: BatchMatch, threshold: float) -> dict:
    """For GT boxes detected in both conditions at ``threshold``: ``n_both``, mean IoU
    between the two matched predicted boxes (``stability``), mean centre shift divided
    by the GT box diagonal (``center_shift``), and the per-box arrays."""
    if (clean.gt_xyxy.shape != corrupted.gt_xyxy.shape or not np.array_equal(clean.gt_image, corrupted.gt_image)
            or not np.array_equal(clean.gt_xyxy, corrupted.gt_xyxy)):
        raise ValueError("clean and corrupted matches must cover the same GT boxes")
    both = clean.gt_detected(threshold) & corrupted.gt_detected(threshold)
    a = clean.pred_xyxy[clean.gt_pred[both]]
    b = corrupted.pred_xyxy[corrupted.gt_pred[both]]
    g = clean.gt_xyxy[both]
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    iou = pair_iou(a, area(a), b, area(b))
    shift = np.hypot((a[:, 0] + a[:, 2] - b[:, 0] - b[:, 2]) / 2, (a[:, 1] + a[:, 3] - b[:, 1] - b[:, 3]) / 2)
    shift = shift / np.hypot(g[:, 2] - g[:, 0], g[:, 3] - g[:, 1])
    n = int(both.sum())
    return {"n_both": n, "n_clean_detected": int(clean.gt_detected(threshold).sum()),
            "stability": float(iou.mean()) if n else float("nan"),
            "center_shift": float(shift.mean()) if n else float("nan"), "iou": iou, "shift": shift}


@dataclass(frozen=True)
class SilentFailureParams:
    """A silent failure: recall falls by at least ``min_relative_recall_drop`` of its
    clean value while the surviving detections stay on target (mean stability IoU
    >= ``min_stability``, or no survivors at all)."""

    min_relative_recall_drop: float = 0.5
    min_stability: float = 0.7

    def __post_init__(self) -> None:
        for name in ("min_relative_recall_drop", "min_stability"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {v!r}")


@metric(False)
def silent_failure(clean_recall: float, corrupted_recall: float, stability: float, n_both: int,
                   params: SilentFailureParams = SilentFailureParams()) -> bool:
    if clean_recall <= 0:
        return False
    collapsed = relative_drop(clean_recall, corrupted_recall) >= params.min_relative_recall_drop
    return bool(collapsed and (n_both == 0 or stability >= params.min_stability))


# ------------------------------------------------------------------------ WARP


@metric(False)
def map_percent_loss(map_after: float, map_original: float) -> float:
    """WARP mAP loss in percent, positive for a loss (lower is better), as seed 000's tables
    report it: ``(mAP_original - mAP_after) / mAP_original * 100`` -- the negated Eq. 3
    (NaN if original is 0).

    >>> map_percent_loss(0.25, 0.5), map_percent_loss(0.5, 0.5)
    (50.0, 0.0)
    """
    return (map_original - map_after) / map_original * 100.0 if map_original else float("nan")


@metric(False)
def flip_probabilities(original_positive, patched_positive) -> tuple[np.ndarray, np.ndarray]:
    """Per-image ``alpha`` (TP -> FN flips) and ``beta`` (FN -> TP flips) over the
    ``A`` patch positions: ``patched_positive`` is (n_images, A) image-level outcomes
    (image positive = at least one box kept), ``original_positive`` is (n_images,)."""
    o = np.asarray(original_positive, bool).reshape(-1, 1)
    p = np.asarray(patched_positive, bool)
    if p.ndim != 2 or p.shape[0] != o.shape[0] or p.shape[1] == 0:
        raise ValueError("patched_positive must be (n_images, n_positions) with n_positions >= 1")
    return (o & ~p).mean(axis=1), (~o & p).mean(axis=1)


@metric(False)
def deception_counts(patch_xyxy: np.ndarray, detections: Sequence[np.ndarray],
                     iou_threshold: float = 0.5) -> np.ndarray:
    """Per patch position, the number of kept detections with IoU >= ``iou_threshold``
    with that position's patch box (``detections[j]``: boxes kept with the patch at ``j``)."""
    patch = np.asarray(patch_xyxy, np.float64).reshape(-1, 4)
    if len(detections) != len(patch):
        raise ValueError("one detection array per patch position")
    sizes = [len(np.asarray(d).reshape(-1, 4)) for d in detections]
    parts = [np.asarray(x, np.float64).reshape(-1, 4) for x in detections]
    d = np.concatenate(parts) if parts else np.zeros((0, 4))
    pos = np.repeat(np.arange(len(patch)), sizes)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    iou = pair_iou(d, area(d), patch[pos], area(patch[pos]))
    return np.bincount(pos[iou >= iou_threshold], minlength=len(patch))


@metric(False)
def gamma_rates(counts_per_position: np.ndarray) -> np.ndarray:
    """Per-image ``gamma_i = D_i / A_i`` from (n_images, A) deception counts, where ``D_i``
    counts the patch positions with at least one deceiving detection, so gamma lies in
    [0, 1] as in WARP (several boxes on one patch deceive once)."""
    c = np.asarray(counts_per_position)
    return (c > 0).sum(axis=1) / c.shape[1]


def gamma_count_table(counts_per_position: np.ndarray) -> list[tuple[int, float, int]]:
    """``(D, gamma = D / A, number of images)`` for each observed ``D`` (WARP Table 5)."""
    c = np.asarray(counts_per_position)
    d, n = np.unique((c > 0).sum(axis=1), return_counts=True)
    return [(int(a), a / c.shape[1], int(b)) for a, b in zip(d, n)]


def deception_heatmap(counts_per_position: np.ndarray, grid: tuple[int, int] = (25, 25)) -> np.ndarray:
    """Deceiving detections summed over images, per grid cell (rows, cols)."""
    return np.asarray(counts_per_position).sum(axis=0).reshape(grid)


def warp_summary(alpha, beta, gamma) -> dict[str, float]:
    """Means over the test images: E[alpha], E[beta], E[gamma]."""
    return {"alpha": float(np.mean(alpha)), "beta": float(np.mean(beta)), "gamma": float(np.mean(gamma))}


# -------------------------------------------------------- effectiveness S(P, E)


def _eff_terms(baseline_counts, adversary_counts, n_frames) -> np.ndarray:
    b = np.asarray(baseline_counts, np.float64).reshape(-1)
    a = np.asarray(adversary_counts, np.float64).reshape(-1)
    n = np.broadcast_to(np.asarray(n_frames, np.float64), b.shape)
    if b.shape != a.shape or b.size == 0:
        raise ValueError("baseline and adversary counts need the same non-zero length")
    if (b < 0).any() or (a < 0).any() or not (n > 0).all():
        raise ValueError("counts must be >= 0 and n_frames > 0")
    return (b - a) / n  # not clipped: a count may exceed n (double detections)


@metric(False)
def effectiveness_score(baseline_counts, adversary_counts, n_frames) -> float:
    """Seed 002: ``S(P, E) = 1/|E| * sum_e (f_{0,e} - f_{P,e}) / n``. Higher = a more
    effective adversary (so lower is better for the defended model).

    >>> effectiveness_score([500, 400], [0, 100], 500)
    0.8
    """
    return float(np.mean(_eff_terms(baseline_counts, adversary_counts, n_frames)))


def effectiveness_breakdown(baseline_counts, adversary_counts, n_frames,
                            factors: Mapping[str, Sequence]) -> dict[str, dict]:
    """S over the environments at each level of each factor (e.g. distance, lighting)."""
    terms = _eff_terms(baseline_counts, adversary_counts, n_frames)
    out: dict[str, dict] = {}
    for name, levels in factors.items():
        lv = np.asarray(levels, dtype=object)
        if lv.shape != terms.shape:
            raise ValueError(f"factor {name!r} needs one level per environment")
        out[name] = {lev: float(terms[lv == lev].mean()) for lev in dict.fromkeys(lv.tolist())}
    return out


def effectiveness_interval(baseline_counts, adversary_counts, n_frames, key: Sequence,
                           n_resamples: int = 1000, percentiles=(2.5, 97.5)) -> tuple[float, float]:
    """Percentile bootstrap of S over environments (resampled with replacement)."""
    terms = _eff_terms(baseline_counts, adversary_counts, n_frames)
    idx = rng_for(*key).integers(0, len(terms), (n_resamples, len(terms)))
    return percentile_interval(terms[idx].mean(axis=1), percentiles)


# ---------------------------------------------------------------- smoke practice


def image_positive(match: BatchMatch, threshold: float) -> np.ndarray:
    """Image-level decision: at least one box kept at ``threshold``."""
    c = match.counts(threshold)
    return (c[:, 0] + c[:, 1]) > 0


@metric(None)
def image_level_prf(gt_positive, pred_positive) -> dict[str, float]:
    """Image-level precision, recall, F1 (an image is positive when it has smoke /
    when any box is kept)."""
    g, p = np.asarray(gt_positive, bool), np.asarray(pred_positive, bool)
    if g.shape != p.shape:
        raise ValueError("gt_positive and pred_positive must have the same shape")
    counts = [int((g & p).sum()), int((~g & p).sum()), int((g & ~p).sum())]
    return {"precision": precision(counts), "recall": recall(counts), "f1": f1(counts),
            "tp": counts[0], "fp": counts[1], "fn": counts[2]}


@metric(False)
def time_to_detect(frame_index, detected, fire_start_frame: int, *, time_s=None,
                   seconds_per_frame: float | None = None) -> dict:
    """First correct detection at/after the fire start: delay in frames and minutes
    (``None`` when never detected). Minutes use ``time_s`` (per frame, must include
    the start frame) or ``seconds_per_frame``."""
    f = np.asarray(frame_index, np.int64)
    d = np.asarray(detected, bool)
    if f.shape != d.shape:
        raise ValueError("frame_index and detected must have the same shape")
    hits = np.flatnonzero(d & (f >= fire_start_frame))
    if hits.size == 0:
        return {"detected": False, "frames": None, "minutes": None}
    first = hits[np.argmin(f[hits])]
    frames = int(f[first] - fire_start_frame)
    if time_s is not None:
        t = np.asarray(time_s, np.float64)
        start = np.flatnonzero(f == fire_start_frame)
        if start.size == 0:
            raise ValueError("time_s given but the fire start frame is not among the frames")
        minutes = float(t[first] - t[start[0]]) / 60.0
    elif seconds_per_frame is not None:
        minutes = frames * float(seconds_per_frame) / 60.0
    else:
        minutes = None
    return {"detected": True, "frames": frames, "minutes": minutes}


def time_to_detect_summary(results: Sequence[Mapping]) -> dict:
    """Mean and sample SD (ddof=1; NaN below 2) over the detected sequences."""
    out: dict = {"n_sequences": len(results), "n_detected": sum(r["detected"] for r in results)}
    for unit in ("frames", "minutes"):
        v = np.array([r[unit] for r in results if r["detected"] and r[unit] is not None], np.float64)
        out[f"mean_{unit}"] = float(v.mean()) if v.size else float("nan")
        out[f"sd_{unit}"] = float(v.std(ddof=1)) if v.size > 1 else float("nan")
    return out


# ------------------------------------------------------- probabilistic forecasts


def _check_prob(p, y) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(p, np.float64).reshape(-1)
    y = np.asarray(y, np.float64).reshape(-1)
    if p.shape != y.shape or p.size == 0:
        raise ValueError("p and y need the same non-zero size")
    if not (np.isfinite(p).all() and p.min() >= 0 and p.max() <= 1):
        raise ValueError("p must lie in [0, 1]")
    if not (np.isfinite(y).all() and y.min() >= 0 and y.max() <= 1):
        raise ValueError("y must lie in [0, 1] (binary outcomes or observed frequencies)")
    return p, y


@metric(False)
def brier_score(p, y) -> float:
    """Mean squared error of probability forecasts (= sklearn ``brier_score_loss`` for binary y)."""
    p, y = _check_prob(p, y)
    return float(np.mean((p - y) ** 2))


def _bin_ids(p: np.ndarray, n_bins: int) -> np.ndarray:
    """Uniform bins on [0, 1], right-closed: (e_{k-1}, e_k], the first also holds 0."""
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")
    return np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], p)


def _calibration_update(state: np.ndarray | None, p, y, n_bins: int = 10) -> np.ndarray:
    """Add forecasts to a (5, n_bins) state: count, sum p, sum y, sum y^2, sum (p - y)^2."""
    p, y = _check_prob(p, y)
    b = _bin_ids(p, n_bins)
    s = np.stack([np.bincount(b, minlength=n_bins).astype(np.float64),
                  np.bincount(b, weights=p, minlength=n_bins), np.bincount(b, weights=y, minlength=n_bins),
                  np.bincount(b, weights=y * y, minlength=n_bins),
                  np.bincount(b, weights=(p - y) ** 2, minlength=n_bins)])
    return s if state is None else state + s


def _calibration_compute(state: np.ndarray) -> dict[str, np.ndarray | float]:
    n, sp, sy, sy2, se = state
    nz = n > 0
    N = n.sum()
    ybar = sy.sum() / N
    pk, yk, nk = sp[nz] / n[nz], sy[nz] / n[nz], n[nz]
    rel = float(np.sum(nk * (pk - yk) ** 2) / N)
    res = float(np.sum(nk * (yk - ybar) ** 2) / N)
    unc = float(max(sy2.sum() / N - ybar**2, 0.0))  # = ybar (1 - ybar) for binary y
    brier = float(se.sum() / N)
    return {"prob_true": yk, "prob_pred": pk, "count": nk,
            "ece": float(np.sum(nk / N * np.abs(yk - pk))), "brier": brier, "reliability": rel,
            "resolution": res, "uncertainty": unc, "residual": brier - (rel - res + unc)}


@metric(None)
def calibration_curve(p, y, n_bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """``(prob_true, prob_pred)`` over the non-empty uniform bins (scikit-learn convention)."""
    c = _calibration_compute(_calibration_update(None, p, y, n_bins))
    return c["prob_true"], c["prob_pred"]


@metric(False)
def expected_calibration_error(p, y, n_bins: int = 10) -> float:
    """``sum_k |I_k| / N * |mean y_k - mean p_k|`` over the :func:`calibration_curve` bins."""
    return _calibration_compute(_calibration_update(None, p, y, n_bins))["ece"]


@metric(None)
def brier_decomposition(p, y, n_bins: int = 10) -> dict[str, float]:
    """Murphy's ``brier ~ reliability - resolution + uncertainty`` on the calibration
    bins; ``residual`` is the within-bin forecast-spread term (0 when forecasts are
    constant within bins). ``uncertainty`` is the variance of y (ybar (1 - ybar) for binary y)."""
    c = _calibration_compute(_calibration_update(None, p, y, n_bins))
    return {k: c[k] for k in ("brier", "reliability", "resolution", "uncertainty", "residual")}


def _pr_curve(score, y) -> tuple[np.ndarray, np.ndarray]:
    """(precision, recall) in scikit-learn's ``precision_recall_curve`` layout."""
    s = np.asarray(score, np.float64).reshape(-1)
    t = np.asarray(y).reshape(-1)
    if s.shape != t.shape or s.size == 0 or not np.isfinite(s).all():
        raise ValueError("scores and labels need the same non-zero size and finite scores")
    if not np.isin(t, (0, 1)).all():
        raise ValueError("y must be binary (0/1)")
    order = np.argsort(s, kind="mergesort")[::-1]
    s, t = s[order], t[order].astype(np.float64)
    ends = np.r_[np.flatnonzero(np.diff(s)), t.size - 1]
    tps = np.cumsum(t)[ends]
    fps = 1 + ends - tps
    prec = np.divide(tps, tps + fps, out=np.zeros(tps.size), where=(tps + fps) != 0)
    rec = np.ones(tps.size) if tps[-1] == 0 else tps / tps[-1]
    return np.r_[prec[::-1], 1.0], np.r_[rec[::-1], 0.0]


@metric(True)
def average_precision(p, y) -> float:
    """Step-wise AP, ``sum_n (R_n - R_{n-1}) P_n`` (= sklearn ``average_precision_score``)."""
    prec, rec = _pr_curve(p, y)
    return float(max(0.0, -np.sum(np.diff(rec) * prec[:-1])))


@metric(True)
def auc_pr_trapezoid(p, y) -> float:
    """Trapezoidal area under the PR curve (sklearn ``auc(recall, precision)``); not AP."""
    prec, rec = _pr_curve(p, y)
    return float(abs(np.trapezoid(prec, rec)))
