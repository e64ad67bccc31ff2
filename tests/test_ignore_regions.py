"""Ignore regions follow the COCO protocol (pycocotools ``iscrowd=1``): the shared matcher,
the counts at the frozen threshold, the threshold itself, the bootstrap's AP50 fast path,
mAP, the COCO GT export and ``evaluate`` on a built repo."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import polars as pl
import pytest

from _evalkit import write_submission
from _metakit import CONDITION, IGNORE_BOX, ON_IGNORE, SOURCE, gt_detections, has_ignore, meta_repo
from aegisbench.evaluation.bootstrap import Resamples, ap50_samples, condition_intervals
from aegisbench.evaluation.coco import coco_map, map_from_arrays
from aegisbench.dataset.index import DatasetIndex, coco_gt, export_coco
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.matching import match_images
from aegisbench.evaluation.threshold import f1_curve, freeze_threshold
from aegisbench.hashing import rng_for
from aegisbench.stats import multiplicities, resample_indices

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

NONE = np.zeros((0, 4))


def one(pred, score, gt=NONE, ignore=NONE):
    return match_images([np.array(pred, float).reshape(-1, 4)], [np.array(score, float)],
                        [np.array(gt, float).reshape(-1, 4)], ignore_xyxy=[np.array(ignore, float).reshape(-1, 4)])


# ------------------------------------------------------------------ hand cases


def test_detection_on_an_ignore_region_is_neither_tp_nor_fp():
    m = one([[0, 0, 10, 10], [60, 60, 70, 70], [120, 0, 130, 10]], [0.9, 0.8, 0.7],
            gt=[[0, 0, 10, 10]], ignore=[[50, 50, 100, 100]])
    assert m.tp.tolist() == [True, False, False]
    assert m.ignored.tolist() == [False, True, False] and m.fp.tolist() == [False, False, True]
    assert m.counts(0.0).tolist() == [[1, 1, 0]]  # the ignored one is not an FP; the last one is
    assert m.counts(0.75).tolist() == [[1, 0, 0]]
    assert m.pred_gt.tolist() == [0, -1, -1] and m.gt_pred.tolist() == [0]


def test_crowd_iou_is_intersection_over_detection_area():
    big = [[0, 0, 100, 100]]
    # inside: plain IoU 0.01, crowd IoU 1; half inside: 0.5 (inclusive); a quarter inside: 0.25
    m = one([[10, 10, 20, 20], [90, 0, 110, 10], [95, 0, 115, 10]], [0.9, 0.8, 0.7], ignore=big)
    assert m.ignored.tolist() == [True, True, False]
    assert m.counts(0.0).tolist() == [[0, 1, 0]]


def test_one_region_absorbs_many_detections_and_is_never_ground_truth():
    m = one([[10 * i, 0, 10 * i + 10, 10] for i in range(5)], [0.9] * 5, ignore=[[0, 0, 50, 10]])
    assert m.ignored.all() and m.counts(0.0).tolist() == [[0, 0, 0]]
    assert m.n_gt().tolist() == [0]  # no FN from an ignore region without detections either
    assert one(NONE, [], ignore=[[0, 0, 50, 10]]).counts(0.0).tolist() == [[0, 0, 0]]


def test_ground_truth_wins_over_an_ignore_region_and_a_duplicate_falls_to_it():
    # the GT box lies inside the ignore region: the first detection takes the GT box; the
    # duplicate cannot, and lands on the region instead of being a false positive
    m = one([[10, 10, 20, 20], [10, 10, 20, 20], [11, 10, 21, 20]], [0.9, 0.8, 0.7],
            gt=[[10, 10, 20, 20]], ignore=[[0, 0, 50, 50]])
    assert m.tp.tolist() == [True, False, False] and m.ignored.tolist() == [False, True, True]
    assert m.counts(0.0).tolist() == [[1, 0, 0]]
    without = one([[10, 10, 20, 20], [10, 10, 20, 20], [11, 10, 21, 20]], [0.9, 0.8, 0.7], gt=[[10, 10, 20, 20]])
    assert without.counts(0.0).tolist() == [[1, 2, 0]]


def test_frozen_threshold_and_f1_curve_leave_ignored_detections_out():
    # the highest score sits on an ignore region: it must not cost precision
    m = one([[60, 60, 70, 70], [0, 0, 10, 10]], [0.9, 0.5], gt=[[0, 0, 10, 10]], ignore=[[50, 50, 100, 100]])
    assert freeze_threshold(m) == (0.5, 1.0)
    curve = f1_curve(m, [0.5, 0.9])
    assert curve["fp"].tolist() == [0, 0] and curve["tp"].tolist() == [1, 0]
    plain = one([[60, 60, 70, 70], [0, 0, 10, 10]], [0.9, 0.5], gt=[[0, 0, 10, 10]])
    assert freeze_threshold(plain)[1] == pytest.approx(2 / 3)


def test_precision_interval_and_ap_ignore_the_region():
    box, reg = np.array([[0, 0, 10, 10.0]]), np.array([[50, 50, 100, 100.0]])
    preds = [np.array([[60, 60, 70, 70], [0, 0, 10, 10.0]])] * 6
    scores = [np.array([0.9, 0.5])] * 6
    m = match_images(preds, scores, [box] * 6, ignore_xyxy=[reg] * 6)
    ci = condition_intervals(m, 0.5, ("ignore", "precision"))
    assert ci["precision"] == (1.0, 1.0) and ci["map50"] == pytest.approx((1.0, 1.0))
    assert map_from_arrays(preds, scores, [box] * 6, ignore_xyxy=[reg] * 6)["map50"] == pytest.approx(1.0)
    assert map_from_arrays(preds, scores, [box] * 6)["map50"] == pytest.approx(0.5)
    with pytest.raises(ValueError):
        match_images(preds, scores, [box] * 6, ignore_xyxy=[reg])
    with pytest.raises(ValueError):
        map_from_arrays(preds, scores, [box] * 6, ignore_xyxy=[reg])


# ------------------------------------------------------ against pycocotools


def crowd_workload(key, n_img=30, ties=True):
    """Integer xywh boxes: GT, ignore regions (some holding GT boxes) and detections on both."""
    rng = rng_for("test", "ignore-regions", *key)
    gts, igs, preds, scores = [], [], [], []
    for _ in range(n_img):
        g = [[*rng.integers(0, 150, 2), *rng.integers(4, 40, 2)] for _ in range(int(rng.integers(0, 5)))]
        ig = [[*rng.integers(0, 120, 2), *rng.integers(20, 80, 2)] for _ in range(int(rng.integers(0, 3)))]
        if ig and rng.random() < 0.5:  # a GT box inside an ignore region
            x, y, w, h = ig[0]
            g.append([x + 2, y + 2, max(w // 2, 3), max(h // 2, 3)])
        d = []
        for b in g + ig:
            for _ in range(int(rng.integers(0, 3))):
                x, y, w, h = b
                dx, dy = rng.integers(-3, 4, 2)
                dw, dh = rng.integers(-w // 2, 2), rng.integers(-h // 2, 2)
                d.append([x + dx, y + dy, max(w + dw, 2), max(h + dh, 2)])
        d += [[*rng.integers(0, 150, 2), *rng.integers(5, 30, 2)] for _ in range(int(rng.integers(0, 3)))]
        s = rng.integers(0, 10, len(d)) / 10 if ties else rng.random(len(d)).astype(np.float32).astype(float)
        gts.append(np.array(g, float).reshape(-1, 4))
        igs.append(np.array(ig, float).reshape(-1, 4))
        preds.append(np.array(d, float).reshape(-1, 4))
        scores.append(np.asarray(s, float))
    return gts, igs, preds, scores


def xyxy(b):
    return np.c_[b[:, :2], b[:, :2] + b[:, 2:]]


def pycoco(tmp_path, gts, igs, preds, scores):
    """COCOeval on the workload (GT ids: every GT box, then every ignore region, from 1)."""
    images = [{"id": i + 1, "file_name": f"{i}.png"} for i in range(len(gts))]
    anns, res = [], []
    for crowd, boxes in ((0, gts), (1, igs)):
        for i, bs in enumerate(boxes):
            for b in bs.tolist():
                anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": 1, "bbox": b,
                             "area": b[2] * b[3], "iscrowd": crowd})
    for i, (bs, ss) in enumerate(zip(preds, scores)):
        res += [{"image_id": i + 1, "category_id": 1, "bbox": b, "score": s} for b, s in zip(bs.tolist(), ss.tolist())]
    g, r = tmp_path / "gt.json", tmp_path / "res.json"
    g.write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "person"}]}))
    r.write_text(json.dumps(res))
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(g))
        ev = COCOeval(gt, gt.loadRes(str(r)), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev, g, r


@pytest.mark.parametrize("ties", [True, False])
def test_matches_and_map_equal_pycocotools_with_crowd_boxes(tmp_path, ties):
    for rep in range(4):
        gts, igs, preds, scores = crowd_workload((rep, ties), ties=ties)
        assert sum(len(i) for i in igs) > 5 and sum(len(p) for p in preds) > 40
        ev, g, r = pycoco(tmp_path, gts, igs, preds, scores)
        m = match_images([xyxy(p) for p in preds], scores, [xyxy(b) for b in gts], ignore_xyxy=[xyxy(b) for b in igs])
        n_gt = sum(len(b) for b in gts)
        # per detection at IoU 0.5: pycocotools' match (GT id) and ignore flag
        want_gt, want_ig = np.full(len(m.score), -1), np.zeros(len(m.score), bool)
        for e in ev.evalImgs[:len(gts)]:  # area "all", image by image
            if e is None:
                continue
            for dt_id, gt_id, ig in zip(e["dtIds"], e["dtMatches"][0], e["dtIgnore"][0]):
                want_ig[dt_id - 1] = bool(ig)
                want_gt[dt_id - 1] = int(gt_id) - 1 if gt_id and not ig else -1
        assert want_ig.any() and (want_gt >= 0).any()
        assert m.pred_gt.tolist() == want_gt.tolist() and m.ignored.tolist() == want_ig.tolist()
        assert (m.pred_gt < n_gt).all()
        for thr in (0.0, 0.35, 0.75):
            kept = m.score >= np.float32(thr)
            assert m.counts(thr).sum(axis=0).tolist() == [
                int((kept & (want_gt >= 0)).sum()), int((kept & (want_gt < 0) & ~want_ig).sum()),
                n_gt - int((kept & (want_gt >= 0)).sum())]
        ours = map_from_arrays([xyxy(p) for p in preds], scores, [xyxy(b) for b in gts], max_dets=100,
                               ignore_xyxy=[xyxy(b) for b in igs])
        for k, i in (("map50_95", 0), ("map50", 1), ("map75", 2), ("mar", 8)):
            assert ours[k] == pytest.approx(ev.stats[i], rel=1e-12, abs=1e-15), k
        assert coco_map(g, r)["map50"] == pytest.approx(ev.stats[1], rel=1e-12, abs=1e-15)
        ap = ap50_samples(m, np.ones((1, len(gts))))[0]  # the bootstrap's fast path, identity resample
        assert ap == pytest.approx(ev.stats[1], rel=1e-6)


def test_bootstrap_ap50_equals_materialised_resamples_with_ignore_regions():
    gts, igs, preds, scores = crowd_workload(("boot",), n_img=20, ties=False)  # as test_bootstrap: no ties
    P, G, I = [xyxy(p) for p in preds], [xyxy(b) for b in gts], [xyxy(b) for b in igs]
    m = match_images(P, scores, G, ignore_xyxy=I)
    idx = resample_indices(len(G), ("ignore-boot",), 6)
    got = ap50_samples(m, multiplicities(idx, len(G)))
    for b in range(6):
        o = np.sort(idx[b])
        ref = map_from_arrays([P[i] for i in o], [scores[i] for i in o], [G[i] for i in o],
                              ignore_xyxy=[I[i] for i in o])["map50"]
        assert got[b] == pytest.approx(ref, rel=1e-6)
    res = Resamples.draw(len(G), ("ignore-boot",), 200)
    ci = condition_intervals(m, 0.5, resamples=res)
    kept = m.score >= np.float32(0.5)
    assert ci["precision"][0] <= (kept & m.tp).sum() / (kept & ~m.ignored).sum() <= ci["precision"][1]


# --------------------------------------------------------- a built repo


@pytest.fixture(scope="module")
def meta_index(tmp_path_factory):
    return DatasetIndex(meta_repo(tmp_path_factory))


def test_coco_export_carries_ignore_regions_as_crowd(meta_index, tmp_path):
    doc = coco_gt(meta_index, "clean", {SOURCE})
    crowd = [a for a in doc["annotations"] if a["iscrowd"] == 1]
    g = meta_index.gt("clean", SOURCE)
    assert len(crowd) == sum(has_ignore(i) for i in range(len(g))) > 0
    x1, y1, x2, y2 = IGNORE_BOX
    assert all(a["bbox"] == [x1, y1, x2 - x1, y2 - y1] and a["area"] == (x2 - x1) * (y2 - y1) for a in crowd)
    assert len(doc["annotations"]) - len(crowd) == int(g.n_gt().sum())
    written = export_coco(meta_index, tmp_path / "coco")
    full = json.loads((tmp_path / "coco" / "clean.json").read_text())
    assert tmp_path / "coco" / "clean.json" in written and sum(a["iscrowd"] for a in full["annotations"]) > len(crowd)


def test_evaluate_does_not_count_detections_on_ignore_regions(meta_index, tmp_path):
    sub = write_submission(tmp_path / "sub", meta_index, "sar", gt_detections(meta_index), name="on ignore")
    out = evaluate_submission(sub, meta_index.repo, tmp_path / "results",
                              EvaluationParams(bootstrap=BootstrapParams(n_resamples=100)), verify=False)
    df = pl.read_parquet(out / "metrics.parquet").filter(pl.col("stratum").is_null())
    cell = {(r["config"], r["metric"]): r for r in df.iter_rows(named=True)}
    for config in ("clean", CONDITION):
        assert cell[(config, "fp")]["value"] == 0, config
        assert (cell[(config, "precision")]["value"], cell[(config, "precision")]["lo"]) == (1.0, 1.0)
        assert cell[(config, "recall")]["value"] == 1.0
        assert cell[(config, "map50")]["value"] == pytest.approx(1.0)
    assert cell[("clean", "val_precision")]["value"] == 1.0 and cell[("clean", "frozen_threshold")]["value"] == 0.9
    per_image = pl.read_parquet(out / "per_image.parquet")
    assert per_image["fp"].sum() == 0 and (per_image["n_pred"] > per_image["tp"]).any()
    # pycocotools on the exported GT (crowd = ignore regions) agrees with the map50 row
    export_coco(meta_index, tmp_path / "coco")
    gt_doc = json.loads((tmp_path / "coco" / "clean" / f"{SOURCE}.json").read_text())
    ids = {im["file_name"][:-4]: im["id"] for im in gt_doc["images"]}
    res = []
    for (config, split, image_id), d in gt_detections(meta_index).items():
        if config == "clean" and split == SOURCE:
            res += [{"image_id": ids[image_id], "category_id": 1, "score": float(s),
                     "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]]} for b, s in zip(d.xyxy.tolist(), d.score)]
    assert any(r["bbox"][:2] == ON_IGNORE[:2] for r in res)
    (tmp_path / "res.json").write_text(json.dumps(res))
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(tmp_path / "coco" / "clean" / f"{SOURCE}.json"))
        ev = COCOeval(coco, coco.loadRes(str(tmp_path / "res.json")), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    assert cell[("clean", "map50")]["value"] == pytest.approx(ev.stats[1], rel=1e-9)
    assert cell[("clean", "map50_95")]["value"] == pytest.approx(ev.stats[0], rel=1e-9)
