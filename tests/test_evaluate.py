"""``aegisbench evaluate``: frozen thresholds, per-condition metrics with bootstrap
intervals, smoke practice and WARP, the results schema, atomic and concurrent writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import CONDITIONS, gt_table, meta, rewrite_rows, rows_of, write_submission
from aegisbench.evaluation.bootstrap import BootstrapParams, Resamples, condition_intervals
from aegisbench.cli import main
from aegisbench.evaluation import coco_map
from aegisbench.evaluation.detection import SplitScore
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate, evaluate_submission
from aegisbench.evaluation.results import Evaluation, write_results
from aegisbench.evaluation.version import EVALUATOR_VERSION
from aegisbench.evaluation.submission import validate_submission
from aegisbench.evaluation.warp_eval import patch_boxes
from aegisbench.leaderboard.results import read_entry
from aegisbench.predictions import Detections, write_parquet_predictions

FAST = EvaluationParams(bootstrap=BootstrapParams(n_resamples=200))
FP_BOX = [1.0, 1.0, 9.0, 9.0]  # far from every GT box of the synthetic sources


def metrics_of(out: Path) -> dict:
    df = pl.read_parquet(out / "metrics.parquet")
    return {(r["source"], r["config"], r["metric"]): r for r in df.iter_rows(named=True)}


def run(folder, repo, tmp_path, params=FAST) -> Path:
    return evaluate_submission(folder, repo, tmp_path / "results", params, verify=False)


def test_perfect_submission_recall_precision_one_with_degenerate_intervals(tmp_path, repo, index):
    folder = write_submission(tmp_path / "perfect", index, "sar", gt_table(index, "sar"))
    out = run(folder, repo, tmp_path, EvaluationParams())
    m = metrics_of(out)
    configs = ["clean", *CONDITIONS]
    for config in configs:
        for metric in ("recall", "precision", "f1", "map50"):
            r = m[("synthetic_sar", config, metric)]
            assert (r["value"], r["lo"], r["hi"]) == (1.0, 1.0, 1.0), (config, metric)
        assert m[("synthetic_sar", config, "map50_95")]["value"] == pytest.approx(1.0)
        assert m[("synthetic_sar", config, "fp")]["value"] == 0
    prov = json.loads((out / "provenance.json").read_text())
    assert {(d["config"], d["metric"]) for d in prov["degenerate_intervals"]} >= {(c, "recall") for c in configs}
    assert prov["frozen_threshold"] == {"synthetic_sar": 0.9}
    assert prov["max_dets"] is None and "no maxDets truncation" in prov["max_dets_note"]
    assert prov["bootstrap"]["n_resamples"] == 1000 and prov["evaluator_version"] == EVALUATOR_VERSION
    assert prov["dataset_digest"] == index.digest and prov["submission"] == "perfect"
    assert set(prov["submission_files"]) == {"predictions.parquet", "submission.yaml"}
    # the results schema, and the leaderboard's reader accepts it
    df = pl.read_parquet(out / "metrics.parquet")
    assert df.schema == pl.Schema({"submission": pl.String, "track": pl.String, "source": pl.String,
                                   "config": pl.String, "corruption": pl.String, "family": pl.String,
                                   "severity": pl.Int64, "metric": pl.String, "value": pl.Float64,
                                   "lo": pl.Float64, "hi": pl.Float64, "n": pl.Int64, "t": pl.Int32,
                                   "stratum": pl.String, "n_units": pl.Int32, "note": pl.String})
    assert df["t"].null_count() == df["stratum"].null_count() == df.height  # no frames or strata here
    entry = read_entry(out)
    assert entry.metrics.height == df.height
    pi = pl.read_parquet(out / "per_image.parquet")
    assert {"submission", "config", "split", "image_id", "tp", "fp", "fn", "n_gt", "n_pred_kept"} <= set(pi.columns)
    n_images = sum(len(index.gt(c, s)) for c, s in index.keys("sar"))
    assert pi.height == n_images and (pi["fn"] == 0).all() and (pi["tp"] == pi["n_gt"]).all()


def test_empty_condition_gives_recall_zero_with_interval_zero(tmp_path, repo, index):
    empty = CONDITIONS[0]
    table = gt_table(index, "sar", skip=[(empty, "synthetic_sar")])
    folder = write_submission(tmp_path / "blind", index, "sar", table, no_detections=[f"{empty}/synthetic_sar"])
    m = metrics_of(run(folder, repo, tmp_path))
    r = m[("synthetic_sar", empty, "recall")]
    assert (r["value"], r["lo"], r["hi"]) == (0.0, 0.0, 0.0)
    assert m[("synthetic_sar", empty, "tp")]["value"] == 0 and m[("synthetic_sar", empty, "map50")]["value"] == 0
    assert m[("synthetic_sar", "clean", "frozen_threshold")]["value"] == 0.9
    assert m[("synthetic_sar", empty, "relative_drop_recall")]["value"] == 1.0
    assert m[("synthetic_sar", empty, "silent_failure")]["value"] == 1.0
    assert m[("synthetic_sar", empty, "loc_n_both")]["value"] == 0
    e = m[("synthetic_sar", empty, "effectiveness")]
    assert (e["value"], e["lo"], e["hi"]) == (1.0, 1.0, 1.0)
    other = CONDITIONS[1]
    assert m[("synthetic_sar", other, "silent_failure")]["value"] == 0.0
    assert m[("synthetic_sar", other, "effectiveness")]["value"] == 0.0


def _scored(index, val_scores, test_scores):
    """GT boxes scored by split role, plus one false positive per image."""
    table = {}
    for config, split in index.keys("sar"):
        g = index.gt(config, split)
        val = split.endswith("_val")
        for image_id, boxes in zip(g.image_ids, g.boxes):
            k = np.arange(len(boxes))
            s = np.where(k % 2 == 0, val_scores[0], val_scores[0]) if val else np.where(k % 2 == 0, *test_scores[:2])
            fp = val_scores[1] if val else test_scores[2]
            table[(config, split, image_id)] = Detections(np.vstack([boxes.reshape(-1, 4), FP_BOX]), np.append(s, fp))
    return table


def test_threshold_is_frozen_on_val_and_applied_to_every_condition(tmp_path, repo, index):
    folder = write_submission(tmp_path / "thr", index, "sar", _scored(index, (0.8, 0.5), (0.85, 0.75, 0.95)))
    out = run(folder, repo, tmp_path)
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["frozen_threshold"] == {"synthetic_sar": 0.8}  # max F1 on val: every TP, no FP
    m = metrics_of(out)
    for config in ["clean", *CONDITIONS]:
        g = index.gt(config, "synthetic_sar")
        n_even = sum((len(b) + 1) // 2 for b in g.boxes)
        n_all = sum(len(b) for b in g.boxes)
        tp, fp, fn = (m[("synthetic_sar", config, k)]["value"] for k in ("tp", "fp", "fn"))
        assert (tp, fp, fn) == (n_even, len(g), n_all - n_even), config  # 0.85 kept, 0.75 not, 0.95 FPs kept
        assert m[("synthetic_sar", config, "recall")]["value"] == pytest.approx(n_even / n_all)
    # test predictions do not move the threshold; a grid restricts it (ties -> highest)
    folder2 = write_submission(tmp_path / "thr2", index, "sar", _scored(index, (0.8, 0.5), (0.3, 0.2, 0.99)))
    assert json.loads((run(folder2, repo, tmp_path) / "provenance.json").read_text())["frozen_threshold"] == \
        {"synthetic_sar": 0.8}
    grid = EvaluationParams(threshold_grid=tuple(np.arange(1, 21) / 100), bootstrap=FAST.bootstrap)
    out3 = run(folder, repo, tmp_path, grid)
    assert json.loads((out3 / "provenance.json").read_text())["frozen_threshold"] == {"synthetic_sar": 0.2}


def test_intervals_share_one_seeded_draw_per_split(tmp_path, repo, index):
    table = _scored(index, (0.8, 0.5), (0.85, 0.75, 0.95))
    sub = validate_submission(write_submission(tmp_path / "boot", index, "sar", table), index)
    ev = evaluate(sub, index, FAST)
    m = {(r["config"], r["metric"]): r for r in ev.metrics.to_pylist()}
    gt = index.gt("clean", "synthetic_sar")
    res = Resamples.draw(len(gt), ("aegisbench-bootstrap", index.digest, "boot", "synthetic_sar"), 200)
    ci = condition_intervals(SplitScore.of(sub, "clean", gt).match, 0.8, resamples=res)
    for metric in ("recall", "precision", "f1", "map50"):
        assert (m[("clean", metric)]["lo"], m[("clean", metric)]["hi"]) == pytest.approx(ci[metric], abs=1e-12)
        for config in CONDITIONS:  # same predictions on the same images: identical (paired) intervals
            assert (m[(config, metric)]["lo"], m[(config, metric)]["hi"]) == \
                (m[("clean", metric)]["lo"], m[("clean", metric)]["hi"])
    again = evaluate(sub, index, FAST).metrics
    assert again.equals(ev.metrics)


def test_localization_stability_against_clean(tmp_path, repo, index):
    cond = CONDITIONS[0]
    table = gt_table(index, "sar", shift=lambda c, s: np.array([3.0, 0.0, 3.0, 0.0]) if c == cond else 0.0)
    m = metrics_of(run(write_submission(tmp_path / "shift", index, "sar", table), repo, tmp_path))
    boxes = np.concatenate(index.gt("clean", "synthetic_sar").boxes)
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    assert m[("synthetic_sar", cond, "loc_iou")]["value"] == pytest.approx(float(np.mean((w - 3) / (w + 3))))
    assert m[("synthetic_sar", cond, "loc_center_shift")]["value"] == pytest.approx(float(np.mean(3 / np.hypot(w, h))))
    assert m[("synthetic_sar", cond, "loc_n_both")]["value"] == len(boxes)
    assert m[("synthetic_sar", cond, "relative_drop_recall")]["value"] == 0.0
    assert m[("synthetic_sar", cond, "relative_drop_map50_95")]["value"] > 0


def test_coco_form_scores_like_parquet(tmp_path, repo, index):
    table = _scored(index, (0.8, 0.5), (0.85, 0.75, 0.95))
    pq_out = run(write_submission(tmp_path / "a" / "same", index, "sar", table), repo, tmp_path / "a")
    folder = tmp_path / "b" / "same"
    (folder / "predictions").mkdir(parents=True)
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar")))
    assert main(["export-coco", "--dataset", str(repo), "--out", str(tmp_path / "gt")]) == 0
    for config in sorted({k[0] for k in table}):
        gt = json.loads((tmp_path / "gt" / f"{config}.json").read_text())
        ids = {(im["split"], Path(im["file_name"]).stem): im["id"] for im in gt["images"]}
        res = [{"image_id": ids[(s, i)], "category_id": 1, "score": float(sc),
                "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]}
               for (c, s, i), det in sorted(table.items()) if c == config for b, sc in zip(det.xyxy, det.score)]
        (folder / "predictions" / f"{config}.json").write_text(json.dumps(res))
    coco_out = run(folder, repo, tmp_path / "b")
    a, b = pl.read_parquet(pq_out / "metrics.parquet"), pl.read_parquet(coco_out / "metrics.parquet")
    assert a.equals(b)
    # the exported per-split GT scores the same with the COCO evaluator
    split_gt = tmp_path / "gt" / "clean" / "synthetic_sar.json"
    keep = {im["id"] for im in json.loads(split_gt.read_text())["images"]}
    res = [r for r in json.loads((folder / "predictions" / "clean.json").read_text()) if r["image_id"] in keep]
    (tmp_path / "split_results.json").write_text(json.dumps(res))
    ref = coco_map(split_gt, tmp_path / "split_results.json")
    m = metrics_of(pq_out)
    assert m[("synthetic_sar", "clean", "map50")]["value"] == pytest.approx(ref["map50"], abs=1e-12)
    assert m[("synthetic_sar", "clean", "map50_95")]["value"] == pytest.approx(ref["map50_95"], abs=1e-12)


def test_warp_noise_map_percent_loss(tmp_path, repo, index):
    """The noise sweep's rows: config warp_noise_<a> (results only: the repo stores no noise),
    mAP50-95 on the clean test frames and L(a) = 100 (clean - noisy) / clean with its interval."""
    assert not [c for c in index.configs() if c.startswith("warp_noise")]
    folder = write_submission(tmp_path / "warp", index, "smoke", gt_table(index, "smoke"))
    shifted = gt_table(index, "smoke", shift=lambda c, s: np.array([2.0, 1.0, 2.0, 1.0]), configs=["clean"])
    noise = {("warp_noise_100", s, i): d for (c, s, i), d in shifted.items() if not s.endswith("_val")}
    write_parquet_predictions(noise, folder / "warp_noise.parquet")
    m = metrics_of(run(folder, repo, tmp_path))
    after = m[("synthetic_smoke", "warp_noise_100", "map50_95")]["value"]
    before = m[("synthetic_smoke", "clean", "map50_95")]["value"]
    assert before == pytest.approx(1.0) and after < before
    row = m[("synthetic_smoke", "warp_noise_100", "warp_map_loss")]
    assert row["value"] == pytest.approx((before - after) / before * 100) and row["value"] > 0  # positive = a loss
    assert row["lo"] <= row["value"] <= row["hi"] and (row["corruption"], row["family"]) == ("warp_noise", None)
    assert not any(k[2] == "warp_map_loss" for k in m if k[1] != "warp_noise_100")


# -------------------------------------------------------------------- smoke


def _iou(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    return w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h)


def test_smoke_time_to_detect_image_level_and_warp_patch(tmp_path, repo, index):
    g = index.gt("clean", "synthetic_smoke")
    # miss the first smoke frame of every sequence (clean and every condition)
    first = {}
    for k in range(len(g)):
        if len(g.boxes[k]) and g.group_id[k] not in first:
            first[g.group_id[k]] = g.image_ids[k]
    table = {k: d for k, d in gt_table(index, "smoke").items() if k[2] not in first.values()}
    folder = write_submission(tmp_path / "smoke", index, "smoke", table)
    # WARP patch: GT box at every position except the flips F_i; a cloud box (score 0.95) at D_i
    rows, expect = [], {}
    positives = [i for i, b in zip(g.image_ids, g.boxes) if len(b)]
    listed = positives[1:]  # the run covered a subset (as `detect --max-images` records)
    for k, image_id in enumerate(g.image_ids):
        if image_id not in listed:
            continue
        pb = patch_boxes(int(g.width[k]), int(g.height[k]), 25)
        flips = set(range(k, 625, 7))
        decoys = {312, 3 * k % 625}
        positive = image_id not in first.values()
        alpha = beta = 0.0
        deceptions = deceived = 0
        for j in range(625):
            boxes = [] if j in flips else [(tuple(g.boxes[k][0]), 0.9)]
            if j in decoys:
                boxes.append((tuple(float(v) for v in pb[j]), 0.95))
            if j == 312:  # a second box on the centre patch: seed 000's D_i counts it, positions do not
                boxes.append((tuple(float(v) + 1.0 for v in pb[j]), 0.8))
            hits = 0
            for b, s in boxes:
                rows.append({"split": "synthetic_smoke", "image_id": image_id, "position": j, "row": j // 25,
                             "col": j % 25,
                             "x1": b[0], "y1": b[1], "x2": b[2], "y2": b[3], "score": s})
                hits += _iou(b, pb[j]) >= 0.5
            deceptions, deceived = deceptions + hits, deceived + (hits > 0)
            alpha += positive and not boxes
            beta += (not positive) and bool(boxes)
        expect[image_id] = (alpha / 625, beta / 625, deceptions, deceived)
    pq.write_table(pa.Table.from_pylist(rows), folder / "warp_patch.parquet")
    declared = {"grid": 25, "patch_px": None, "images": [f"synthetic_smoke/{i}" for i in listed]}
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta(index, "smoke", warp_patch=declared)))
    out = run(folder, repo, tmp_path)
    m = metrics_of(out)
    src = "synthetic_smoke"
    assert read_entry(out).metrics.height == len(m)  # WARP and compound rows pass the leaderboard's checks
    assert (m[(src, "warp_patch", "gamma")]["corruption"], m[(src, "warp_patch", "gamma")]["family"]) == \
        ("cloud_patch", None)
    ttd = pl.read_parquet(out / "time_to_detect.parquet").filter(pl.col("config") == "clean").sort("group_id")
    want, minutes = [], []
    for group, image_id in sorted(first.items()):
        hit = min((int(g.frame_index[k]), k) for k in range(len(g)) if g.group_id[k] == group and len(g.boxes[k])
                  and g.image_ids[k] != image_id)
        start = int(g.fire_start_frame[g.position[image_id]])
        at_start = next(k for k in range(len(g)) if g.group_id[k] == group and g.frame_index[k] == start)
        want.append(hit[0] - start)
        minutes.append((g.time_s[hit[1]] - g.time_s[at_start]) / 60)
    # a sequence whose fire starts but shows no smoke box in the test frames is never detected (no delay)
    never = ttd.filter(~pl.col("group_id").is_in(list(first)))
    assert never["frames"].to_list() == [None] * never.height and not never["detected"].any()
    seen = ttd.filter(pl.col("group_id").is_in(list(first)))
    assert seen["frames"].to_list() == want and seen["detected"].all() and min(minutes) > 0
    assert seen["minutes"].to_list() == pytest.approx(minutes)
    assert m[(src, "clean", "time_to_detect_frames")]["value"] == pytest.approx(np.mean(want))
    sd = m[(src, "clean", "time_to_detect_frames_sd")]["value"]
    assert sd == pytest.approx(np.std(want, ddof=1)) if len(want) > 1 else sd is None
    n_pos = sum(1 for b in g.boxes if len(b))
    assert m[(src, "clean", "image_recall")]["value"] == pytest.approx((n_pos - len(first)) / n_pos)
    assert m[(src, "clean", "image_precision")]["value"] == 1.0
    per = pl.read_parquet(out / "warp_patch_images.parquet").sort("image_id")
    assert per["image_id"].to_list() == sorted(expect)
    assert per["alpha"].to_list() == pytest.approx([expect[i][0] for i in sorted(expect)])
    assert per["beta"].to_list() == pytest.approx([expect[i][1] for i in sorted(expect)])
    assert per["deceptions"].to_list() == [expect[i][2] for i in sorted(expect)]
    assert m[(src, "warp_patch", "gamma")]["value"] == pytest.approx(np.mean([e[2] / 625 for e in expect.values()]))
    assert m[(src, "warp_patch", "gamma_positions")]["value"] == pytest.approx(
        np.mean([e[3] / 625 for e in expect.values()]))
    assert all(e[2] > e[3] for e in expect.values())  # the centre patch's two boxes: gamma counts both
    assert per["gamma"].to_list() == pytest.approx([expect[i][2] / 625 for i in sorted(expect)])
    assert per["gamma_positions"].to_list() == pytest.approx([expect[i][3] / 625 for i in sorted(expect)])
    assert m[(src, "warp_patch", "alpha")]["value"] == pytest.approx(np.mean([e[0] for e in expect.values()]))
    doc = json.loads((out / "warp_patch.json").read_text())[src]
    assert doc["heatmap"][312 // 25][312 % 25] >= len(expect)  # every image has a decoy in the centre cell
    assert sum(map(sum, doc["heatmap"])) == sum(e[2] for e in expect.values())
    counts = {}
    for e in expect.values():
        counts[e[2]] = counts.get(e[2], 0) + 1
    assert {r["deceptions"]: r["images"] for r in doc["gamma_count_table"]} == counts


# ------------------------------------------------------- atomic, concurrent


def _snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_failed_evaluation_leaves_results_untouched(tmp_path, repo, index):
    folder = write_submission(tmp_path / "sub", index, "sar", gt_table(index, "sar"))
    results = tmp_path / "results"
    out = run(folder, repo, tmp_path)
    before = _snapshot(results)
    rows = rows_of(folder)
    rows[0]["score"] = 7.0  # now invalid: exit 2, nothing written
    rewrite_rows(folder, rows)
    proc = subprocess.run([sys.executable, "-m", "aegisbench.cli", "evaluate", str(folder), "--dataset", str(repo),
                           "--out", str(results), "--n-resamples", "50"], capture_output=True, text=True)
    assert proc.returncode == 2 and "predictions.parquet:row 0 field score: score 7 outside [0, 1]" in proc.stderr
    assert _snapshot(results) == before and sorted(os.listdir(results)) == ["sub"]
    # a crash while writing (an artefact that cannot be serialised) leaves the old result too
    rows[0]["score"] = 0.5
    rewrite_rows(folder, rows)
    sub = validate_submission(folder, index)
    ev = evaluate(sub, index, FAST)
    broken = Evaluation(sub, ev.metrics, ev.per_image, ev.provenance, ev.tables, {"bad.json": {"x": object()}})
    with pytest.raises(TypeError):
        write_results(broken, results)
    assert _snapshot(results) == before and sorted(os.listdir(results)) == ["sub"]
    # a successful re-evaluation replaces the older result
    write_results(ev, results)
    assert sorted(os.listdir(results)) == ["sub"] and _snapshot(results) != before
    assert metrics_of(out)[("synthetic_sar", "clean", "recall")]["value"] < 1.0  # row 0 now below the threshold


def test_two_evaluations_at_once_do_not_interfere(tmp_path, repo, index):
    results = tmp_path / "results"
    a = write_submission(tmp_path / "alpha", index, "sar", gt_table(index, "sar"))
    b = write_submission(tmp_path / "bravo", index, "smoke", gt_table(index, "smoke"))
    cmd = [sys.executable, "-m", "aegisbench.cli", "evaluate", "--dataset", str(repo), "--out", str(results),
           "--n-resamples", "100"]
    procs = [subprocess.Popen([*cmd, str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for f in (a, b)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(os.listdir(results)) == ["alpha", "bravo"]  # no staging folders left behind
    for name, track in (("alpha", "sar"), ("bravo", "smoke")):
        df = pl.read_parquet(results / name / "metrics.parquet")
        assert df["submission"].unique().to_list() == [name] and df["track"].unique().to_list() == [track]
        assert json.loads((results / name / "provenance.json").read_text())["submission"] == name
