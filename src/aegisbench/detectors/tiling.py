"""Tiling of large frames, exact box remapping and merging of duplicates at tile seams.

A frame larger than the tile size in either dimension is covered by a grid of
``tile`` x ``tile`` windows that overlap by at least ``overlap`` pixels (seed 004:
1024-px tiles with 256-px overlap, 20 tiles on a 4000x3000 HERIDAL frame); window
starts are spread evenly and the last window ends on the frame border. A frame that
fits in one tile is one window: the whole frame. Boxes found in a window are shifted
by the window origin (exactly: float32 box + integer offset) and merged per frame:
greedy class-agnostic NMS between boxes of *different* windows (within one window the
adapter's NMS already ran, with no wall-clock limit: every window keeps its boxes), optionally after dropping boxes cut by an inner window
edge when another window sees that region whole.

>>> tile_windows(2000, 1500, TilingParams()).tolist()
[[0, 0, 1024, 1024], [488, 0, 1512, 1024], [976, 0, 2000, 1024], [0, 476, 1024, 1500], [488, 476, 1512, 1500], [976, 476, 2000, 1500]]
>>> tile_windows(640, 640, TilingParams()).tolist()
[[0, 0, 640, 640]]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aegisbench.fields import check_int
from aegisbench.geometry import iou_one_to_many
from aegisbench.predictions import Detections
from aegisbench.schema import Declared, param


@dataclass(frozen=True)
class TilingParams(Declared):
    """``tile``/``overlap`` in pixels; ``merge_iou`` of the seam NMS; ``edge_margin``
    (pixels) within which a box counts as touching an inner window edge; ``drop_cut``
    drops such cut boxes when another window fully contains them."""

    tile: int = param(1024, lo=32, unit="px", doc="window side")
    overlap: int = param(256, lo=0, unit="px", doc="overlap of neighbouring windows (below tile)")
    merge_iou: float = param(0.5, lo=0.0, hi=1.0, lo_open=True, unit="IoU", doc="IoU of the seam NMS")
    drop_cut: bool = param(True, doc="drop a box cut by an inner window edge when another window holds it whole")
    edge_margin: float = param(2.0, lo=0.0, unit="px", doc="within this of an inner window edge a box counts as cut")

    def cross_check(self) -> None:
        check_int(self.overlap, f"{type(self).__name__}.overlap", 0, self.tile - 1)


def _starts(length: int, tile: int, overlap: int) -> list[int]:
    if length <= tile:
        return [0]
    n = math.ceil((length - overlap) / (tile - overlap))
    span = length - tile
    return [(i * span) // (n - 1) for i in range(n)]


def tile_windows(width: int, height: int, params: TilingParams) -> np.ndarray:
    """Windows ``(n, 4)`` int64 ``x0, y0, x1, y1`` covering a ``width`` x ``height`` frame,
    row-major. Consecutive windows overlap by at least ``params.overlap``."""
    if width < 1 or height < 1:
        raise ValueError(f"frame size must be positive, got {width}x{height}")
    xs = _starts(int(width), params.tile, params.overlap)
    ys = _starts(int(height), params.tile, params.overlap)
    tw, th = min(params.tile, int(width)), min(params.tile, int(height))
    return np.array([[x, y, x + tw, y + th] for y in ys for x in xs], dtype=np.int64)


def remap_boxes(xyxy: np.ndarray, window) -> np.ndarray:
    """Shift window-local boxes to full-frame pixels (float32, exact for integer offsets
    below 2**24 - the sum is formed in float64 and rounded once)."""
    x0, y0 = int(window[0]), int(window[1])
    out = np.asarray(xyxy, np.float64).reshape(-1, 4) + np.array([x0, y0, x0, y0], np.float64)
    return out.astype(np.float32)


def cross_window_nms(xyxy: np.ndarray, score: np.ndarray, window_id: np.ndarray, iou: float) -> np.ndarray:
    """Indices kept by greedy score-ordered NMS that only suppresses boxes of a
    different window (ties in score keep the lower index), sorted ascending.

    >>> b = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [0, 0, 10, 9]], np.float32)
    >>> cross_window_nms(b, np.array([0.9, 0.8, 0.7]), np.array([0, 1, 0]), 0.5).tolist()
    [0, 2]
    """
    boxes = np.asarray(xyxy, np.float64).reshape(-1, 4)
    order = np.lexsort((np.arange(len(boxes)), -np.asarray(score, np.float64)))
    win = np.asarray(window_id)
    alive = np.ones(len(boxes), bool)
    keep = []
    for i in order:
        if not alive[i]:
            continue
        keep.append(i)
        cand = np.flatnonzero(alive & (win != win[i]))
        if len(cand):
            alive[cand[iou_one_to_many(boxes[i], boxes[cand]) >= iou]] = False
    return np.sort(np.asarray(keep, np.int64))


def cut_boxes(xyxy: np.ndarray, window_id: np.ndarray, windows: np.ndarray, width: int, height: int,
              margin: float) -> np.ndarray:
    """Mask of full-frame boxes that touch an inner edge of their own window (an edge
    not on the frame border) and lie entirely inside some other window."""
    boxes = np.asarray(xyxy, np.float64).reshape(-1, 4)
    w = windows[np.asarray(window_id)].astype(np.float64)
    inner = np.stack([w[:, 0] > 0, w[:, 1] > 0, w[:, 2] < width, w[:, 3] < height], axis=1)
    touch = np.stack([boxes[:, 0] <= w[:, 0] + margin, boxes[:, 1] <= w[:, 1] + margin,
                      boxes[:, 2] >= w[:, 2] - margin, boxes[:, 3] >= w[:, 3] - margin], axis=1)
    cut = (inner & touch).any(axis=1)
    if not cut.any():
        return cut
    win = windows.astype(np.float64)
    inside = ((boxes[:, None, 0] >= win[None, :, 0]) & (boxes[:, None, 1] >= win[None, :, 1])
              & (boxes[:, None, 2] <= win[None, :, 2]) & (boxes[:, None, 3] <= win[None, :, 3]))
    inside[np.arange(len(boxes)), np.asarray(window_id)] = False
    return cut & inside.any(axis=1)


def merge_windows(parts: list[Detections], windows: np.ndarray, width: int, height: int,
                  params: TilingParams) -> Detections:
    """Remap each window's detections to the frame and merge them into one
    :class:`Detections`; a single window is returned remapped but otherwise untouched."""
    if len(parts) != len(windows):
        raise ValueError("one Detections per window")
    if len(parts) == 1:
        d = parts[0]
        return _finite(remap_boxes(d.xyxy, windows[0]), d.score, d.label)
    boxes = [remap_boxes(d.xyxy, w) for d, w in zip(parts, windows)]
    xyxy = np.concatenate(boxes) if boxes else np.zeros((0, 4), np.float32)
    score = np.concatenate([d.score for d in parts]).astype(np.float32)
    wid = np.repeat(np.arange(len(parts)), [len(d) for d in parts])
    has_label = any(d.label is not None for d in parts)
    label = (np.concatenate([d.label if d.label is not None else np.full(len(d), "", object) for d in parts])
             if has_label else None)
    keep = np.ones(len(xyxy), bool)
    if params.drop_cut and len(xyxy):
        keep &= ~cut_boxes(xyxy, wid, windows, width, height, float(params.edge_margin))
    idx = np.flatnonzero(keep)
    idx = idx[cross_window_nms(xyxy[idx], score[idx], wid[idx], float(params.merge_iou))]
    return _finite(xyxy[idx], score[idx], None if label is None else label[idx])


def _finite(xyxy: np.ndarray, score: np.ndarray, label) -> Detections:
    """Detections with degenerate boxes (zero width/height after float32 rounding) and
    exact duplicates (same box and score) removed, scores clipped into [0, 1]."""
    xyxy = np.asarray(xyxy, np.float32).reshape(-1, 4)
    s = np.clip(np.nan_to_num(np.asarray(score, np.float32), nan=0.0), 0.0, 1.0)
    ok = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1]) & np.isfinite(xyxy).all(axis=1)
    idx = np.flatnonzero(ok)
    if len(idx) > 1:
        _, first = np.unique(np.column_stack([xyxy[idx], s[idx]]), axis=0, return_index=True)
        idx = idx[np.sort(first)]
    return Detections(xyxy[idx], s[idx], None if label is None else np.asarray(label, object)[idx])


def cap_detections(det: Detections, limit: int) -> Detections:
    """The ``limit`` highest-scoring detections (stable for ties), in their original order.

    >>> cap_detections(Detections([[0, 0, 1, 1], [0, 0, 2, 2]], [0.2, 0.9]), 1).score.tolist()
    [0.8999999761581421]
    """
    if len(det) <= limit:
        return det
    order = np.argsort(-det.score, kind="stable")[:limit]
    return det.select(np.sort(order))
