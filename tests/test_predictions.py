"""Detections validation, prediction readers (Parquet, COCO results, YOLO txt) and the writer."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aegisbench.errors import BadInput
from aegisbench.predictions import (Detections, PredictionTable, read_coco_results, read_parquet_predictions,
                                    read_yolo_txt, write_parquet_predictions)


def test_detections_validate_on_construction():
    d = Detections([[0, 0, 10, 10]], [0.5], ["person"])
    assert d.xyxy.dtype == np.float32 and d.score.dtype == np.float32 and d.label.tolist() == ["person"]
    with pytest.raises(ValueError):
        d.xyxy[0, 0] = 3  # read-only
    assert len(Detections.empty()) == 0 and Detections([], []).xyxy.shape == (0, 4)
    for args, exc, msg in [
        (([[0, 0, 10]], [0.5]), ValueError, r"shape \(n, 4\)"),
        (([[0, 0, 10, 10]], [0.5, 0.6]), ValueError, "score must have shape"),
        (([[0, 0, np.nan, 10]], [0.5]), ValueError, "finite"),
        (([[5, 0, 5, 10]], [0.5]), ValueError, "x2 > x1"),
        (([[0, 9, 5, 3]], [0.5]), ValueError, "y2 > y1"),
        (([[0, 0, 5, 5]], [1.5]), ValueError, r"\[0, 1\]"),
        (([[0, 0, 5, 5]], [-0.1]), ValueError, r"\[0, 1\]"),
        (([["a", 0, 5, 5]], [0.1]), TypeError, "numeric"),
    ]:
        with pytest.raises(exc, match=msg):
            Detections(*args)
    with pytest.raises(TypeError, match="labels must be str"):
        Detections([[0, 0, 5, 5]], [0.1], [3])
    with pytest.raises(ValueError, match="label must have shape"):
        Detections([[0, 0, 5, 5]], [0.1], ["a", "b"])
    # a box that is valid in float64 but collapses in float32 is rejected
    with pytest.raises(ValueError, match="x2 > x1"):
        Detections([[1000.00001, 0, 1000.00002, 5]], [0.1])


def test_above_and_table_access():
    d = Detections([[0, 0, 1, 1], [0, 0, 2, 2], [0, 0, 3, 3]], [0.2, 0.5, 0.7])
    assert d.above(0.5).score.tolist() == [0.5, pytest.approx(0.7)]
    t = PredictionTable({("clean", "sard_val", "img1"): d})
    assert len(t.get_detections("clean", "sard_val", "img1")) == 3
    assert len(t.get_detections("clean", "sard_val", "nothing")) == 0
    assert t.configs() == ["clean"] and t.n_boxes() == 3
    with pytest.raises(TypeError):
        PredictionTable({("clean", "sard"): d})


def test_parquet_round_trip_is_atomic_and_sorted(tmp_path):
    t = PredictionTable({
        ("low_light_s3", "sard", "b"): Detections([[1, 2, 3, 4]], [0.25]),
        ("clean", "sard_val", "a"): Detections([[0, 0, 10, 10], [5.5, 1, 9, 7]], [0.9, 0.1], ["person", "person"]),
    })
    path = tmp_path / "predictions.parquet"
    write_parquet_predictions(t, path)
    assert [p.name for p in tmp_path.iterdir()] == ["predictions.parquet"]
    back = read_parquet_predictions(path)
    assert sorted(back) == sorted(t)
    for k in t:
        assert np.array_equal(back[k].xyxy, t[k].xyxy) and np.array_equal(back[k].score, t[k].score)
    assert back[("clean", "sard_val", "a")].label.tolist() == ["person", "person"]
    assert back[("low_light_s3", "sard", "b")].label is None
    assert pq.read_table(path).column("config").to_pylist() == ["clean", "clean", "low_light_s3"]


def rows(**over):
    base = {"config": ["clean"] * 5, "split": ["sard_val"] * 5, "image_id": ["a", "a", "b", "c", "c"],
            "x1": [0.0, 1, 2, 3, 4], "y1": [0.0, 1, 2, 3, 4], "x2": [5.0, 6, 7, 8, 9], "y2": [5.0, 6, 7, 8, 9],
            "score": [0.1, 0.2, 0.3, 0.4, 0.5]}
    base.update(over)
    return base


@pytest.mark.parametrize("over, where, message", [
    ({"x2": [5.0, 6, 7, 2, 9]}, "row 3 field x2", "x2 must exceed x1"),
    ({"y2": [5.0, 6, 1, 8, 9]}, "row 2 field y2", "y2 must exceed y1"),
    ({"score": [0.1, 1.5, 0.3, 0.4, 0.5]}, "row 1 field score", "score outside [0, 1]"),
    ({"score": [0.1, 0.2, 0.3, 0.4, None]}, "row 4 field score", "null or not finite"),
    ({"x1": [0.0, 1, float("inf"), 3, 4]}, "row 2 field x1", "null or not finite"),
    ({"image_id": ["a", "", "b", "c", "c"]}, "row 1 field image_id", "empty or null"),
    ({"config": ["clean", "clean", None, "clean", "clean"]}, "row 2 field config", "empty or null"),
    # two problems: the lower row wins, and within a row the earlier field
    ({"x2": [5.0, 6, 7, 8, -1], "score": [0.1, 0.2, 0.3, 2.0, 0.5]}, "row 3 field score", "score outside [0, 1]"),
    ({"x1": [0.0, 1, 2, 3, 4], "x2": [5.0, 6, 7, 8, 9], "y2": [5.0, 0, 7, 8, 9], "score": [0.1, 9, 0.3, 0.4, 0.5]},
     "row 1 field y2", "y2 must exceed y1"),
])
def test_malformed_parquet_rows_name_file_row_field(tmp_path, over, where, message):
    path = tmp_path / "predictions.parquet"
    pq.write_table(pa.table(rows(**over)), path)
    with pytest.raises(BadInput) as err:
        read_parquet_predictions(path)
    assert str(err.value) == f"{path}:{where}: {message}"
    assert err.value.where == f"{path}:{where}"


def test_malformed_parquet_structure(tmp_path):
    path = tmp_path / "p.parquet"
    r = rows()
    del r["score"]
    pq.write_table(pa.table(r), path)
    with pytest.raises(BadInput, match=rf"^{path}: missing column 'score'$"):
        read_parquet_predictions(path)
    pq.write_table(pa.table(rows(x1=["0", "1", "2", "3", "4"])), path)
    with pytest.raises(BadInput, match=rf"^{path}:column x1: column has type string, expected float$"):
        read_parquet_predictions(path)
    pq.write_table(pa.table(rows(image_id=[1, 2, 3, 4, 5])), path)
    with pytest.raises(BadInput, match=rf"^{path}:column image_id: column has type int64, expected string$"):
        read_parquet_predictions(path)
    path.write_bytes(b"not parquet")
    with pytest.raises(BadInput, match=rf"^{path}: cannot read Parquet"):
        read_parquet_predictions(path)
    pq.write_table(pa.table(rows()), path)
    t = read_parquet_predictions(path)
    assert sorted(k[2] for k in t) == ["a", "b", "c"] and t.n_boxes() == 5


def coco_files(tmp_path, results):
    gt = {"images": [{"id": 10, "file_name": "frames/img_a.jpg"}, {"id": 11, "file_name": "img_b.png"}],
          "categories": [{"id": 1, "name": "person"}], "annotations": []}
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "res.json").write_text(json.dumps(results))
    return tmp_path / "res.json", tmp_path / "gt.json"


def test_coco_results_reader(tmp_path):
    res, gt = coco_files(tmp_path, [
        {"image_id": 11, "category_id": 1, "bbox": [10, 20, 30, 40], "score": 0.75},
        {"image_id": 10, "category_id": 1, "bbox": [0.5, 0, 1, 2], "score": 0.5},
        {"image_id": 11, "category_id": 1, "bbox": [1, 1, 1, 1], "score": 1},
    ])
    t = read_coco_results(res, gt, "clean", "sard_val")
    b = t[("clean", "sard_val", "img_b")]
    assert b.xyxy.tolist() == [[10, 20, 40, 60], [1, 1, 2, 2]] and b.score.tolist() == [0.75, 1.0]
    assert t[("clean", "sard_val", "img_a")].label.tolist() == ["person"]


BOX = {"image_id": 10, "category_id": 1}


@pytest.mark.parametrize("det, where, message", [
    ({**BOX, "image_id": 99, "bbox": [0, 0, 1, 1], "score": 0.5}, "row 1 field image_id",
     "image_id 99 not in GT images"),
    ({**BOX, "bbox": [0, 0, 0, 1], "score": 0.5}, "row 1 field bbox", "bbox needs w > 0 and h > 0"),
    ({**BOX, "bbox": [0, 0, 1], "score": 0.5}, "row 1 field bbox", "bbox must be 4 finite numbers [x, y, w, h]"),
    ({**BOX, "bbox": [0, 0, 1, 1]}, "row 1 field score", "score must be a number in [0, 1]"),
    ({**BOX, "bbox": [0, 0, 1, 1], "score": 1.01}, "row 1 field score", "score must be a number in [0, 1]"),
])
def test_malformed_coco_results(tmp_path, det, where, message):
    ok = {"image_id": 10, "category_id": 1, "bbox": [0, 0, 1, 1], "score": 0.5}
    res, gt = coco_files(tmp_path, [ok, det])
    with pytest.raises(BadInput) as err:
        read_coco_results(res, gt, "clean", "sard_val")
    assert str(err.value) == f"{res}:{where}: {message}"
    (tmp_path / "res.json").write_text('{"image_id": 10}')
    with pytest.raises(BadInput, match="JSON list"):
        read_coco_results(res, gt, "clean", "sard_val")


def test_yolo_txt_reader(tmp_path):
    (tmp_path / "img_a.txt").write_text("0 0.5 0.5 0.2 0.4 0.91\n3 0.25 0.75 0.1 0.1 0.05\n\n")
    (tmp_path / "img_b.txt").write_text("")
    t = read_yolo_txt(tmp_path, {"img_a": (640, 480), "img_b": (640, 480), "img_c": (10, 10)}, "clean", "sard",
                      class_names={0: "person"})
    a = t[("clean", "sard", "img_a")]
    np.testing.assert_allclose(a.xyxy, [[256, 144, 384, 336], [128, 336, 192, 384]], rtol=1e-6)
    assert a.score.tolist() == [pytest.approx(0.91), pytest.approx(0.05)] and a.label.tolist() == ["person", "3"]
    assert ("clean", "sard", "img_b") not in t and len(t.get_detections("clean", "sard", "img_c")) == 0


@pytest.mark.parametrize("line, where, message", [
    ("0 0.5 0.5 0.2 0.4", "line 2 field conf", "expected 6 fields 'cls cx cy w h conf', got 5"),
    ("0 0.5 abc 0.2 0.4 0.5", "line 2 field cy", "not a number: 'abc'"),
    ("0 0.5 0.5 0.0 0.4 0.5", "line 2 field w", "box has no width"),
    ("0 0.5 0.5 0.2 -0.4 0.5", "line 2 field h", "box has no height"),
    ("0 0.5 0.5 0.2 0.4 1.5", "line 2 field conf", "confidence outside [0, 1]"),
    ("1.5 0.5 0.5 0.2 0.4 0.5", "line 2 field cls", "class must be a non-negative integer"),
    ("0 nan 0.5 0.2 0.4 0.5", "line 2 field cx", "not finite"),
])
def test_malformed_yolo_txt(tmp_path, line, where, message):
    f = tmp_path / "img_a.txt"
    f.write_text("0 0.5 0.5 0.2 0.4 0.9\n" + line + "\n")
    with pytest.raises(BadInput) as err:
        read_yolo_txt(tmp_path, {"img_a": (100, 100)}, "clean", "sard")
    assert str(err.value) == f"{f}:{where}: {message}"


def test_yolo_txt_unknown_image_and_missing_folder(tmp_path):
    (tmp_path / "stray.txt").write_text("0 0.5 0.5 0.2 0.4 0.9\n")
    with pytest.raises(BadInput, match=r"stray\.txt: no image 'stray' in this split"):
        read_yolo_txt(tmp_path, {"img_a": (100, 100)}, "clean", "sard")
    with pytest.raises(BadInput, match="not a folder"):
        read_yolo_txt(tmp_path / "missing", {}, "clean", "sard")
