"""Smoke-track practice (seed 001): image-level P/R/F1 and time to detect on sequences.

An image is *positive* in the ground truth when it has at least one smoke box, and
predicted positive when a box is kept at the frozen threshold. A sequence (one
``group_id`` with a ``fire_start_frame``) is detected at the first frame at or after
the fire start holding a *correct* detection (a kept box matched to a GT box by the
shared matcher); the delay is given in frames and, from ``time_s``, in minutes.

>>> time_to_detect([0, 1, 2, 3], [True, False, False, True], 1, seconds_per_frame=30)
{'detected': True, 'frames': 2, 'minutes': 1.0}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from aegisbench.metrics.detection import f1, precision, recall

if TYPE_CHECKING:  # annotations only: metrics do not import the evaluation package
    from aegisbench.evaluation.matching import BatchMatch


def image_positive(match: BatchMatch, threshold: float) -> np.ndarray:
    """Image-level decision: at least one box kept at ``threshold``."""
    c = match.counts(threshold)
    return (c[:, 0] + c[:, 1]) > 0


def correct_frames(match: BatchMatch, threshold: float) -> np.ndarray:
    """Per image: at least one true positive kept at ``threshold``."""
    return match.counts(threshold)[:, 0] > 0


def image_level_prf(gt_positive, pred_positive) -> dict[str, float]:
    """Image-level precision, recall, F1 (an image is positive when it has smoke /
    when any box is kept)."""
    g, p = np.asarray(gt_positive, bool), np.asarray(pred_positive, bool)
    if g.shape != p.shape:
        raise ValueError("gt_positive and pred_positive must have the same shape")
    counts = [int((g & p).sum()), int((~g & p).sum()), int((g & ~p).sum())]
    return {"precision": precision(counts), "recall": recall(counts), "f1": f1(counts),
            "tp": counts[0], "fp": counts[1], "fn": counts[2]}


def image_counts(gt_positive, pred_positive) -> np.ndarray:
    """(n_images, 3) image-level TP / FP / FN indicators (the bootstrap's per-image counts)."""
    g, p = np.asarray(gt_positive, bool), np.asarray(pred_positive, bool)
    return np.stack([g & p, ~g & p, g & ~p], axis=1).astype(np.int64)


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


def sequence_delays(gt, match: BatchMatch, threshold: float) -> list[dict]:
    """Time to detect of every sequence of a split (sorted by ``group_id``); ``gt`` has
    ``group_id``, ``fire_start_frame``, ``frame_index`` and ``time_s`` per image."""
    hit = correct_frames(match, threshold)
    out = []
    groups = np.asarray([g if g is not None else "" for g in gt.group_id], dtype=object)
    for group in sorted(set(groups[gt.fire_start_frame >= 0].tolist())):
        sel = np.flatnonzero((groups == group) & (gt.fire_start_frame >= 0))
        start = int(gt.fire_start_frame[sel[0]])
        frames = gt.frame_index[sel]
        times = gt.time_s[sel]
        with_time = bool(np.isfinite(times).all() and (frames == start).any())
        r = time_to_detect(frames, hit[sel], start, time_s=times if with_time else None)
        out.append({"group_id": group, "fire_start_frame": start, "n_frames": int(len(sel)), **r})
    return out
