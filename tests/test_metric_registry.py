"""The metric registry: every row the evaluator writes names a registered metric (real
evaluations of a detection track and of fire spread), every list of shown metrics names
registered ones, and a new per-condition metric is one registered function that reaches
the results, with its bootstrap interval, and the leaderboard."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _evalkit import gt_table, write_submission
from aegisbench import metrics as M
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.warp_eval import patch_boxes
from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.predictions import write_parquet_predictions

ROOT = Path(__file__).resolve().parents[1]
FAST = EvaluationParams(bootstrap=BootstrapParams(n_resamples=100))


def _noisy(index, track: str) -> dict:
    """GT boxes jittered, with scores spread out and one image in four missed (the second, sixth,
    ... of each config's split, so a split keeps predictions whatever the draw of the fixture)."""
    rng = np.random.default_rng(0)
    table = gt_table(index, track, score=lambda c, s, i, k: np.round(rng.uniform(0.3, 1.0, k), 3),
                     shift=lambda c, s: rng.normal(0, 2.5, 4))
    groups: dict[tuple, list] = {}
    for key in sorted(table):
        groups.setdefault(key[:2], []).append(key)
    for keys in groups.values():
        for k in keys[1::4]:
            table.pop(k)
    assert len(groups) > 1 and any(len(keys) > 1 for keys in groups.values())  # some image is missed
    return table


def _warp_patch(index, folder: Path) -> None:
    """A WARP patch file: the GT box at most positions, a decoy box on some patches."""
    g = index.gt("clean", "synthetic_smoke")
    rows = []
    for k, image_id in enumerate(g.image_ids):
        if not len(g.boxes[k]):
            continue
        pb = patch_boxes(int(g.width[k]), int(g.height[k]), 25)
        for j in range(625):
            boxes = [] if (j + k) % 5 == 0 else [g.boxes[k][0]]
            boxes += [pb[j]] if j % 37 == 0 else []
            rows += [{"split": "synthetic_smoke", "image_id": image_id, "position": j, "row": j // 25, "col": j % 25,
                      "x1": float(b[0]), "y1": float(b[1]), "x2": float(b[2]), "y2": float(b[3]), "score": 0.95}
                     for b in boxes]
    pq.write_table(pa.Table.from_pylist(rows), folder / "warp_patch.parquet")


def _warp_noise(index, folder: Path, table: dict) -> None:
    """A WARP noise sweep file: the submission's clean test boxes at two levels, fewer at the second."""
    rows = {}
    for (config, split, image_id), det in table.items():
        if config == "clean" and not split.endswith("_val"):
            rows[("warp_noise_100", split, image_id)] = det
            if len(rows) % 2:
                rows[("warp_noise_210", split, image_id)] = det
    write_parquet_predictions(rows, folder / "warp_noise.parquet")


def _check_rows(df: pl.DataFrame) -> None:
    """Every row names a registered metric of its track, inside its bounds, with an
    interval only where the spec declares one."""
    assert not M.REGISTRY.unregistered(df["metric"].to_list()), M.REGISTRY.unregistered(df["metric"].to_list())
    for r in df.iter_rows(named=True):
        spec = M.REGISTRY[r["metric"]]
        assert r["track"] in spec.tracks, (r["track"], r["metric"])
        if r["value"] is not None and math.isfinite(r["value"]):
            assert spec.within(r["value"]), (r["metric"], r["value"], spec.bounds)
        if not spec.interval:
            assert r["lo"] is None or math.isnan(r["lo"]), (r["metric"], r["lo"])


def test_specs_are_validated_and_duplicates_refused():
    ok = dict(tracks=("sar",), direction=M.HIGHER, label="X", description="An x.")
    for bad in ({"name": "Not_snake"}, {"direction": "up"}, {"tracks": ("ocean",)}, {"bounds": (1, 0)},
                {"label": ""}, {"description": "two\nlines"}, {"full_scale": True},
                {"track_labels": {"smoke": "X on smoke"}}):
        with pytest.raises(ValueError):
            M.MetricSpec(**{"name": "x_metric", **ok, **bad})
    reg = M.MetricRegistry()
    reg.register(M.MetricSpec("x_metric", **ok))
    with pytest.raises(ValueError, match="already registered"):
        reg.register(M.MetricSpec("x_metric", **ok))
    def recall(ctx):
        return 0.0

    with pytest.raises(ValueError, match="already registered"):  # an existing name, by decorator
        M.metric(direction=M.HIGHER, label="Recall again", description="Again.")(recall)
    with pytest.raises(ValueError, match="not registered"):
        M.selection("recall", "f2r_f1")
    assert M.REGISTRY["recall"].label_for("firespread") == "F2R recall" and M.label("recall", "sar") == "Recall"
    assert M.label("unknown_metric") == "unknown_metric" and M.sign("unknown_metric") is None


def test_a_function_returning_a_name_it_did_not_register_is_refused():
    reg = M.MetricRegistry()
    group = [M.MetricSpec("toy_a", ("sar",), M.HIGHER, "Toy a", "A toy.")]

    @M.metric_group(group, registry=reg)
    def toy_group(ctx):
        return {"toy_a": 1.0, "toy_b": 2.0}

    ctx = M.ConditionContext(track="sar", source="s", config="clean", kind="clean", threshold=0.5,
                             counts=np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="toy_b"):
        M.condition_cells(ctx, reg)
    assert [p.name for p in reg.producers("sar")] == ["toy_group"] and reg.producers("smoke") == []


@pytest.mark.parametrize("track", ["sar", "smoke"])
def test_every_row_of_a_detection_evaluation_is_registered(tmp_path, repo, index, track):
    table = _noisy(index, track)
    folder = write_submission(tmp_path / f"noisy_{track}", index, track, table)
    if track == "smoke":
        _warp_patch(index, folder)
        _warp_noise(index, folder, table)
    out = evaluate_submission(folder, repo, tmp_path / "results", FAST, verify=False)
    df = pl.read_parquet(out / "metrics.parquet")
    _check_rows(df)
    names = set(df["metric"].to_list())
    assert {"tp", "recall", "map50", "relative_drop_map50", "effectiveness", "frozen_threshold"} <= names
    assert names & set(M.RECALL_BY_SIZE.names.values()) and names & set(M.EFFECTIVENESS_BY_SIZE.names.values())
    if track == "smoke":  # the smoke practice rows, the WARP noise sweep and the patch test
        assert {"image_f1", "time_to_detect_min", "sequences_detected", "warp_map_loss", "alpha", "gamma",
                "gamma_positions"} <= names
        assert {"warp_noise_100", "warp_noise_210"} <= set(df.filter(pl.col("metric") == "warp_map_loss")["config"])
    assert names <= set(M.REGISTRY.names(track))


def test_every_row_of_a_firespread_evaluation_is_registered(tmp_path):
    from aegisbench.builders.firespread import build_firespread_repo
    from aegisbench.forecasters.baselines import write_baselines
    from aegisbench.evaluation.firespread_track import STRATA_FILE
    params = {"grid": [16, 16], "realizations": 24, "s_levels": [0, 30], "initial_conditions": 4,
              "test_initial_conditions": [2, 3], "realizations_per_shard": 10,
              "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}
    build_firespread_repo(params, "0.1.0", tmp_path / "repo")
    write_baselines(tmp_path / "repo", tmp_path / "subs", names=("spread_heuristic",))
    out = evaluate_submission(tmp_path / "subs" / "firespread_spread_heuristic", tmp_path / "repo",
                              tmp_path / "results", FAST)
    for name in ("metrics.parquet", STRATA_FILE):
        df = pl.read_parquet(out / name)
        _check_rows(df)
        assert {"brier", "ece", "ece_seed003", "ece_floor", "oracle_brier", "recall", "brier_sd_maps"} <= set(
            df["metric"].to_list())
    # the page and the fire-spread report label the shared names as F2R, from the registry
    build_leaderboard(tmp_path / "results", tmp_path / "repo", tmp_path / "lb")
    md = (tmp_path / "lb" / "README.md").read_text()
    assert "### F2R F1 per condition" in md and "### F2S Brier per condition" in md
    report = (tmp_path / "lb" / "firespread" / "README.md").read_text()
    assert "| F2R F1 | F2R precision | F2R recall | F2R AP |" in report and "| ECE floor |" in report
    assert "| F2S ECE | F2S ECE, seed 003 (per map) | ECE floor |" in report  # seed 003's ECE beside ours


def test_view_selections_and_the_committed_leaderboard_name_registered_metrics():
    from aegisbench.leaderboard import firespread_report as report
    from aegisbench.evaluation.firespread_scoring import SD_METRICS
    from aegisbench.leaderboard import markdown, site, tables
    lists = {"DETECTION_HEAT": tables.DETECTION_HEAT, "F2R_HEAT": tables.F2R_HEAT, "F2S_HEAT": tables.F2S_HEAT,
             "DETECTION_MARKDOWN": markdown.DETECTION_MARKDOWN, "WARP_PATCH_METRICS": markdown.WARP_PATCH_METRICS,
             "CURVES": sorted(site.CURVES), "TABLE_METRICS": report.TABLE_METRICS,
             "SD_METRICS": [M.SD_MAPS.name_of(m) for m in SD_METRICS],
             **{f"MARKDOWN_METRICS[{k}]": v for k, v in markdown.MARKDOWN_METRICS.items()}}
    assert {k: M.REGISTRY.unregistered(v) for k, v in lists.items() if M.REGISTRY.unregistered(v)} == {}
    committed = set(pl.read_parquet(ROOT / "leaderboard" / "leaderboard.parquet")["metric"].to_list())
    assert M.REGISTRY.unregistered(committed) == []
    # every committed name now has a declared direction, and the unordered ones are the
    # reference values and spreads, not scores left out of a hand-written list
    unordered = {m for m in committed if M.REGISTRY[m].sign is None}
    # (label_match: the share of kept boxes that copy a test label, a trust signal, not a score)
    assert unordered == {"frozen_threshold", "ece_floor", "oracle_brier", "brier_uncertainty", "brier_residual",
                         "time_to_detect_min_sd", "time_to_detect_frames_sd", "label_match",
                         *M.SD_MAPS.names.values()}


def test_a_registered_toy_metric_reaches_results_and_leaderboard(tmp_path, repo, index):
    # an interval needs two test images with boxes: the first track whose tiny draw has them
    track, split = next(((tr, sp) for tr, sp in (("sar", "synthetic_sar"), ("smoke", "synthetic_smoke"))
                         if sum(len(b) > 0 for b in index.gt("clean", sp).boxes) >= 2), (None, None))
    assert track is not None, "the tiny fixture has no test split with two images holding boxes"
    folder = write_submission(tmp_path / "toy_sub", index, track, _noisy(index, track), name="Toy model")
    with M.REGISTRY.scoped():
        @M.metric(direction=M.HIGHER, label="Toy hit rate", bounds=(0, 1), interval=True,
                  description="Recall again, as a bare function of the per-image counts (toy).")
        def toy_hit_rate(ctx):
            tp, _, fn = ctx.pooled
            return tp / (tp + fn) if tp + fn else None

        out = evaluate_submission(folder, repo, tmp_path / "results", FAST, verify=False)
        df = pl.read_parquet(out / "metrics.parquet")
        toy = {r["config"]: r for r in df.filter(pl.col("metric") == "toy_hit_rate").iter_rows(named=True)}
        rec = {r["config"]: r for r in df.filter(pl.col("metric") == "recall").iter_rows(named=True)}
        assert set(toy) == set(rec) and len(toy) >= 3  # every condition of the source
        n_images = {c: len(index.gt(c, split)) for c in toy}
        for config, r in toy.items():
            assert r["value"] == pytest.approx(rec[config]["value"]) and r["n"] == n_images[config]
            # the generic interval re-weights the split's one shared draw: recall's own interval
            assert (r["lo"], r["hi"]) == pytest.approx((rec[config]["lo"], rec[config]["hi"]))
        assert any(r["lo"] < r["hi"] for r in toy.values())
        build_leaderboard(tmp_path / "results", repo, tmp_path / "lb", references=["toy_sub"])
        page = (tmp_path / "lb" / "site" / "models" / "toy_sub.html").read_text()
        # the label with its direction, from the registry (no raw key on the page)
        assert ">Toy hit rate (higher is better)</th>" in page and "Recall again, as a bare function" in page
        index_page = (tmp_path / "lb" / "site" / "index.html").read_text()
        assert '<th scope="row">Toy hit rate</th><td>higher</td>' in index_page  # the glossary row
        assert "toy_hit_rate" not in index_page
        md = (tmp_path / "lb" / "README.md").read_text()
        assert "| `toy_hit_rate` | Toy hit rate | higher | [0, 1] |" in md
        floors = pl.read_parquet(tmp_path / "lb" / "views" / "floor.parquet")
        assert "toy_hit_rate" in floors["metric"].to_list()  # ranked and floored by its direction
    assert "toy_hit_rate" not in M.REGISTRY


def test_registration_order_does_not_depend_on_what_is_imported_first():
    """Every output lists metrics in registration order (the glossary, the long table): the
    per-condition metrics, then the ones a scorer declares, whichever module a process
    imports first."""
    import subprocess
    import sys

    firsts = ["aegisbench.metrics.declared", "aegisbench.metrics.per_condition", "aegisbench.evaluation.scoring",
              "aegisbench.leaderboard.aggregate", "aegisbench.metrics.registry"]
    orders = set()
    for first in firsts:
        code = (f"import {first}\nfrom aegisbench.metrics.registry import REGISTRY\n"
                "print(' '.join(REGISTRY.names()))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        assert out.index("tp") == 0 and out.index("sequences_detected") < out.index("frozen_threshold"), (first, out)
        orders.add(tuple(out))
    assert len(orders) == 1
