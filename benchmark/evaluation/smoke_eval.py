"""Smoke-track practice (seed 001): image-level P/R/F1 and time-to-detect on sequences.

An image is *positive* in the ground truth when it has at least one smoke box, and
predicted positive when a box is kept at the frozen threshold. A sequence (one
``group_id`` with a ``fire_start_frame``) is detected at the first frame at or after
the fire start holding a *correct* detection (a kept box matched to a GT box by the
shared matcher); the delay is given in frames and, from ``time_s``, in minutes.

>>> import numpy as np
>>> from aegisbench.evaluation.matching import match_images
>>> m = match_images([np.zeros((0, 4)), np.array([[0, 0, 5, 5.]])], [np.zeros(0), np.array([.9])],
...                  [np.zeros((0, 4)), np.array([[0, 0, 5, 5.]])])
>>> correct_frames(m, 0.5).tolist()
[False, True]
"""

from __future__ import annotations

import logging

import numpy as np

from aegisbench.evaluation.matching import BatchMatch
from aegisbench.metrics import image_level_prf, image_positive, time_to_detect, time_to_detect_summary

log = logging.getLogger(__name__)


def correct_frames(match: BatchMatch, threshold: float) -> np.ndarray:
    """Per image: at least one true positive kept at ``threshold``."""
    return match.counts(threshold)[:, 0] > 0


def image_level(gt, match: BatchMatch, threshold: float) -> dict:
    """Image-level precision / recall / F1 and counts of one split."""
    return image_level_prf(gt.n_gt() > 0, image_positive(match, threshold))


def sequence_delays(gt, match: BatchMatch, threshold: float) -> list[dict]:
    """Time to detect of every sequence of a split (sorted by ``group_id``)."""
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


def delay_summary(delays: list[dict]) -> dict:
    """Mean and SD of the delays over the detected sequences (see :func:`time_to_detect_summary`)."""
    return time_to_detect_summary(delays)
