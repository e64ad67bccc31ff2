"""``aegisbench validate``: a corpus of malformed submissions, each with its exact
error (file, row, field), every problem collected, the three prediction forms,
and nothing from a submission ever unpickled."""

from __future__ import annotations

import json
import math
import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, meta, rewrite_rows, rows_of, write_submission, write_yolo_predictions
from aegisbench.cli import main
from aegisbench.dataset.index import export_coco
from aegisbench.evaluation.submission import SubmissionInvalid, ValidationLimits, validate_submission


@pytest.fixture
def good(tmp_path, index):
    return write_submission(tmp_path / "good", index, "sar", gt_table(index, "sar"))


def problems_of(folder: Path, index, limits=ValidationLimits()) -> list[str]:
    with pytest.raises(SubmissionInvalid) as info:
        validate_submission(folder, index, limits)
    return [str(p).replace(f"{folder}/", "") for p in info.value.problems]


def test_gt_submission_is_valid(good, index):
    sub = validate_submission(good, index)
    assert sub.id == "good" and sub.form == "parquet" and sub.meta.track == "sar"
    n_boxes = sum(len(b) for c, s in index.keys("sar") for b in index.gt(c, s).boxes)
    assert sub.predictions.n_boxes() == n_boxes
    assert set(sub.files) == {"predictions.parquet", "submission.yaml"}


def _set(row: int, field: str, value):
    def mutate(rows):
        rows[row][field] = value
    return mutate


ROW_CASES = {
    "nan_x1": (_set(0, "x1", math.nan), "predictions.parquet:row 0 field x1: null or not finite"),
    "null_y1": (_set(1, "y1", None), "predictions.parquet:row 1 field y1: null or not finite"),
    "inf_score": (_set(1, "score", math.inf), "predictions.parquet:row 1 field score: null or not finite"),
    "x2_equals_x1": (lambda r: r[2].update(x2=r[2]["x1"]), "predictions.parquet:row 2 field x2: x2 must exceed x1"),
    "y2_below_y1": (lambda r: r[3].update(y2=r[3]["y1"] - 1), "predictions.parquet:row 3 field y2: y2 must exceed y1"),
    "right_of_frame": (_set(0, "x2", 700.0),
                       "predictions.parquet:row 0 field x2: box outside the frame (x2=700 > frame width + 2 px)"),
    "above_frame": (_set(1, "y1", -10.0), "predictions.parquet:row 1 field y1: box outside the frame (y1=-10 < -2 px)"),
    "score_above_1": (_set(4, "score", 1.5), "predictions.parquet:row 4 field score: score 1.5 outside [0, 1]"),
    "score_negative": (_set(4, "score", -0.25), "predictions.parquet:row 4 field score: score -0.25 outside [0, 1]"),
    "unknown_config": (_set(0, "config", "fog_s9"), "predictions.parquet:row 0 field config: unknown config 'fog_s9'"),
    "unknown_split": (_set(0, "split", "heridal"),
                      "predictions.parquet:row 0 field split: config 'clean' has no split 'heridal'"),
    "other_track": (_set(0, "split", "synthetic_smoke"), "predictions.parquet:row 0 field split: split "
                    "'synthetic_smoke' belongs to track 'smoke', not 'sar'"),
    "unknown_image": (_set(0, "image_id", "ghost"), "predictions.parquet:row 0 field image_id: image 'ghost' is not "
                      "in config 'clean' split 'synthetic_sar'"),
    "empty_image_id": (_set(0, "image_id", ""), "predictions.parquet:row 0 field image_id: empty or null"),
}


@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_malformed_row_is_reported_with_file_row_field(case, good, index):
    mutate, expected = ROW_CASES[case]
    rows = rows_of(good)
    mutate(rows)
    rewrite_rows(good, rows)
    assert problems_of(good, index) == [expected]


def test_tolerance_lets_a_box_touch_past_the_frame(good, index):
    rows = rows_of(good)
    rows[0]["x1"] = -1.5  # within the declared 2 px
    rewrite_rows(good, rows)
    assert validate_submission(good, index).predictions.n_boxes() == len(rows)
    assert problems_of(good, index, ValidationLimits(frame_tolerance_px=1.0)) == [
        "predictions.parquet:row 0 field x1: box outside the frame (x1=-1.5 < -1 px)"]


def test_duplicate_row(good, index):
    rows = rows_of(good)
    rows.append(dict(rows[5]))
    rewrite_rows(good, rows)
    assert problems_of(good, index) == [
        f"predictions.parquet:row {len(rows) - 1} field x1,y1,x2,y2,score: duplicate of row 5"]


def test_detection_cap(good, index):
    rows = rows_of(good)
    per_image: dict = {}
    for r, row in enumerate(rows):
        per_image.setdefault((row["config"], row["split"], row["image_id"]), []).append(r)
    cap = max(len(rs) for rs in per_image.values()) - 1  # the busiest image goes over
    assert cap >= 1
    over = sorted((rs[cap], k[2], len(rs)) for k, rs in per_image.items() if len(rs) > cap)  # problems in row order
    expected = [f"predictions.parquet:row {row} field image_id: image {image!r} has {n} detections, "
                f"more than the cap of {cap}" for row, image, n in over]
    assert expected
    assert problems_of(good, index, ValidationLimits(max_dets_per_image=cap)) == expected


def _retype(folder, column, arrow_type):
    t = pq.read_table(folder / "predictions.parquet")
    i = t.schema.get_field_index(column)
    pq.write_table(t.set_column(i, column, t.column(column).cast(arrow_type)), folder / "predictions.parquet")


def test_wrong_column_types(good, index):
    _retype(good, "score", pa.string())
    t = pq.read_table(good / "predictions.parquet")
    t = t.set_column(t.schema.get_field_index("config"), "config", pa.array([1] * t.num_rows, pa.int32()))
    pq.write_table(t, good / "predictions.parquet")
    assert problems_of(good, index) == [
        "predictions.parquet: field config: column has type int32, expected string",
        "predictions.parquet: field score: column has type string, expected float"]


def test_missing_unknown_and_threshold_columns(good, index):
    t = pq.read_table(good / "predictions.parquet").drop_columns(["y2"])
    t = t.append_column("threshold", pa.array([0.3] * t.num_rows)).append_column("foo", pa.array([1] * t.num_rows))
    pq.write_table(t, good / "predictions.parquet")
    got = problems_of(good, index)
    assert got[0].startswith("predictions.parquet: field foo: unknown column")
    assert got[1].startswith("predictions.parquet: field threshold: per-config thresholds are not accepted")
    assert got[2] == "predictions.parquet: field y2: missing column"
    assert len(got) == 3


META_CASES = {
    "threshold": ({"threshold": 0.25}, "submission.yaml: field threshold: thresholds cannot be set by a submission"),
    "contact": ({"contact": None}, "submission.yaml: field contact: missing or empty"),
    "digest": ({"dataset_digest": "0" * 64}, "submission.yaml: field dataset_digest: '" + "0" * 64 + "' does not "
               "match the dataset's manifest digest"),
    "version": ({"dataset_version": "9.9.9"}, "submission.yaml: field dataset_version: '9.9.9' does not match"),
    "track": ({"track": "boats"}, "submission.yaml: field track: unknown track 'boats'"),
}


@pytest.mark.parametrize("case", sorted(META_CASES))
def test_malformed_submission_yaml(case, good, index):
    over, expected = META_CASES[case]
    (good / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar", **over)))
    got = problems_of(good, index)
    assert len(got) == 1 and got[0].startswith(expected), got


def test_every_config_of_the_track_is_required_including_val(tmp_path, index):
    table = gt_table(index, "sar", skip=[("clean", "synthetic_sar_val")])
    folder = write_submission(tmp_path / "noval", index, "sar", table)
    got = problems_of(folder, index)
    assert len(got) == 1 and got[0].startswith(
        "predictions.parquet: field config: no predictions for config 'clean' split 'synthetic_sar_val'")
    # a split where the model found nothing is declared, not silently missing
    declared = meta(index, "sar", no_detections=["clean/synthetic_sar_val"])
    (folder / "submission.yaml").write_text(yaml.safe_dump(declared))
    assert validate_submission(folder, index).predictions.n_boxes() > 0


def test_declared_empty_split_must_be_empty(good, index):
    declared = meta(index, "sar", no_detections=["clean/synthetic_sar", "fog"])
    (good / "submission.yaml").write_text(yaml.safe_dump(declared))
    assert problems_of(good, index) == [
        "submission.yaml: field no_detections: clean/synthetic_sar is declared empty but has predictions",
        "submission.yaml: field no_detections: entry 1 'fog' names no config/split of track 'sar'"]


def test_file_size_limit(good, index):
    size = (good / "predictions.parquet").stat().st_size
    assert problems_of(good, index, ValidationLimits(max_file_bytes=size - 1)) == [
        f"predictions.parquet: file is {size} bytes, larger than the limit of {size - 1} bytes "
        "(refused before it is read)"]


def test_symbolic_links_are_refused(good, index, tmp_path):
    outside = tmp_path / "elsewhere.parquet"
    (good / "predictions.parquet").rename(outside)
    (good / "predictions.parquet").symlink_to(outside)
    assert problems_of(good, index) == ["predictions.parquet: symbolic links are not accepted in a submission"]


def test_no_predictions_and_two_forms(good, index):
    (good / "predictions.parquet").rename(good / "elsewhere.parquet")
    assert problems_of(good, index)[0].endswith("no predictions: expected predictions.parquet, "
                                                "predictions/<config>.json (COCO) or "
                                                "predictions/<config>/<split>/<image_id>.txt (YOLO)")
    (good / "elsewhere.parquet").rename(good / "predictions.parquet")
    (good / "predictions").mkdir()
    (good / "predictions" / "clean.json").write_text("[]")
    assert "several forms ['parquet', 'coco']" in problems_of(good, index)[0]


def test_every_problem_is_listed_and_cli_exits_2(good, index, repo, capsys, tmp_path):
    rows = rows_of(good)
    for row in rows:  # three problems per row
        row.update(score=2.0, x2=5000.0, y1=-50.0)
    rows[0]["x1"] = math.nan
    rewrite_rows(good, rows)
    (good / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar", team=None, threshold=0.5)))
    results = tmp_path / "results"
    n_problems = 3 * len(rows) + 1 + 2  # + the NaN, + team and threshold
    rc = main(["evaluate", str(good), "--dataset", str(repo), "--out", str(results)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and not results.exists()
    listed = [line for line in err if line.startswith(str(good))]
    assert len(listed) == 50
    assert f"... and {n_problems - 50} more problem(s)" in err
    assert f"invalid submission: {n_problems} problem(s)" in err
    assert listed[:4] == [f"{good}/predictions.parquet:row 0 field score: score 2 outside [0, 1]",
                          f"{good}/predictions.parquet:row 0 field x1: null or not finite",
                          f"{good}/predictions.parquet:row 0 field x2: box outside the frame "
                          "(x2=5000 > frame width + 2 px)",
                          f"{good}/predictions.parquet:row 0 field y1: box outside the frame (y1=-50 < -2 px)"]
    assert rc == 2 and main(["validate", str(good), "--dataset", str(repo)]) == 2


class _Bomb:
    """Unpickling this creates a marker file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_nothing_is_unpickled(good, index, repo, tmp_path, capsys):
    marker = tmp_path / "UNPICKLED"
    (good / "model.pkl").write_bytes(pickle.dumps(_Bomb(marker)))
    t = pq.read_table(good / "predictions.parquet")
    pickled_meta = {b"pandas": json.dumps({"columns": []}).encode(), b"aegis": pickle.dumps(_Bomb(marker))}
    pq.write_table(t.replace_schema_metadata(pickled_meta), good / "predictions.parquet")
    assert main(["validate", str(good), "--dataset", str(repo)]) == 0
    assert main(["evaluate", str(good), "--dataset", str(repo), "--out", str(tmp_path / "res")]) == 0
    assert not marker.exists()
    prov = json.loads((tmp_path / "res" / "good" / "provenance.json").read_text())
    assert set(prov["submission_files"]) == {"model.pkl", "predictions.parquet", "submission.yaml"}


# ----------------------------------------------------------------------- COCO / YOLO


def _to_coco(folder: Path, index, table, out_gt: Path) -> None:
    export_coco(index, out_gt)
    (folder / "predictions").mkdir(parents=True)
    for config in sorted({k[0] for k in table}):
        gt = json.loads((out_gt / f"{config}.json").read_text())
        ids = {(im["split"], Path(im["file_name"]).stem): im["id"] for im in gt["images"]}
        res = [{"image_id": ids[(s, i)], "category_id": 1, "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]),
                                                                      float(b[3] - b[1])], "score": float(sc)}
               for (c, s, i), det in sorted(table.items()) if c == config for b, sc in zip(det.xyxy, det.score)]
        (folder / "predictions" / f"{config}.json").write_text(json.dumps(res))


def _same(a, b) -> bool:
    return set(a) == set(b) and all(np.allclose(a[k].xyxy, b[k].xyxy, atol=1e-3) and
                                    np.array_equal(a[k].score, b[k].score) for k in a)


def test_coco_results_form_loads_the_same_predictions(tmp_path, index, good):
    table = gt_table(index, "sar")
    folder = tmp_path / "coco"
    folder.mkdir()
    shutil.copy(good / "submission.yaml", folder / "submission.yaml")
    _to_coco(folder, index, table, tmp_path / "gt")
    sub = validate_submission(folder, index)
    assert sub.form == "coco" and _same(sub.predictions, table)
    gt = json.loads((tmp_path / "gt" / "clean.json").read_text())
    assert min(im["id"] for im in gt["images"]) == 1 and all(a["id"] > 0 for a in gt["annotations"])
    per_split = json.loads((tmp_path / "gt" / "clean" / "synthetic_sar_val.json").read_text())
    assert {im["split"] for im in per_split["images"]} == {"synthetic_sar_val"}
    res = json.loads((folder / "predictions" / "clean.json").read_text())
    res[2]["image_id"] = 99999
    res[3]["bbox"][2] = -4.0
    res[4]["score"] = "high"
    (folder / "predictions" / "clean.json").write_text(json.dumps(res))
    assert problems_of(folder, index) == [
        "predictions/clean.json:row 2 field image_id: image id 99999 is not in the exported GT of config 'clean'",
        "predictions/clean.json:row 3 field bbox: x2 must exceed x1",
        "predictions/clean.json:row 4 field score: score must be a number, got str"]


def test_yolo_txt_form_loads_the_same_predictions(tmp_path, index, good):
    table = gt_table(index, "sar")
    folder = tmp_path / "yolo"
    folder.mkdir()
    shutil.copy(good / "submission.yaml", folder / "submission.yaml")
    write_yolo_predictions(folder, index, table)
    sub = validate_submission(folder, index)
    assert sub.form == "yolo" and _same(sub.predictions, table)
    some = next(p for p in sorted((folder / "predictions" / "clean" / "synthetic_sar").glob("*.txt"))
                if len(p.read_text().splitlines()) >= 2)  # a frame with two boxes
    lines = some.read_text().splitlines()
    lines[0] = "0 0.5 0.5 0.1"
    lines[1] = lines[1].replace("0 ", "x ", 1)
    some.write_text("\n".join(lines) + "\n")
    (folder / "predictions" / "clean" / "synthetic_sar" / "ghost.txt").write_text("")
    rel = some.relative_to(folder)
    assert problems_of(folder, index) == sorted([
        "predictions/clean/synthetic_sar/ghost.txt: not <image_id>.txt of an image in clean/synthetic_sar",
        f"{rel}:line 1 field conf: expected 6 fields 'cls cx cy w h conf', got 4",
        f"{rel}:line 2 field cls: not a number: 'x'"])


def test_warp_patch_file_problems(tmp_path, index):
    folder = write_submission(tmp_path / "smoke", index, "smoke", gt_table(index, "smoke"))
    g = index.gt("clean", "synthetic_smoke")
    first, second = g.image_ids[1], g.image_ids[2]
    base = {"x1": 10.0, "y1": 10.0, "x2": 40.0, "y2": 40.0, "score": 0.5}
    rows = [{"image_id": first, "position": 0, "row": 0, "col": 0, **base},
            {"image_id": first, "position": 625, "row": 25, "col": 0, **base},
            {"image_id": first, "position": 26, "row": 1, "col": 2, **base},
            {"image_id": "ghost", "position": 3, "row": 0, "col": 3, **base},
            {"image_id": second, "position": 4, "row": 0, "col": 4, **base},
            {"image_id": first, "position": 5, "row": 0, "col": 5, **base, "x2": 900.0}]
    pq.write_table(pa.Table.from_pylist(rows), folder / "warp_patch.parquet")
    declared = {"grid": 25, "images": [f"synthetic_smoke/{first}", "synthetic_smoke/nope"]}
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta(index, "smoke", warp_patch=declared)))
    assert problems_of(folder, index) == [
        "submission.yaml: field warp_patch.images: entry 1 'synthetic_smoke/nope' is not a clean test image of a "
        "smoke source",
        "warp_patch.parquet:row 1 field position: position 625 outside 0..624",
        "warp_patch.parquet:row 2 field col: col 2 does not match position 26 (expected 1 on a 25x25 grid)",
        "warp_patch.parquet:row 3 field image_id: image 'ghost' is not in the clean test split of a smoke source",
        f"warp_patch.parquet:row 4 field image_id: image {second!r} is not listed under warp_patch.images in "
        "submission.yaml",
        "warp_patch.parquet:row 5 field x2: box outside the frame (x2=900 > frame width + 2 px)"]
    sar = write_submission(tmp_path / "sar", index, "sar", gt_table(index, "sar"))
    pq.write_table(pa.Table.from_pylist(rows[:1]), sar / "warp_patch.parquet")
    assert problems_of(sar, index) == [
        "warp_patch.parquet: the WARP tests are scored on the smoke track only"]
