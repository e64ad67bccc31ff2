"""Box geometry, once: areas and IoU of xyxy boxes in pycocotools' operation order (the
matcher, COCO mAP, localization stability, WARP deception and tiling NMS all use these).
A leaf: imports only numpy.

>>> a = np.array([[0.0, 0, 2, 2]]); b = np.array([[1.0, 0, 3, 2]])
>>> box_area(a).tolist(), round(float(pair_iou(a, box_area(a), b, box_area(b))[0]), 4)
([4.0], 0.3333)
"""

from __future__ import annotations

import numpy as np


def box_area(xyxy: np.ndarray) -> np.ndarray:
    """``(x2 - x1) * (y2 - y1)`` of (n, 4) xyxy boxes."""
    return (xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1])


def pair_iou(d: np.ndarray, d_area: np.ndarray, g: np.ndarray, g_area: np.ndarray,
             crowd: np.ndarray | None = None) -> np.ndarray:
    """IoU of paired xyxy boxes with given areas, in pycocotools' operation order:
    ``i = w * h``; ``u = d_area + g_area - i`` (``d_area`` for crowd GT); 0 unless w, h > 0."""
    w = np.minimum(d[:, 2], g[:, 2]) - np.maximum(d[:, 0], g[:, 0])
    h = np.minimum(d[:, 3], g[:, 3]) - np.maximum(d[:, 1], g[:, 1])
    inter = w * h
    union = d_area + g_area - inter
    if crowd is not None:
        union = np.where(crowd, d_area, union)
    ok = (w > 0) & (h > 0)
    out = np.zeros(len(w))
    np.divide(inter, union, out=out, where=ok)
    return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix (len(a), len(b)) of xyxy boxes, float64.

    >>> box_iou(np.array([[0, 0, 2, 2]]), np.array([[1, 0, 3, 2]])).round(4).tolist()
    [[0.3333]]
    """
    a = np.asarray(a, np.float64).reshape(-1, 4)
    b = np.asarray(b, np.float64).reshape(-1, 4)
    ia, ib = np.repeat(np.arange(len(a)), len(b)), np.tile(np.arange(len(b)), len(a))
    area_a, area_b = box_area(a), box_area(b)
    return pair_iou(a[ia], area_a[ia], b[ib], area_b[ib]).reshape(len(a), len(b))


def iou_one_to_many(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box with each of ``others`` (n, 4)."""
    box = np.asarray(box).reshape(1, 4)
    d = np.broadcast_to(box, others.shape)
    return pair_iou(d, np.broadcast_to(box_area(box), len(others)), others, box_area(others))
