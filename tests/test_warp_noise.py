"""Seed 000 at its own scale when asked, honestly smaller by default (issue 34 item 3).

``warp.noise_levels`` (the global sanity check, swept at detection time over every smoke test
frame) and ``warp.images`` (the patch test's images) in params.yaml; each L(a) carries a
bootstrap interval, checked against the seed's formula on materialised resamples; gamma
counts deceiving detections as seed 000 defines D_i, with the share of deceived positions
as its own metric. Bad levels: one line naming the key, exit 2, nothing written.
"""

from __future__ import annotations

import hashlib

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, meta, write_submission
from aegisbench.cli import main
from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.coco import map_from_arrays
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.warp_eval import patch_boxes
from aegisbench.params import DEFAULT_NOISE_LEVELS, SEED000_NOISE_LEVELS, Params, WarpTestParams, noise_levels
from aegisbench.predictions import Detections, write_parquet_predictions
from aegisbench.stats import resample_indices

ROOT = Path(__file__).resolve().parents[1]
SRC = "synthetic_smoke"
B = 200
FAST = EvaluationParams(bootstrap=BootstrapParams(n_resamples=B))


# ------------------------------------------------------------------ parameters


def test_default_sweeps_21_levels_and_the_documented_setting_is_seed_000s_400():
    warp = Params.load(ROOT / "params.yaml").warp
    assert warp.noise_levels == DEFAULT_NOISE_LEVELS == WarpTestParams().noise_levels
    assert len(warp.noise_levels) >= 20 and {0.1, 0.21, 0.4} <= set(warp.noise_levels)
    assert warp.grid == 25 and warp.images == 4  # the patch test: 4 smoke-positive frames per source on CPU
    seed = noise_levels(SEED000_NOISE_LEVELS)
    assert len(seed) == 400 and (seed[0], seed[-1]) == (0.001, 0.4)
    assert seed == tuple(k / 1000 for k in range(1, 401)) == noise_levels("0.001:0.4:0.001")
    readme = (ROOT / "README.md").read_text()
    assert "noise_levels: {start: 0.001, stop: 0.4, step: 0.001}" in readme  # the documented setting
    assert Params.from_dict({**yaml.safe_load((ROOT / "params.yaml").read_text()),
                             "warp": {"noise_levels": dict(SEED000_NOISE_LEVELS), "images": "all"}}).warp == \
        WarpTestParams(noise_levels=seed, images=None)


BAD_LEVELS = [([0.2, 0.1], "strictly increasing"), ([0.1, 0.1], "strictly increasing"), ([0.1, 1.5], "[0, 1]"),
              ([-0.1], "[0, 1]"), ([0.0105], "multiple of 0.001"), ([], "non-empty"), ("0.1,x", "numbers"),
              ({"start": 0.3, "stop": 0.1, "step": 0.01}, "below start"), ({"start": 0.1, "stop": 0.3}, "step")]


def _files(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("levels, needle", BAD_LEVELS)
def test_bad_noise_levels_are_one_line_exit_2_nothing_written(tmp_path, capsys, levels, needle):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["warp"]["noise_levels"] = levels
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "submission.yaml").write_text("track: smoke\n")
    before = _files(tmp_path)
    for args in (["build", "--params", str(tmp_path / "p.yaml"), "--out", str(tmp_path / "repo")],
                 ["warp-detect", "--detector", "yolo", "--weights", str(tmp_path / "w.pt"), "--submission", str(sub),
                  "--params", str(tmp_path / "p.yaml")]):
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "warp.noise_levels" in err[0] and needle in err[0], err
        assert _files(tmp_path) == before


def test_moved_and_renamed_keys_and_flags_are_named(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    for where, edit, needle in [("build.warp_noise_levels", lambda r: r["build"].update(warp_noise_levels=[0.1]),
                                 "moved to warp.noise_levels"),
                                ("warp.max_images", lambda r: r["warp"].update(max_images=4), "renamed warp.images"),
                                ("warp.images", lambda r: r["warp"].update(images=0), ">= 1")]:
        bad = yaml.safe_load(yaml.safe_dump(raw))
        edit(bad)
        with pytest.raises(BadInput, match=needle) as exc:
            Params.from_dict(bad)
        assert where in str(exc.value)
    sub = tmp_path / "sub"
    sub.mkdir()
    for flag, value in (("--noise-levels", "0.3,0.2"), ("--images", "none"), ("--grid", "0")):
        assert main(["warp-detect", "--detector", "yolo", "--weights", "w.pt", "--submission", str(sub),
                     flag, value]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and flag in err[0], err
    assert list(sub.iterdir()) == []


# ------------------------------------------------------------------ L(a) with intervals


def _distinct_scores(config: str, split: str, image_id: str, k: int) -> np.ndarray:
    """Scores no two boxes share (seeded by the image id): AP does not then depend on how ties
    between a hit and a miss are ordered, which a materialised resample orders by its random image
    order and the evaluator's weighted resample by the split's (both are COCO-correct)."""
    seed = int(hashlib.sha256(f"{split}/{image_id}".encode()).hexdigest()[:16], 16)
    return np.random.default_rng(seed).uniform(0.05, 0.95, k)


def _shifted(index, dx: float) -> dict:
    """Clean-test GT boxes moved ``dx`` px right, keyed (config, split, image_id) of clean, each
    with its own score."""
    return gt_table(index, "smoke", _distinct_scores, shift=lambda c, s: np.array([dx, 0.0, dx, 0.0]),
                    configs=["clean"])


def _sweep_submission(tmp_path: Path, index, levels: dict) -> Path:
    """A smoke submission: every config the GT boxes (score 0.9), and ``warp_noise.parquet``
    with ``levels`` = {a: detections of the clean test split, keyed by image id}."""
    folder = write_submission(tmp_path / "sweep", index, "smoke", gt_table(index, "smoke"),
                              warp_noise={"levels": sorted(levels), "noise_at": "model_input"})
    rows = {(f"warp_noise_{round(a * 1000):03d}", SRC, i): d for a, dets in levels.items() for i, d in dets.items()}
    write_parquet_predictions(rows, folder / "warp_noise.parquet")
    return folder


def _materialised_map(dets: list, gt, idx: np.ndarray) -> float:
    """mAP50-95 of one resample built as a new image list (pycocotools' rules, -1 -> NaN)."""
    r = map_from_arrays([dets[i].xyxy for i in idx], [dets[i].score for i in idx], [gt.boxes[i] for i in idx])
    return r["map50_95"] if r["map50_95"] >= 0 else np.nan


def test_each_level_carries_l_of_a_with_its_bootstrap_interval(tmp_path, repo, index):
    gt = index.gt("clean", SRC)
    clean = {i: d for (c, s, i), d in gt_table(index, "smoke").items() if (c, s) == ("clean", SRC)}
    by_id = lambda t: {i: d for (c, s, i), d in t.items() if s == SRC}  # noqa: E731
    levels = {0.1: clean, 0.2: by_id(_shifted(index, 3.0)), 0.3: by_id(_shifted(index, 1.0)), 0.4: {}}
    folder = _sweep_submission(tmp_path, index, levels)
    out = evaluate_submission(folder, repo, tmp_path / "results", FAST, verify=False)
    rows = {(r["config"], r["metric"]): r for r in pq.read_table(out / "metrics.parquet").to_pylist()
            if r["source"] == SRC}
    doc = yaml.safe_load((out / "warp_noise.json").read_text())[SRC]
    # hand-computed ends: the clean boxes again lose nothing, no box loses everything, no spread
    assert rows[("warp_noise_100", "warp_map_loss")]["value"] == 0.0
    assert (rows[("warp_noise_100", "warp_map_loss")]["lo"], rows[("warp_noise_100", "warp_map_loss")]["hi"]) == (0, 0)
    assert rows[("warp_noise_400", "warp_map_loss")]["value"] == 100.0
    assert (rows[("warp_noise_400", "warp_map_loss")]["lo"], rows[("warp_noise_400", "warp_map_loss")]["hi"]) == (100, 100)
    # independently: seed 000's L on COCO mAP50-95 of the frames, and of each materialised resample
    # of the evaluator's draw (its key: the split's shared draw)
    idx = resample_indices(len(gt), ("aegisbench-bootstrap", index.scoring_digest, folder.name, SRC), B)
    ids = list(gt.image_ids)
    det_list = lambda d: [d.get(i, Detections.empty()) for i in ids]  # noqa: E731
    clean_b = np.array([_materialised_map(det_list(clean), gt, r) for r in idx])
    samples = {}
    for a, dets in levels.items():
        config = f"warp_noise_{round(a * 1000):03d}"
        point = map_from_arrays([d.xyxy for d in det_list(dets)], [d.score for d in det_list(dets)],
                                list(gt.boxes))["map50_95"]
        row = rows[(config, "warp_map_loss")]
        assert rows[(config, "map50_95")]["value"] == pytest.approx(point, abs=1e-12)
        assert row["value"] == pytest.approx(100 * (1 - point), abs=1e-9)  # clean mAP50-95 is 1 (GT boxes)
        samples[a] = 100 * (clean_b - np.array([_materialised_map(det_list(dets), gt, r) for r in idx])) / clean_b
        lo, hi = np.nanpercentile(samples[a], [2.5, 97.5])
        assert (row["lo"], row["hi"]) == pytest.approx((lo, hi), abs=1e-4), config
        assert row["n"] == len(gt) and (row["corruption"], row["family"]) == ("warp_noise", None)
    # the non-monotone step (3 px then 1 px): its paired difference's interval says if it is noise
    (step,) = doc["decreasing_steps"]
    lo, hi = np.nanpercentile(samples[0.3] - samples[0.2], [2.5, 97.5])
    assert (step["from"], step["to"]) == (0.2, 0.3) and step["change"] < 0
    assert (step["lo"], step["hi"]) == pytest.approx((lo, hi), abs=1e-4)
    assert step["within_noise"] == bool(lo <= 0 <= hi)
    assert [lv["a"] for lv in doc["levels"]] == [0.1, 0.2, 0.3, 0.4] and doc["n_images"] == len(gt)
    # each level is a condition of the clean frames like any other: the clean boxes again score clean's
    # recall with clean's interval, no box at all recalls nothing
    for metric in ("recall", "precision", "map50"):
        assert (rows[("warp_noise_100", metric)]["value"], rows[("warp_noise_100", metric)]["lo"]) == \
            (rows[("clean", metric)]["value"], rows[("clean", metric)]["lo"])
    assert rows[("warp_noise_400", "recall")]["value"] == 0.0 and ("warp_noise_400", "silent_failure") in rows


def test_a_sweep_file_is_checked_like_predictions(tmp_path, repo, index, capsys):
    folder = _sweep_submission(tmp_path, index, {0.1: {}})
    g = index.gt("clean", SRC)
    bad = [{"config": "warp_noise_200", "split": SRC, "image_id": g.image_ids[0], "x1": 0.0, "y1": 0.0, "x2": 5.0,
            "y2": 5.0, "score": 0.5, "label": None},  # a level submission.yaml does not declare
           {"config": "warp_noise_100", "split": SRC, "image_id": "nope", "x1": 0.0, "y1": 0.0, "x2": 5.0,
            "y2": 5.0, "score": 0.5, "label": None}]
    pq.write_table(pa.Table.from_pylist(bad), folder / "warp_noise.parquet")
    assert main(["validate", str(folder), "--dataset", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "unknown config 'warp_noise_200'" in err and "image 'nope'" in err
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta(index, "smoke", warp_noise={"levels": [0.2, 0.1]})))
    assert main(["validate", str(folder), "--dataset", str(repo)]) == 2
    assert "warp_noise.levels" in capsys.readouterr().err


# ------------------------------------------------------------------ gamma as seed 000 counts D_i


def _iou(a, b) -> float:
    w, h = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    return 0.0 if w <= 0 or h <= 0 else w * h / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h)


def test_gamma_counts_every_deceiving_detection_and_positions_are_their_own_metric(tmp_path, repo, index):
    g = index.gt("clean", SRC)
    positives = [k for k in range(len(g)) if len(g.boxes[k])][:2]
    folder = write_submission(tmp_path / "patch", index, "smoke", gt_table(index, "smoke"),
                              warp_patch={"grid": 25, "patch_px": None,
                                          "images": [f"{SRC}/{g.image_ids[k]}" for k in positives]})
    rows, want = [], {}
    for n_boxes, k in zip((2, 1), positives):  # two boxes on one patch of the first image, one on the second
        pb = patch_boxes(int(g.width[k]), int(g.height[k]), 25)
        boxes = [(j, tuple(g.boxes[k][0]), 0.9) for j in range(625)]
        boxes += [(300, tuple(float(v) + d for v in pb[300]), 0.95 - d / 10) for d in range(n_boxes)]
        rows += [{"split": SRC, "image_id": g.image_ids[k], "position": j, "row": j // 25, "col": j % 25,
                  "x1": b[0], "y1": b[1], "x2": b[2], "y2": b[3], "score": s} for j, b, s in boxes]
        hits = [sum(_iou(b, pb[j]) >= 0.5 for jj, b, _ in boxes if jj == j) for j in range(625)]
        want[g.image_ids[k]] = (sum(hits) / 625, sum(h > 0 for h in hits) / 625)
    pq.write_table(pa.Table.from_pylist(rows), folder / "warp_patch.parquet")
    out = evaluate_submission(folder, repo, tmp_path / "results", FAST, verify=False)
    m = {(r["config"], r["metric"]): r["value"] for r in pq.read_table(out / "metrics.parquet").to_pylist()
         if r["source"] == SRC}
    # hand-computed: D = 2 and 1 deceiving detections of A = 625 (seed 000: two boxes on one patch count twice)
    assert [w[0] for w in want.values()] == [2 / 625, 1 / 625] and [w[1] for w in want.values()] == [1 / 625] * 2
    assert m[("warp_patch", "gamma")] == pytest.approx(1.5 / 625)
    assert m[("warp_patch", "gamma_positions")] == pytest.approx(1 / 625)
    per = pq.read_table(out / "warp_patch_images.parquet").to_pylist()
    assert {r["image_id"]: (r["gamma"], r["gamma_positions"]) for r in per} == {
        i: pytest.approx(w) for i, w in want.items()}
    table = yaml.safe_load((out / "warp_patch.json").read_text())[SRC]["gamma_count_table"]
    assert [(r["deceptions"], r["images"]) for r in table] == [(1, 1), (2, 1)]
