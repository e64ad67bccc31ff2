"""The one shared matcher: greedy, score-ordered, IoU >= 0.5, class-agnostic.

Rules (identical to pycocotools' ``COCOeval.evaluateImg`` so that mAP50 and the
frozen-threshold counts agree on what a true positive is):

* predictions of an image are visited by descending score; **score ties are broken
  by input order** (stable sort, lower index first);
* each prediction takes the still-unmatched GT box with the highest IoU, provided
  IoU >= the threshold (inclusive); **IoU ties go to the later GT box** (higher
  index), as in pycocotools;
* one prediction per GT box; a prediction without a partner is a false positive.

**Ignore regions** (``ignore_xyxy``: VisDrone category 0, COCO ``iscrowd``, VOC
``difficult``, classes mapped to ``ignore``) follow pycocotools' ``iscrowd=1`` GT: their
IoU is ``intersection / prediction area``, one region absorbs any number of predictions,
and a prediction takes one only when no GT box qualifies. A prediction matched to an
ignore region is neither a true nor a false positive (``BatchMatch.ignored``; it is left
out of precision and AP); ignore regions are never GT (not in ``n_gt``, recall or FN).

Property used everywhere downstream: because matching is score-ordered, removing
predictions below a confidence threshold cannot change the match of any kept
prediction (a prediction's match depends only on predictions visited before it,
all of which have a score >= its own, and equal scores are kept or removed together).
So we match **once** on all predictions and derive the counts at any threshold by
filtering (:meth:`BatchMatch.counts`); ``tests/test_matching.py`` checks this
against re-matching. A prediction is kept at threshold ``t`` iff
``float32(score) >= float32(t)``.

The engine (:func:`greedy_match`) is vectorised across images: all IoUs are
computed on candidate pairs at once, and the sequential part only loops over the
predictions that compete for a GT box with another prediction, one per image per step.

>>> m = match_images([np.array([[0, 0, 10, 10], [0, 0, 10, 9]])], [np.array([0.9, 0.8])],
...                  [np.array([[0, 0, 10, 10]])])
>>> m.tp.tolist(), m.counts(0.85).tolist()
([True, False], [[1, 0, 0]])
>>> m = match_images([np.array([[0, 0, 4, 4], [50, 50, 60, 60]])], [np.array([0.9, 0.8])],
...                  [np.zeros((0, 4))], ignore_xyxy=[np.array([[0, 0, 100, 20]])])
>>> m.ignored.tolist(), m.counts(0.0).tolist()
([True, False], [[0, 1, 0]])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aegisbench.geometry import box_area, box_iou, pair_iou

__all__ = ["IOU_THRESHOLD", "BatchMatch", "box_iou", "greedy_match", "match_images", "pair_iou"]

log = logging.getLogger(__name__)

IOU_THRESHOLD = 0.5


def greedy_match(det_group: np.ndarray, det_score: np.ndarray, det_box: np.ndarray, det_area: np.ndarray,
                 gt_group: np.ndarray, gt_box: np.ndarray, gt_area: np.ndarray,
                 thresholds: Sequence[float] = (IOU_THRESHOLD,), *,
                 gt_crowd: np.ndarray | None = None, gt_ignore: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Greedy matching of many groups (images, or image x category) at once.

    Returns ``(det_gt, det_iou)``, both (T, n_det): the matched GT index (global, -1
    for none) and its IoU, per IoU threshold. ``gt_crowd`` boxes (pycocotools
    ``iscrowd``) use ``u = det area`` and can absorb any number of predictions;
    ``gt_ignore`` boxes are taken only when no non-ignored box qualifies.
    Thresholds are applied as ``IoU >= min(t, 1 - 1e-10)``.
    """
    det_group = np.asarray(det_group, np.int64)
    gt_group = np.asarray(gt_group, np.int64)
    nd, ng = len(det_group), len(gt_group)
    thr = np.minimum(np.asarray(thresholds, np.float64), 1 - 1e-10)
    T = len(thr)
    det_gt = np.full((T, nd), -1, np.int64)
    det_iou = np.zeros((T, nd))
    crowd = np.zeros(ng, bool) if gt_crowd is None else np.asarray(gt_crowd, bool)
    ignore = np.zeros(ng, bool) if gt_ignore is None else np.asarray(gt_ignore, bool)
    if nd == 0 or ng == 0:
        return det_gt, det_iou
    # rank of each prediction inside its group: by -score, ties by input index
    order = np.lexsort((np.arange(nd), -np.asarray(det_score, np.float64), det_group))
    pair_det, pair_gt, iou = _candidate_pairs(det_group, det_box, det_area, gt_group, gt_box, gt_area, crowd)
    keep = iou >= thr.min()
    pair_det, pair_gt, iou = pair_det[keep], pair_gt[keep], iou[keep]
    if len(iou) == 0:
        return det_gt, det_iou
    step = _steps(det_group, order, pair_det, pair_gt, crowd, ng)
    _assign(det_gt, det_iou, thr, step, pair_det, pair_gt, iou, crowd, ignore)
    return det_gt, det_iou


def _candidate_pairs(det_group: np.ndarray, det_box: np.ndarray, det_area: np.ndarray, gt_group: np.ndarray,
                     gt_box: np.ndarray, gt_area: np.ndarray, crowd: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pair_det, pair_gt, iou)`` of every (prediction, GT box) pair of the same group."""
    nd = len(det_group)
    g_order = np.argsort(gt_group, kind="stable")
    n_groups = int(max(det_group.max(), gt_group.max())) + 1
    g_count = np.bincount(gt_group, minlength=n_groups)
    g_start = np.concatenate(([0], np.cumsum(g_count)[:-1]))
    reps = g_count[det_group]
    pair_det = np.repeat(np.arange(nd), reps)
    within = np.arange(len(pair_det)) - np.repeat(np.cumsum(reps) - reps, reps)
    pair_gt = g_order[np.repeat(g_start[det_group], reps) + within]
    iou = pair_iou(det_box[pair_det], det_area[pair_det], gt_box[pair_gt], gt_area[pair_gt], crowd[pair_gt])
    return pair_det, pair_gt, iou


def _steps(det_group: np.ndarray, order: np.ndarray, pair_det: np.ndarray, pair_gt: np.ndarray, crowd: np.ndarray,
           ng: int) -> np.ndarray:
    """The step at which each prediction is matched: 0 for those that compete with no other
    prediction for a (non-crowd) box; the others by their rank in ``order`` within their group."""
    nd = len(det_group)
    contested_gt = (np.bincount(pair_gt, minlength=ng) > 1) & ~crowd
    det_contested = np.zeros(nd, bool)
    det_contested[pair_det[contested_gt[pair_gt]]] = True
    step = np.zeros(nd, np.int64)
    c_sorted = order[det_contested[order]]
    if len(c_sorted):
        grp = det_group[c_sorted]
        first = np.concatenate(([True], grp[1:] != grp[:-1]))
        start_idx = np.maximum.accumulate(np.where(first, np.arange(len(grp)), 0))
        step[c_sorted] = np.arange(len(grp)) - start_idx
    return step


def _assign(det_gt: np.ndarray, det_iou: np.ndarray, thr: np.ndarray, step: np.ndarray, pair_det: np.ndarray,
            pair_gt: np.ndarray, iou: np.ndarray, crowd: np.ndarray, ignore: np.ndarray) -> None:
    """Fill ``det_gt`` / ``det_iou`` (T, n_det) step by step: in each step every prediction
    takes its best still-available pair (non-ignored first, then the highest IoU, then the
    later GT box) at each threshold; crowd boxes stay available."""
    T, ng = len(thr), len(crowd)
    # pairs sorted by (step, det, preference); the best available is the last one
    pstep = step[pair_det]
    srt = np.lexsort((pair_gt, iou, ~ignore[pair_gt], pair_det, pstep))
    pair_det, pair_gt, iou, pstep = pair_det[srt], pair_gt[srt], iou[srt], pstep[srt]
    bounds = np.searchsorted(pstep, np.arange(pstep[-1] + 2))
    taken = np.zeros((T, ng), bool)
    reuse = crowd
    for s in range(len(bounds) - 1):
        a, b = bounds[s], bounds[s + 1]
        if a == b:
            continue
        pd, pg, pi = pair_det[a:b], pair_gt[a:b], iou[a:b]
        seg = np.flatnonzero(np.concatenate(([True], pd[1:] != pd[:-1])))
        avail = (pi[None, :] >= thr[:, None]) & (reuse[pg][None, :] | ~taken[:, pg])
        idx = np.where(avail, np.arange(b - a)[None, :], -1)
        best = np.maximum.reduceat(idx, seg, axis=1)  # (T, n dets in this step)
        tt, jj = np.nonzero(best >= 0)
        pick = best[tt, jj]
        det_gt[tt, pd[seg[jj]]] = pg[pick]
        det_iou[tt, pd[seg[jj]]] = pi[pick]
        taken[tt, pg[pick]] = True


def _as_boxes(a) -> np.ndarray:
    a = np.asarray(a, np.float64)
    return a.reshape(0, 4) if a.size == 0 else a


@dataclass(frozen=True, eq=False)
class BatchMatch:
    """Match results of a set of images, flat. ``pred_gt``/``gt_pred`` are global
    indices into the flat GT/prediction arrays (-1 = unmatched)."""

    pred_image: np.ndarray  # (P,) image index of each prediction
    pred_xyxy: np.ndarray  # (P, 4) float64
    score: np.ndarray  # (P,) float32
    pred_gt: np.ndarray  # (P,) matched GT or -1
    pred_iou: np.ndarray  # (P,) IoU with the matched GT (0 if none)
    gt_image: np.ndarray  # (G,)
    gt_xyxy: np.ndarray  # (G, 4) float64
    gt_pred: np.ndarray  # (G,) matched prediction or -1
    n_images: int
    iou_threshold: float = IOU_THRESHOLD
    pred_ignored: np.ndarray | None = None  # (P,) matched to an ignore region only (None: none)

    def __post_init__(self) -> None:
        ig = np.zeros(len(self.pred_gt), bool) if self.pred_ignored is None else np.asarray(self.pred_ignored, bool)
        if ig.shape != self.pred_gt.shape:
            raise ValueError("pred_ignored needs one flag per prediction")
        object.__setattr__(self, "pred_ignored", ig)

    @property
    def tp(self) -> np.ndarray:
        """Per-prediction true-positive flag (all predictions, no threshold)."""
        return self.pred_gt >= 0

    @property
    def ignored(self) -> np.ndarray:
        """Per-prediction flag: matched to an ignore region (neither TP nor FP)."""
        return self.pred_ignored

    @property
    def fp(self) -> np.ndarray:
        """Per-prediction false-positive flag: matched to nothing (all predictions)."""
        return ~self.tp & ~self.pred_ignored

    def kept(self, threshold: float) -> np.ndarray:
        return self.score >= np.float32(threshold)

    def n_gt(self) -> np.ndarray:
        return np.bincount(self.gt_image, minlength=self.n_images)

    def counts(self, threshold: float) -> np.ndarray:
        """Per-image (TP, FP, FN) at ``threshold``, shape (n_images, 3), int64."""
        kept = self.kept(threshold)
        tp = np.bincount(self.pred_image[kept & self.tp], minlength=self.n_images)
        fp = np.bincount(self.pred_image[kept & self.fp], minlength=self.n_images)
        return np.stack([tp, fp, self.n_gt() - tp], axis=1).astype(np.int64)

    def gt_detected(self, threshold: float) -> np.ndarray:
        """Per-GT flag: matched by a prediction kept at ``threshold``."""
        hit = self.gt_pred >= 0
        out = np.zeros(len(self.gt_pred), bool)
        out[hit] = self.kept(threshold)[self.gt_pred[hit]]
        return out


def match_images(pred_xyxy: Sequence, pred_score: Sequence, gt_xyxy: Sequence,
                 iou_threshold: float = IOU_THRESHOLD, *, ignore_xyxy: Sequence | None = None) -> BatchMatch:
    """Match every image's predictions to its GT boxes (xyxy pixels) in one pass.

    ``pred_xyxy[i]``, ``pred_score[i]``, ``gt_xyxy[i]`` (and ``ignore_xyxy[i]``, the
    image's ignore regions) belong to image ``i``;
    :class:`~aegisbench.predictions.Detections` fields can be passed directly.
    """
    if not (len(pred_xyxy) == len(pred_score) == len(gt_xyxy)):
        raise ValueError("pred_xyxy, pred_score and gt_xyxy need one entry per image")
    if ignore_xyxy is not None and len(ignore_xyxy) != len(gt_xyxy):
        raise ValueError("ignore_xyxy needs one entry per image")
    if not 0 < iou_threshold <= 1:
        raise ValueError(f"iou_threshold must be in (0, 1], got {iou_threshold}")
    n = len(gt_xyxy)
    pb = [_as_boxes(b) for b in pred_xyxy]
    gb = [_as_boxes(b) for b in gt_xyxy]
    ib = [np.zeros((0, 4))] * n if ignore_xyxy is None else [_as_boxes(b) for b in ignore_xyxy]
    ps = [np.asarray(s, np.float32).reshape(-1) for s in pred_score]
    for i in range(n):
        if len(pb[i]) != len(ps[i]) or pb[i].shape[1:] != (4,) or gb[i].shape[1:] != (4,) or ib[i].shape[1:] != (4,):
            raise ValueError(f"image {i}: need (n, 4) boxes and (n,) scores")
    pred_image = np.repeat(np.arange(n), [len(b) for b in pb])
    gt_image = np.repeat(np.arange(n), [len(b) for b in gb])
    ig_image = np.repeat(np.arange(n), [len(b) for b in ib])
    P = np.concatenate(pb) if n else np.zeros((0, 4))
    G = np.concatenate(gb) if n else np.zeros((0, 4))
    Ig = np.concatenate(ib) if n else np.zeros((0, 4))
    S = np.concatenate(ps) if n else np.zeros(0, np.float32)
    GI = np.concatenate([G, Ig])  # GT boxes, then the ignore regions (crowd, ignored)
    crowd = np.r_[np.zeros(len(G), bool), np.ones(len(Ig), bool)]
    det_gt, det_iou = greedy_match(pred_image, S, P, box_area(P), np.r_[gt_image, ig_image], GI, box_area(GI),
                                   (iou_threshold,), gt_crowd=crowd, gt_ignore=crowd)
    ignored = det_gt[0] >= len(G)
    pred_gt = np.where(ignored, -1, det_gt[0])
    pred_iou = np.where(ignored, 0.0, det_iou[0])
    gt_pred = np.full(len(G), -1, np.int64)
    hit = pred_gt >= 0
    gt_pred[pred_gt[hit]] = np.flatnonzero(hit)
    return BatchMatch(pred_image, P, S, pred_gt, pred_iou, gt_image, G, gt_pred, n, float(iou_threshold), ignored)
