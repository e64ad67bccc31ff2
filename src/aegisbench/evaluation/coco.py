"""COCO-style mAP, bit-compatible with pycocotools ``COCOeval`` (bbox, area "all", maxDets 100).

What is reproduced, on purpose:

* images and categories are those listed in the GT, sorted by id; GT annotations of
  other images/categories and detections of unknown categories are ignored;
  detections of images not in the GT are an error (pycocotools asserts);
* GT boxes with ``iscrowd`` are ignored regions (IoU uses the detection area as the
  union and they absorb any number of detections); GT ``area`` outside [0, 1e10]
  is ignored too; an unmatched detection with ``w*h`` outside that range is ignored;
* detections per (image, category) are sorted by score with a stable sort and cut
  to ``max_dets``; across images the order is (-score, image id, file order);
* matching as :mod:`aegisbench.evaluation.matching` (the same engine) at the ten
  IoU thresholds ``np.linspace(.5, .95, 10)``; 101-point interpolated precision;
  categories without non-ignored GT are excluded from the mean (pycocotools' -1);
* pycocotools' quirk that a GT annotation with ``id == 0`` matches but never counts
  as a true positive is kept (a warning is logged).

Differences: an empty results list gives AP 0 (pycocotools raises); a GT annotation
without ``area`` uses ``w*h``; duplicate annotation ids are rejected (pycocotools
silently replaces them).

>>> import numpy as np
>>> r = map_from_arrays([np.array([[0, 0, 10, 10.]])], [np.array([0.9])], [np.array([[0, 0, 10, 10.]])])
>>> round(r["map50"], 12), round(r["map50_95"], 12)  # pycocotools divides by tp + fp + eps
(1.0, 1.0)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aegisbench.errors import BadInput
from aegisbench.evaluation.matching import greedy_match
from aegisbench.geometry import box_area

log = logging.getLogger(__name__)

IOU_THRESHOLDS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
RECALL_THRESHOLDS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
AREA_ALL = (0.0, 1e5**2)


def _summ(arr: np.ndarray) -> float:
    s = arr[arr > -1]
    return float(np.mean(s)) if s.size else -1.0


def evaluate_flat(*, det_img, det_cat, det_score, det_xyxy, det_area, det_order,
                  gt_img, gt_cat, gt_xyxy, gt_box_area, gt_area, gt_crowd, gt_nonzero_id=None,
                  n_images: int, n_cats: int, max_dets: int | None = 100,
                  iou_thresholds: np.ndarray = IOU_THRESHOLDS) -> dict:
    """COCO evaluation on flat arrays (image/category given as 0-based sorted positions).

    ``det_order`` is the file order of detections (tie-break after image); GT arrays
    must be in file order. IoU uses ``gt_box_area`` (``w*h``), the area range uses
    ``gt_area`` (the annotation's ``area`` field), as pycocotools does. Returns
    ``map50``, ``map75``, ``map50_95``, ``mar`` and ``precision`` (T, 101, K) as
    pycocotools' ``eval['precision'][..., 0, -1]``.
    """
    det_score = np.asarray(det_score, np.float64)
    if gt_nonzero_id is None:
        gt_nonzero_id = np.ones(len(gt_img), bool)
    group = np.asarray(det_img, np.int64) * n_cats + det_cat
    gt_group = np.asarray(gt_img, np.int64) * n_cats + gt_cat
    if max_dets is not None and len(det_score):
        det_img, det_cat, det_score, det_xyxy, det_area, det_order, group = _top_per_group(
            max_dets, det_img, det_cat, det_score, det_xyxy, det_area, det_order, group)
    lo, hi = AREA_ALL
    gt_ignore = np.asarray(gt_crowd, bool) | (gt_area < lo) | (gt_area > hi)
    det_gt, _ = greedy_match(group, det_score, det_xyxy, det_area, gt_group, gt_xyxy, gt_box_area,
                             iou_thresholds, gt_crowd=gt_crowd, gt_ignore=gt_ignore)
    tps, fps = _tp_fp(det_gt, det_area, gt_nonzero_id, gt_ignore, len(gt_img))
    npig = np.bincount(np.asarray(gt_cat, np.int64)[~gt_ignore], minlength=n_cats)
    precision, recall = _pr_tables(tps, fps, npig, n_cats, det_cat, det_img, det_score, det_order)
    t50 = np.where(0.5 == iou_thresholds)[0]
    t75 = np.where(0.75 == iou_thresholds)[0]
    return {
        "map50": _summ(precision[t50]),
        "map75": _summ(precision[t75]),
        "map50_95": _summ(precision),
        "mar": _summ(recall),
        "n_categories": int((npig > 0).sum()),
        "precision": precision,
    }


def _top_per_group(max_dets: int, det_img, det_cat, det_score: np.ndarray, det_xyxy, det_area, det_order,
                   group: np.ndarray) -> tuple:
    """The detection arrays cut to the ``max_dets`` best of each (image, category) group
    (by score, stable: ties in file order), in their input order."""
    nd = len(det_score)
    o = np.lexsort((det_order, -det_score, group))
    g = group[o]
    first = np.concatenate(([True], g[1:] != g[:-1]))
    rank = np.arange(nd) - np.maximum.accumulate(np.where(first, np.arange(nd), 0))
    keep = np.zeros(nd, bool)
    keep[o[rank < max_dets]] = True
    sel = np.flatnonzero(keep)
    return tuple(np.asarray(a)[sel] for a in (det_img, det_cat, det_score, det_xyxy, det_area, det_order, group))


def _tp_fp(det_gt: np.ndarray, det_area, gt_nonzero_id: np.ndarray, gt_ignore: np.ndarray, n_gt: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """(T, n_det) true / false positive flags; detections matched to an ignored GT box, and
    unmatched ones outside the area range, are neither."""
    lo, hi = AREA_ALL
    matched = det_gt >= 0
    m = np.where(matched, det_gt, 0)
    dtm = matched & gt_nonzero_id[m] if n_gt else matched
    dt_ig = (matched & gt_ignore[m]) if n_gt else np.zeros_like(matched)
    dt_ig |= ~dtm & ((det_area < lo) | (det_area > hi))[None, :]
    return dtm & ~dt_ig, ~dtm & ~dt_ig


def _pr_tables(tps: np.ndarray, fps: np.ndarray, npig: np.ndarray, n_cats: int, det_cat, det_img,
               det_score: np.ndarray, det_order) -> tuple[np.ndarray, np.ndarray]:
    """pycocotools' ``precision`` (T, 101, K), 101-point interpolated, and ``recall`` (T, K);
    -1 for categories without non-ignored GT. Detections of a category are ranked by
    (-score, image, file order)."""
    T, R = len(tps), len(RECALL_THRESHOLDS)
    precision = -np.ones((T, R, n_cats))
    recall = -np.ones((T, n_cats))
    order = np.lexsort((det_order, det_img, -det_score, det_cat))
    cats_sorted = np.asarray(det_cat, np.int64)[order]
    bounds = np.searchsorted(cats_sorted, np.arange(n_cats + 1))
    for k in np.flatnonzero(npig):
        idx = order[bounds[k]:bounds[k + 1]]
        nk = len(idx)
        if nk == 0:
            precision[:, :, k] = 0.0
            recall[:, k] = 0.0
            continue
        tp = np.cumsum(tps[:, idx], axis=1).astype(float)
        fp = np.cumsum(fps[:, idx], axis=1).astype(float)
        rc = tp / npig[k]
        pr = tp / (fp + tp + np.spacing(1))
        env = np.maximum.accumulate(pr[:, ::-1], axis=1)[:, ::-1]
        recall[:, k] = rc[:, -1]
        for t in range(T):
            inds = np.searchsorted(rc[t], RECALL_THRESHOLDS, side="left")
            ok = inds < nk
            precision[t, :, k] = np.where(ok, env[t, np.minimum(inds, nk - 1)], 0.0)
    return precision, recall


def _load(path: Path):
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"cannot read JSON: {exc}", where=str(path)) from None


def _bbox_arrays(rows: list, where: str, field: str = "bbox") -> np.ndarray:
    try:
        bb = np.array([r[field] for r in rows], dtype=np.float64).reshape(len(rows), 4)
    except (KeyError, TypeError, ValueError):
        for i, r in enumerate(rows):
            v = r.get(field) if isinstance(r, dict) else None
            if not (isinstance(v, list) and len(v) == 4 and all(isinstance(x, (int, float)) for x in v)):
                raise BadInput("bbox must be 4 numbers [x, y, w, h]", where=f"{where}:row {i} field {field}") from None
        raise
    return bb


def _xywh_to_xyxy(bb: np.ndarray) -> np.ndarray:
    # pycocotools' C code computes x + w and y + h; keep that operation order
    return np.stack([bb[:, 0], bb[:, 1], bb[:, 2] + bb[:, 0], bb[:, 3] + bb[:, 1]], axis=1)


def coco_map(gt_json_path: str | Path, results_json_path: str | Path, *, max_dets: int = 100) -> dict:
    """mAP of a COCO results file against a COCO GT file, equal to pycocotools COCOeval.

    Returns ``map50``, ``map50_95``, ``map75``, ``mar`` (AR@max_dets) as floats
    (-1.0 when no category has GT) and ``n_categories``.
    """
    gt_path, res_path = Path(gt_json_path), Path(results_json_path)
    gt = _load(gt_path)
    if not isinstance(gt, dict) or not isinstance(gt.get("images"), list):
        raise BadInput("GT JSON needs an 'images' list", where=str(gt_path))
    try:
        img_ids = sorted({im["id"] for im in gt["images"]})
        cat_ids = sorted({c["id"] for c in gt.get("categories", [])})
    except (KeyError, TypeError) as exc:
        raise BadInput(f"images/categories need sortable 'id' values ({exc})", where=str(gt_path)) from None
    img_pos = {v: i for i, v in enumerate(img_ids)}
    cat_pos = {v: i for i, v in enumerate(cat_ids)}
    anns = gt.get("annotations", [])
    ids = [a.get("id") for a in anns]
    if len(set(ids)) != len(ids):
        raise BadInput("duplicate annotation ids", where=f"{gt_path}:annotations")
    anns = [a for a in anns if a.get("image_id") in img_pos and a.get("category_id") in cat_pos]
    g_box = _bbox_arrays(anns, f"{gt_path}:annotations")
    g_area = np.array([a["area"] if "area" in a else b[2] * b[3] for a, b in zip(anns, g_box.tolist())], np.float64)
    g_nonzero = np.array([a["id"] != 0 for a in anns], bool)
    if not g_nonzero.all():
        log.warning("%s: GT annotation id 0 never counts as a true positive (pycocotools quirk)", gt_path)
    res = _load(res_path)
    if not isinstance(res, list):
        raise BadInput("results must be a JSON list", where=str(res_path))
    for i, r in enumerate(res):
        if not isinstance(r, dict) or r.get("image_id") not in img_pos:
            raise BadInput("image_id not in GT images", where=f"{res_path}:row {i} field image_id")
        if not isinstance(r.get("score"), (int, float)):
            raise BadInput("score must be a number", where=f"{res_path}:row {i} field score")
    d_order = np.array([i for i, r in enumerate(res) if r.get("category_id") in cat_pos], np.int64)
    dets = [res[i] for i in d_order]
    d_box = _bbox_arrays(dets, str(res_path))
    out = evaluate_flat(
        det_img=np.array([img_pos[d["image_id"]] for d in dets], np.int64),
        det_cat=np.array([cat_pos[d["category_id"]] for d in dets], np.int64),
        det_score=np.array([d["score"] for d in dets], np.float64),
        det_xyxy=_xywh_to_xyxy(d_box), det_area=d_box[:, 2] * d_box[:, 3], det_order=d_order,
        gt_img=np.array([img_pos[a["image_id"]] for a in anns], np.int64),
        gt_cat=np.array([cat_pos[a["category_id"]] for a in anns], np.int64),
        gt_xyxy=_xywh_to_xyxy(g_box), gt_box_area=g_box[:, 2] * g_box[:, 3], gt_area=g_area,
        gt_crowd=np.array([bool(a.get("iscrowd", 0)) for a in anns], bool), gt_nonzero_id=g_nonzero,
        n_images=len(img_ids), n_cats=len(cat_ids), max_dets=max_dets)
    out.pop("precision")
    return out


def map_from_arrays(pred_xyxy: Sequence, pred_score: Sequence, gt_xyxy: Sequence, *,
                    max_dets: int | None = None, return_precision: bool = False,
                    ignore_xyxy: Sequence | None = None) -> dict:
    """Class-agnostic COCO mAP on in-memory xyxy boxes (one entry per image).

    Same rules as :func:`coco_map` with one category, areas ``(x2-x1)*(y2-y1)``, the
    ignore regions ``ignore_xyxy`` (per image) as ``iscrowd=1`` GT after the image's GT
    boxes, and no per-image truncation unless ``max_dets`` is given.
    """
    n = len(gt_xyxy)
    if not len(pred_xyxy) == len(pred_score) == n:
        raise ValueError("pred_xyxy, pred_score and gt_xyxy need one entry per image")
    if ignore_xyxy is not None:
        if len(ignore_xyxy) != n:
            raise ValueError("ignore_xyxy needs one entry per image")
        ig = [np.asarray(b, np.float64).reshape(-1, 4) for b in ignore_xyxy]
        gt_xyxy = [np.concatenate([np.asarray(g, np.float64).reshape(-1, 4), b]) for g, b in zip(gt_xyxy, ig)]
        crowd = np.concatenate([np.r_[np.zeros(len(g) - len(b), bool), np.ones(len(b), bool)]
                                for g, b in zip(gt_xyxy, ig)]) if n else np.zeros(0, bool)
    if max_dets is not None and max_dets < 1:
        raise ValueError("max_dets must be >= 1 or None")
    pb = [np.asarray(b, np.float64).reshape(-1, 4) for b in pred_xyxy]
    gb = [np.asarray(b, np.float64).reshape(-1, 4) for b in gt_xyxy]
    ps = [np.asarray(s, np.float32).astype(np.float64).reshape(-1) for s in pred_score]
    P = np.concatenate(pb) if n else np.zeros((0, 4))
    G = np.concatenate(gb) if n else np.zeros((0, 4))
    det_img = np.repeat(np.arange(n), [len(b) for b in pb])
    out = evaluate_flat(
        det_img=det_img, det_cat=np.zeros(len(P), np.int64),
        det_score=np.concatenate(ps) if n else np.zeros(0), det_xyxy=P, det_area=box_area(P),
        det_order=np.arange(len(P)), gt_img=np.repeat(np.arange(n), [len(b) for b in gb]),
        gt_cat=np.zeros(len(G), np.int64), gt_xyxy=G, gt_box_area=box_area(G), gt_area=box_area(G),
        gt_crowd=np.zeros(len(G), bool) if ignore_xyxy is None else crowd,
        n_images=n, n_cats=1, max_dets=max_dets)
    if not return_precision:
        out.pop("precision")
    return out
