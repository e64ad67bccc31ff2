"""coco_map / map_from_arrays against pycocotools COCOeval on many random workloads."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from aegisbench.errors import BadInput
from aegisbench.evaluation.coco import coco_map, map_from_arrays
from aegisbench.hashing import rng_for

pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402


def pycoco_stats(gt_path, res_path):
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        ev = COCOeval(gt, gt.loadRes(str(res_path)), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"map50_95": ev.stats[0], "map50": ev.stats[1], "map75": ev.stats[2], "mar": ev.stats[8]}


def workload(key, *, n_img=12, n_cat=3, crowd=0.0, ties=False, zero_id=False, odd_area=0.0,
             many=False, integer=False):
    rng = rng_for("test", "coco", *key)
    images = [{"id": int(i), "file_name": f"{i}.jpg"} for i in rng.permutation(np.arange(1, n_img + 1) * 3)]
    cats = [{"id": int(c), "name": f"c{c}"} for c in rng.permutation(np.arange(1, n_cat + 1) * 5)]
    anns, res = [], []
    for im in images:
        if rng.random() < 0.15:  # image without anything
            continue
        for _ in range(int(rng.integers(0, 6))):
            x, y = rng.uniform(0, 150, 2)
            w, h = rng.uniform(2, 60, 2)
            if integer or rng.random() < 0.3:
                x, y, w, h = np.round([x, y, w, h]) + [0, 0, 1, 1]
            c = cats[int(rng.integers(n_cat))]["id"]
            area = float(w * h)
            if rng.random() < odd_area:
                area = float(rng.choice([w * h / 2, -1.0, 2e10]))
            anns.append({"id": len(anns) + (0 if zero_id else 1), "image_id": im["id"], "category_id": c,
                         "bbox": [float(x), float(y), float(w), float(h)], "area": area,
                         "iscrowd": int(rng.random() < crowd)})
            for _ in range(int(rng.integers(0, 4 if not many else 60))):
                j = rng.normal(0, rng.choice([0.5, 3.0, 10.0]), 4)
                if integer:
                    j = np.round(j)
                cc = c if rng.random() > 0.2 else cats[int(rng.integers(n_cat))]["id"]
                res.append({"image_id": im["id"], "category_id": cc,
                            "bbox": [float(x + j[0]), float(y + j[1]),
                                     float(max(w + j[2], 1)), float(max(h + j[3], 1))],
                            "score": float(rng.integers(0, 10) / 10 if ties else rng.random())})
        for _ in range(int(rng.integers(0, 4))):
            x, y = rng.uniform(0, 150, 2).round() if integer else rng.uniform(0, 150, 2)
            res.append({"image_id": im["id"], "category_id": cats[int(rng.integers(n_cat))]["id"],
                        "bbox": [float(x), float(y), 20.0, 30.0],
                        "score": float(rng.integers(0, 10) / 10 if ties else rng.random())})
    if rng.random() < 0.5 and res:  # a detection of a category unknown to the GT is ignored
        res.append({**res[0], "category_id": 999})
    res = [res[i] for i in rng.permutation(len(res))]
    return {"images": images, "categories": cats, "annotations": anns}, res


def write(tmp_path, gt, res):
    g, r = tmp_path / "gt.json", tmp_path / "res.json"
    g.write_text(json.dumps(gt))
    r.write_text(json.dumps(res))
    return g, r


CASES = [dict(), dict(ties=True), dict(crowd=0.25), dict(crowd=0.25, ties=True), dict(zero_id=True, ties=True),
         dict(odd_area=0.15), dict(odd_area=0.1, crowd=0.2, ties=True), dict(n_cat=1, n_img=30)]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_equals_pycocotools_on_random_workloads(tmp_path, case):
    for rep in range(8):
        gt, res = workload((case, rep), **CASES[case])
        if not res:
            continue
        g, r = write(tmp_path, gt, res)
        ours, ref = coco_map(g, r), pycoco_stats(g, r)
        for k in ("map50", "map50_95", "map75", "mar"):
            assert ours[k] == ref[k], (case, rep, k, ours[k], ref[k])


def test_equals_pycocotools_when_max_dets_truncates(tmp_path):
    gt, res = workload(("many",), n_img=6, n_cat=2, many=True, ties=True)
    per = {}
    for d in res:
        per[(d["image_id"], d["category_id"])] = per.get((d["image_id"], d["category_id"]), 0) + 1
    assert max(per.values()) > 100
    g, r = write(tmp_path, gt, res)
    ours, ref = coco_map(g, r), pycoco_stats(g, r)
    assert (ours["map50"], ours["map50_95"]) == (ref["map50"], ref["map50_95"])


def test_hand_cases(tmp_path):
    images = [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}]
    cats = [{"id": 1, "name": "person"}]
    ann = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100, "iscrowd": 0}]
    gt = {"images": images, "categories": cats, "annotations": ann}
    perfect = [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9}]
    g, r = write(tmp_path, gt, perfect)
    # precision is tp / (tp + fp + eps) in pycocotools, so "perfect" is 1 - 1e-16
    assert coco_map(g, r)["map50"] == pytest.approx(1.0, abs=1e-12) == pycoco_stats(g, r)["map50"]
    assert coco_map(g, r)["map50_95"] == pycoco_stats(g, r)["map50_95"]
    missed = [{"image_id": 2, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.9}]
    g, r = write(tmp_path, gt, missed)
    assert coco_map(g, r)["map50"] == 0.0 == pycoco_stats(g, r)["map50"]
    # a duplicate below the true positive costs nothing at AP (precision envelope)
    dup = perfect + [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.5}]
    g, r = write(tmp_path, gt, dup)
    assert coco_map(g, r)["map50"] == pycoco_stats(g, r)["map50"] == pytest.approx(1.0, abs=1e-12)
    # only false positives and no GT at all: pycocotools' "-1" (no category to average)
    g, r = write(tmp_path, {"images": images, "categories": cats, "annotations": []}, missed)
    assert coco_map(g, r)["map50"] == -1.0 == pycoco_stats(g, r)["map50"]
    # empty results: AP 0 (pycocotools itself cannot load an empty list)
    g, r = write(tmp_path, gt, [])
    assert coco_map(g, r)["map50"] == 0.0


def test_bad_input_is_reported(tmp_path):
    gt = {"images": [{"id": 1, "file_name": "a.jpg"}], "categories": [{"id": 1, "name": "p"}], "annotations": []}
    g, r = write(tmp_path, gt, [{"image_id": 7, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}])
    with pytest.raises(BadInput, match=r"res\.json:row 0 field image_id: image_id not in GT images"):
        coco_map(g, r)
    g, r = write(tmp_path, gt, {"not": "a list"})
    with pytest.raises(BadInput, match="results must be a JSON list"):
        coco_map(g, r)
    g, r = write(tmp_path, gt, [{"image_id": 1, "category_id": 1, "bbox": [0, 0, 1], "score": 0.5}])
    with pytest.raises(BadInput, match=r"row 0 field bbox"):
        coco_map(g, r)
    dup = {**gt, "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "area": 1,
                                  "iscrowd": 0}] * 2}
    g, r = write(tmp_path, dup, [])
    with pytest.raises(BadInput, match="duplicate annotation ids"):
        coco_map(g, r)


def test_map_from_arrays_equals_pycocotools_single_class(tmp_path):
    for rep in range(6):
        gt, res = workload(("arrays", rep), n_cat=1, n_img=25, integer=True, ties=rep % 2 == 0)
        res = [d for d in res if d["category_id"] != 999]
        g, r = write(tmp_path, gt, res)
        ref = pycoco_stats(g, r)
        ids = sorted(im["id"] for im in gt["images"])
        xyxy = lambda b: [b[0], b[1], b[0] + b[2], b[1] + b[3]]  # noqa: E731
        gts = [np.array([xyxy(a["bbox"]) for a in gt["annotations"] if a["image_id"] == i]).reshape(-1, 4) for i in ids]
        preds = [np.array([xyxy(d["bbox"]) for d in res if d["image_id"] == i]).reshape(-1, 4) for i in ids]
        scores = [np.array([d["score"] for d in res if d["image_id"] == i]) for i in ids]
        # scores pass through float32, which keeps their order and their ties here
        ours = map_from_arrays(preds, scores, gts, max_dets=100)
        assert ours["map50"] == pytest.approx(ref["map50"], rel=1e-12, abs=1e-15)
        assert ours["map50_95"] == pytest.approx(ref["map50_95"], rel=1e-12, abs=1e-15)
        assert ours["mar"] == pytest.approx(ref["mar"], rel=1e-12, abs=1e-15)


def test_map_from_arrays_hand_cases_and_validation():
    box = np.array([[0, 0, 10, 10.0]])
    assert map_from_arrays([box], [[0.9]], [box])["map50"] == pytest.approx(1.0, abs=1e-12)
    assert map_from_arrays([np.zeros((0, 4))], [[]], [box])["map50"] == 0.0
    assert map_from_arrays([box], [[0.9]], [np.zeros((0, 4))])["map50"] == -1.0
    # a false positive ranked above the true positive halves precision at full recall
    two = np.array([[50, 50, 60, 60], [0, 0, 10, 10.0]])
    assert map_from_arrays([two], [[0.9, 0.8]], [box])["map50"] == pytest.approx(0.5, abs=1e-12)
    with pytest.raises(ValueError):
        map_from_arrays([box], [[0.9]], [])
    with pytest.raises(ValueError):
        map_from_arrays([box], [[0.9]], [box], max_dets=0)
