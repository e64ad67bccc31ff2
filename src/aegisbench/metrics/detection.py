"""Detection metrics as plain functions: pooled P / R / F1, recall by size band, relative
drop, localization stability, the silent-failure flag and seed 002's effectiveness S.

Detection counts come from the shared matcher (:mod:`aegisbench.evaluation.matching`);
a 0/0 ratio is undefined: NaN here, a null value noted "0/0" in the results (precision
without a single kept detection is not 0). Streaming use goes through :func:`_counts_update`.

>>> recall([[3, 1, 1], [0, 0, 2]]), precision([[3, 1, 1]]), round(f1([[3, 1, 1]]), 4)
(0.5, 0.75, 0.75)
>>> precision([[0, 0, 4]]), recall([[0, 2, 0]])
(nan, nan)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from aegisbench.geometry import box_area as _area
from aegisbench.geometry import pair_iou
from aegisbench.stats import percentile_intervals, prf, ratio, resample_indices

if TYPE_CHECKING:  # annotations only: metrics do not import the evaluation package
    from aegisbench.evaluation.matching import BatchMatch

NAN = float("nan")


def _ratio(num: float, den: float) -> float:
    """``num / den``; NaN (undefined) when ``den`` is 0 (:func:`aegisbench.stats.ratio`)."""
    return float(ratio(num, den, NAN))


def _counts_update(state: np.ndarray | None, counts) -> np.ndarray:
    """Add (n, 3) or (3,) TP/FP/FN counts to a pooled (3,) state."""
    c = np.asarray(counts, np.int64).reshape(-1, 3)
    if (c < 0).any():
        raise ValueError("counts must be non-negative")
    total = c.sum(axis=0)
    return total if state is None else state + total


def _pooled(counts, name: str) -> float:
    """Recall, precision or F1 of the pooled integer counts: :func:`aegisbench.stats.prf`
    (0/0: NaN)."""
    tp, fp, fn = _counts_update(None, counts)
    return float(prf(tp, fp, fn, NAN)[name])


def recall(counts) -> float:
    """Pooled ``TP / (TP + FN)`` of (n, 3) or (3,) TP/FP/FN counts."""
    return _pooled(counts, "recall")


def precision(counts) -> float:
    """Pooled ``TP / (TP + FP)``."""
    return _pooled(counts, "precision")


def f1(counts) -> float:
    """Pooled ``2 TP / (2 TP + FP + FN)``."""
    return _pooled(counts, "f1")


# Target size bands by GT box area in pixels of the full frame, half-open [lo, hi).
SIZE_BANDS: tuple[tuple[str, float, float], ...] = (
    ("tiny", 0.0, 16.0**2), ("small", 16.0**2, 32.0**2), ("medium", 32.0**2, 96.0**2), ("large", 96.0**2, np.inf))


def size_band(area: float) -> str:
    """The band of a box area (px^2).

    >>> size_band(100.0), size_band(32.0 ** 2)
    ('tiny', 'medium')
    """
    return next(name for name, lo, hi in SIZE_BANDS if lo <= area < hi)


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


def relative_drop(clean: float, corrupted: float) -> float:
    """``(clean - corrupted) / clean`` (NaN when clean is 0 or either is undefined): 0.25 = a quarter lost."""
    if not (np.isfinite(clean) and np.isfinite(corrupted)) or clean == 0:
        return float("nan")
    return (clean - corrupted) / clean


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
    iou = pair_iou(a, _area(a), b, _area(b))
    shift = np.hypot((a[:, 0] + a[:, 2] - b[:, 0] - b[:, 2]) / 2, (a[:, 1] + a[:, 3] - b[:, 1] - b[:, 3]) / 2)
    shift = shift / np.hypot(g[:, 2] - g[:, 0], g[:, 3] - g[:, 1])
    n = int(both.sum())
    return {"n_both": n, "n_clean_detected": int(clean.gt_detected(threshold).sum()),
            "stability": float(iou.mean()) if n else float("nan"),
            "center_shift": float(shift.mean()) if n else float("nan"), "iou": iou, "shift": shift}


@dataclass(frozen=True)
class SilentFailureParams:
    """A silent failure: detections vanish without a sign. All three must hold against the
    model's own clean run on the same images: recall falls by at least
    ``min_relative_recall_drop`` of its clean value; the surviving detections stay on target
    (mean localization IoU >= ``min_stability``, or no survivors at all); and false
    positives per image at the frozen threshold did not rise above clean's (an operator
    would see a flood of false alarms, so that failure is not silent)."""

    min_relative_recall_drop: float = 0.5
    min_stability: float = 0.7

    def __post_init__(self) -> None:
        for name in ("min_relative_recall_drop", "min_stability"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {v!r}")


def silent_failure(clean_recall: float, corrupted_recall: float, stability: float, n_both: int,
                   clean_fp_per_image: float, fp_per_image: float,
                   params: SilentFailureParams = SilentFailureParams()) -> bool | None:
    """True for a silent failure (see :class:`SilentFailureParams`); None when clean recall
    is undefined (no GT box: 0/0).

    >>> silent_failure(0.9, 0.1, 0.9, 5, 0.2, 0.2), silent_failure(0.9, 0.1, 0.9, 5, 0.2, 2.83)
    (True, False)
    """
    for name, v in (("clean_fp_per_image", clean_fp_per_image), ("fp_per_image", fp_per_image)):
        if not np.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
    if not np.isfinite(clean_recall):
        return None
    if clean_recall <= 0:
        return False
    collapsed = relative_drop(clean_recall, corrupted_recall) >= params.min_relative_recall_drop
    on_target = n_both == 0 or stability >= params.min_stability
    return bool(collapsed and on_target and fp_per_image <= clean_fp_per_image)


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


def effectiveness_score(baseline_counts, adversary_counts, n_frames) -> float:
    """Seed 002: ``S(P, E) = 1/|E| * sum_e (f_{0,e} - f_{P,e}) / n``. Higher = a more
    effective adversary (so lower is better for the defended model).

    >>> effectiveness_score([500, 400], [0, 100], 500)
    0.8
    """
    return _score_of(_eff_terms(baseline_counts, adversary_counts, n_frames))


def _score_of(terms: np.ndarray) -> float:
    return float(np.mean(terms))


def effectiveness_breakdown(baseline_counts, adversary_counts, n_frames,
                            factors: Mapping[str, Sequence]) -> dict[str, dict]:
    """S over the environments at each level of each factor (e.g. distance, lighting)."""
    return _breakdown_of(_eff_terms(baseline_counts, adversary_counts, n_frames), factors)


def _breakdown_of(terms: np.ndarray, factors: Mapping[str, Sequence]) -> dict[str, dict]:
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
    return _interval_of(_eff_terms(baseline_counts, adversary_counts, n_frames), key, n_resamples, percentiles)


def _interval_of(terms: np.ndarray, key: Sequence, n_resamples: int, percentiles) -> tuple[float, float]:
    """The mean of ``terms`` over each resample (the numbers of ``terms[idx].mean(axis=1)``:
    the same sum, divided by the same count), then its percentile interval."""
    n = len(terms)
    means = np.add.reduce(terms.take(resample_indices(n, key, n_resamples)), axis=1)
    means /= n
    return percentile_intervals(means[None], percentiles)[0]
