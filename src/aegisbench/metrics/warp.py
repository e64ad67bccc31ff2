"""WARP (seed 000): the global-noise mAP loss and the cloud-patch deception rates.

Seed 000's Eq. 6: ``gamma_i = D_i / A_i`` with ``D_i`` "the number of detections [whose]
bounding box has IoU >= 0.50 with the injected noise's bounding box" over the ``A_i``
patch positions: every deceiving detection counts, so two boxes on one patch count twice
(:func:`gamma_rates`). The share of positions with at least one deceiving box, a rate in
[0, 1] comparable with alpha and beta, is its own metric (:func:`deceived_position_rates`).

>>> map_percent_loss(0.25, 0.5), map_percent_loss(0.5, 0.5)
(50.0, 0.0)
>>> counts = np.array([[2, 0]])  # two boxes on the first of two patch positions
>>> gamma_rates(counts).tolist(), deceived_position_rates(counts).tolist()
([1.0], [0.5])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aegisbench.geometry import box_area, pair_iou
from aegisbench.vocab import WARP_GRID


def map_percent_loss(map_after: float, map_original: float) -> float:
    """WARP mAP loss in percent, positive for a loss (lower is better), as seed 000's tables
    report it: ``(mAP_original - mAP_after) / mAP_original * 100`` -- the negated Eq. 3
    (NaN if original is 0)."""
    return (map_original - map_after) / map_original * 100.0 if map_original else float("nan")


def flip_probabilities(original_positive, patched_positive) -> tuple[np.ndarray, np.ndarray]:
    """Per-image ``alpha`` (TP -> FN flips) and ``beta`` (FN -> TP flips) over the
    ``A`` patch positions: ``patched_positive`` is (n_images, A) image-level outcomes
    (image positive = at least one box kept), ``original_positive`` is (n_images,)."""
    o = np.asarray(original_positive, bool).reshape(-1, 1)
    p = np.asarray(patched_positive, bool)
    if p.ndim != 2 or p.shape[0] != o.shape[0] or p.shape[1] == 0:
        raise ValueError("patched_positive must be (n_images, n_positions) with n_positions >= 1")
    return (o & ~p).mean(axis=1), (~o & p).mean(axis=1)


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
    iou = pair_iou(d, box_area(d), patch[pos], box_area(patch[pos]))
    return np.bincount(pos[iou >= iou_threshold], minlength=len(patch))


def gamma_rates(counts_per_position: np.ndarray) -> np.ndarray:
    """Per-image ``gamma_i = D_i / A_i`` (seed 000, Eq. 6) from (n_images, A) deception
    counts: ``D_i`` is the number of deceiving detections over all ``A`` positions, so two
    boxes on one patch count twice and gamma may exceed 1."""
    c = np.asarray(counts_per_position)
    return c.sum(axis=1) / c.shape[1]


def deceived_position_rates(counts_per_position: np.ndarray) -> np.ndarray:
    """Per image, the share of the ``A`` patch positions with at least one deceiving
    detection (several boxes on one patch deceive once): a rate in [0, 1]."""
    c = np.asarray(counts_per_position)
    return (c > 0).sum(axis=1) / c.shape[1]


def gamma_count_table(counts_per_position: np.ndarray) -> list[tuple[int, float, int]]:
    """``(D, gamma = D / A, number of images)`` for each observed ``D`` (seed 000's Table 5,
    ``D`` the deceiving detections of an image)."""
    c = np.asarray(counts_per_position)
    d, n = np.unique(c.sum(axis=1), return_counts=True)
    return [(int(a), a / c.shape[1], int(b)) for a, b in zip(d, n)]


def deception_heatmap(counts_per_position: np.ndarray, grid: tuple[int, int] = (WARP_GRID, WARP_GRID)) -> np.ndarray:
    """Deceiving detections summed over images, per grid cell (rows, cols)."""
    return np.asarray(counts_per_position).sum(axis=0).reshape(grid)


def warp_summary(alpha, beta, gamma) -> dict[str, float]:
    """Means over the test images: E[alpha], E[beta], E[gamma]."""
    return {"alpha": float(np.mean(alpha)), "beta": float(np.mean(beta)), "gamma": float(np.mean(gamma))}
