"""Honest flags and undefined values (issue 15): a 0/0 metric is a null row noted "0/0"
(never 0), the leaderboard shows "n/a (reason)", ``silent_failure`` requires that false
positives did not rise, and the ``sha256`` column is recomputable with numpy + hashlib."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from PIL import Image

from _evalkit import CONDITIONS, gt_table, write_submission
from aegisbench import metrics as M
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.coco import map_from_arrays
from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
from aegisbench.evaluation.matching import match_images
from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.leaderboard.results import read_entry
from aegisbench.metrics import REGISTRY, ConditionContext, MetricRegistry, condition_cells
from aegisbench.predictions import Detections

FAST = EvaluationParams(bootstrap=BootstrapParams(n_resamples=200))
SRC = "synthetic_sar"
VANISH, FLOOD = CONDITIONS  # no detections at all / only false positives
FP_BOX = [1.0, 1.0, 9.0, 9.0]  # far from every GT box of the synthetic sources


# ------------------------------------------------------------------ helpers


def _table_row(md: str, heading: str, config: str) -> str:
    """The Markdown table row of ``config`` under the first ``### heading``."""
    part = md.split(f"### {heading}\n", 1)[1].split("\n### ", 1)[0]
    return next(line for line in part.splitlines() if line.startswith(f"| `{config}` |"))


def _gt_boxes(n_images: int, per_image: int) -> list[np.ndarray]:
    return [np.array([[20.0 + 30 * k, 100.0, 40.0 + 30 * k, 120.0] for k in range(per_image)]) for _ in range(n_images)]


def _fp_boxes(k: int) -> np.ndarray:
    return np.array([[2.0 + 12 * (j % 20), 2.0 + 12 * (j // 20), 10.0 + 12 * (j % 20), 10.0 + 12 * (j // 20)]
                     for j in range(k)]).reshape(-1, 4)


def _context(gt, found, fps, config, clean=None) -> ConditionContext:
    """A condition of the real matcher: image ``i`` finds its first ``found[i]`` GT boxes
    exactly and adds ``fps[i]`` false positives far from them."""
    boxes = [np.vstack([g[:f], _fp_boxes(k)]) for g, f, k in zip(gt, found, fps)]
    scores = [np.full(len(b), 0.9) for b in boxes]
    m = match_images(boxes, scores, gt)
    coco = map_from_arrays(boxes, scores, gt)
    return ConditionContext(track="sar", source="demo", config=config, kind="clean" if clean is None else "corruption",
                            threshold=0.5, counts=m.counts(0.5), match=m, coco=coco, clean=clean,
                            paired=True)


def _cells(ctx: ConditionContext, *names: str) -> dict:
    """The real per-condition functions of ``names`` run through :func:`condition_cells`."""
    reg = MetricRegistry()
    for prod in dict.fromkeys(REGISTRY.producer_of(name) for name in names):
        reg.register(*(REGISTRY[n] for n in prod.names), producer=prod)
    return dict(condition_cells(ctx, reg))


# ------------------------------------------------------------ silent failure


def test_silent_failure_requires_that_false_positives_did_not_rise():
    # water_glare s1 as the issue saw it: recall 1.0 -> 0.35, survivors exactly on target,
    # but 283 false positives (precision 28 / 311 = 0.09): an operator sees those, not silent
    gt = _gt_boxes(40, 2)
    clean = _context(gt, [2] * 40, [1] * 10 + [0] * 30, "clean")
    glare_fps = [8, 8, 8] + [7] * 37
    glare = _context(gt, [1] * 28 + [0] * 12, glare_fps, "water_glare_s1", clean)
    assert glare.pooled[1] == 283 and round(M.precision(glare.counts), 2) == 0.09
    cells = _cells(glare, "recall", "precision", "loc_iou", "silent_failure")
    assert cells["recall"].value == pytest.approx(0.35) and cells["loc_iou"].value == pytest.approx(1.0)
    assert cells["silent_failure"].value == 0.0
    # the same collapse with the false alarms of clean (or fewer): detections vanished without a sign
    for fps in ([1] * 10 + [0] * 30, [0] * 40):
        vanish = _context(gt, [1] * 28 + [0] * 12, fps, "water_glare_s1", clean)
        assert _cells(vanish, "silent_failure")["silent_failure"].value == 1.0
    # one more false positive than clean is a sign
    more = _context(gt, [1] * 28 + [0] * 12, [1] * 11 + [0] * 29, "water_glare_s1", clean)
    assert _cells(more, "silent_failure")["silent_failure"].value == 0.0
    # survivors that drift off target are not silent either (the rule kept from before)
    drift = [g[:1] + [0.0, 0.0, 12.0, 0.0] for g in gt]  # IoU 400 / 640 with GT and clean
    m = match_images(drift, [np.full(1, 0.9) for _ in gt], gt)
    ctx = ConditionContext(track="sar", source="demo", config="x_s1", kind="corruption", threshold=0.5,
                           counts=m.counts(0.5), match=m, coco=map_from_arrays(drift, [np.full(1, 0.9)] * 40, gt),
                           clean=clean, paired=True)
    assert 0.5 <= _cells(ctx, "loc_iou")["loc_iou"].value < 0.7
    assert _cells(ctx, "silent_failure")["silent_failure"].value == 0.0
    spec = REGISTRY["silent_failure"]
    assert "false positives per image" in spec.description and "not above clean" in spec.description


def test_silent_failure_is_null_without_ground_truth():
    gt = [np.zeros((0, 4))] * 3
    clean = _context(gt, [0] * 3, [0] * 3, "clean")
    corr = _context(gt, [0] * 3, [0] * 3, "low_light_s3", clean)
    cell = _cells(corr, "silent_failure")["silent_failure"]
    assert (cell.value, cell.note) == (None, "0/0")


# ------------------------------------------------------------------ 0/0 cells


def test_zero_over_zero_cells_are_null_with_note_and_no_interval():
    gt = _gt_boxes(4, 1)
    clean = _context(gt, [1] * 4, [0] * 4, "clean")
    blind = _context(gt, [0] * 4, [0] * 4, "low_light_s3", clean)
    c = _cells(blind, "precision", "recall", "f1", "relative_drop_recall")
    assert (c["precision"].value, c["precision"].interval, c["precision"].note, c["precision"].n) == (None, None,
                                                                                                       "0/0", 0)
    assert (c["recall"].value, c["recall"].note, c["f1"].value, c["f1"].note) == (0.0, None, 0.0, None)
    assert (c["relative_drop_precision"].value, c["relative_drop_precision"].note) == (None, "0/0")
    assert c["relative_drop_recall"].value == 1.0
    nothing = _context([np.zeros((0, 4))] * 2, [0, 0], [0, 0], "clean")  # no GT and no detection
    c = _cells(nothing, "precision", "recall", "f1", "map50")
    assert all(c[k].value is None and c[k].note == "0/0" and c[k].interval is None for k in c)
    with pytest.raises(ValueError, match="note"):
        M.Cell(None, note="")


# ---------------------------------------------------- end to end: evaluate + leaderboard


@pytest.fixture(scope="module")
def scored(tmp_path_factory, repo, index):
    """One evaluated submission: no detections at all on VANISH, only false positives on
    FLOOD, the GT boxes elsewhere; and the leaderboard built from it."""
    tmp = tmp_path_factory.mktemp("undefined")
    table = gt_table(index, "sar", skip=[(VANISH, SRC), (FLOOD, SRC)])
    for image_id in index.gt(FLOOD, SRC).image_ids:
        table[(FLOOD, SRC, image_id)] = Detections(np.array([FP_BOX]), np.array([0.95]))
    folder = write_submission(tmp / "blind", index, "sar", table, no_detections=[f"{VANISH}/{SRC}"])
    out = evaluate_submission(folder, repo, tmp / "results", FAST, verify=False)
    lb = tmp / "lb"
    build_leaderboard(tmp / "results", repo, lb, metrics=tmp / "metrics.json", plots=tmp / "plots")
    return out, lb, tmp


def test_no_detections_give_null_precision_noted_zero_over_zero(scored, index):
    out, _, _ = scored
    df = pl.read_parquet(out / "metrics.parquet")
    m = {(r["config"], r["metric"]): r for r in df.filter(pl.col("source") == SRC).iter_rows(named=True)}
    p = m[(VANISH, "precision")]
    assert (p["value"], p["lo"], p["hi"], p["note"], p["n"]) == (None, None, None, "0/0", 0)
    r = m[(VANISH, "recall")]
    assert (r["value"], r["lo"], r["hi"], r["note"]) == (0.0, 0.0, 0.0, None)
    assert (m[(VANISH, "relative_drop_precision")]["value"], m[(VANISH, "relative_drop_precision")]["note"]) == (
        None, "0/0")
    assert m[(FLOOD, "precision")]["value"] == 0.0 and m[(FLOOD, "precision")]["note"] is None  # 0 / n: defined
    # the vanish is silent; the flood of false positives (clean has none) is not
    assert m[("clean", "fp")]["value"] == 0 and m[(FLOOD, "fp")]["value"] == len(index.gt(FLOOD, SRC))
    assert m[(VANISH, "silent_failure")]["value"] == 1.0 and m[(FLOOD, "silent_failure")]["value"] == 0.0
    assert m[(FLOOD, "recall")]["value"] == 0.0
    # a null value always says why; a value never carries a note
    assert df.filter(pl.col("value").is_null() & pl.col("note").is_null()).height == 0
    assert df.filter(pl.col("value").is_not_null() & pl.col("note").is_not_null()).height == 0
    assert read_entry(out).metrics.filter(pl.col("note") == "0/0").height == df.filter(pl.col("note") == "0/0").height


def test_leaderboard_shows_zero_over_zero_as_na_never_as_zero(scored):
    _, lb, _ = scored
    md = (lb / "README.md").read_text()
    prec = _table_row(md, "Precision per condition", VANISH)
    assert "n/a (0/0)" in prec and "0.000" not in prec and "⛔" not in prec
    assert "⚠" in prec  # the silent-failure mark of that condition is kept
    assert "⚠" not in _table_row(md, "Recall per condition", FLOOD)
    assert "⛔" in _table_row(md, "Recall per condition", VANISH)  # recall 0 [0, 0] is a real collapse
    site = (lb / "site" / "index.html").read_text()
    # on the page as visible text (no hover-only title): n/a, its reason and the silent-failure mark
    assert re.search(rf'class="cell silent na" data-config="{VANISH}"[^>]*><span class="v">n/a</span>'
                     r'<span class="ci">\(0/0\)</span><span class="mk">⚠</span>', site)
    assert "title=" not in site
    long = pl.read_parquet(lb / "leaderboard.parquet")
    row = long.filter((pl.col("config") == VANISH) & (pl.col("metric") == "precision") & (pl.col("source") == SRC))
    assert row["value"].to_list() == [None] and row["note"].to_list() == ["0/0"]


# ------------------------------------------- a results table with "not physical for thermal"

SCHEMA = {"submission": pl.String, "track": pl.String, "source": pl.String, "config": pl.String,
          "corruption": pl.String, "family": pl.String, "severity": pl.Int64, "metric": pl.String,
          "value": pl.Float64, "lo": pl.Float64, "hi": pl.Float64, "n": pl.Int64}
DIGEST, EV = "e" * 64, "ev-test"


def _result(root: Path, sub: str, rows: list[tuple], note: bool = True) -> None:
    """A results folder as the evaluator writes it (``note`` False: a table from before the column)."""
    folder = root / sub
    folder.mkdir(parents=True)
    data = []
    for config, metric, value, lo, hi, why in rows:
        corr, sev = (None, 0) if config == "clean" else (config.rsplit("_s", 1)[0], int(config.rsplit("_s", 1)[1]))
        fam = {"water_glare": "flood", "low_light": "storm"}.get(corr)
        r = {"submission": sub, "track": "sar", "source": "thermal_set", "config": config, "corruption": corr,
             "family": fam, "severity": sev, "metric": metric, "value": value, "lo": lo, "hi": hi, "n": 50}
        data.append({**r, "note": why} if note else r)
    pl.DataFrame(data, schema={**SCHEMA, **({"note": pl.String} if note else {})}).write_parquet(
        folder / "metrics.parquet")
    (folder / "provenance.json").write_text(json.dumps({
        "submission": sub, "name": sub, "team": "t", "model": sub, "track": "sar", "dataset_version": "0.1.0",
        "dataset_digest": DIGEST, "evaluator_version": EV, "frozen_threshold": 0.5}))


def test_not_physical_rows_are_one_note_per_source(tmp_path):
    """Issue 33 item 3: a condition not built for the source's sensor is no row, column or
    cell (not even an n/a one, nor another model's null cell of it): one note names it."""
    thermal = "not physical for thermal"
    _result(tmp_path / "results", "irnet", [
        ("clean", "recall", 0.8, 0.7, 0.9, None), ("low_light_s1", "recall", 0.6, 0.5, 0.7, None),
        ("water_glare_s1", "recall", None, None, None, thermal),
        ("clean", "precision", 0.9, 0.8, 1.0, None), ("water_glare_s1", "precision", None, None, None, thermal),
        ("low_light_s1", "precision", 0.0, 0.0, 0.0, None)])
    _result(tmp_path / "results", "older", [  # written before the note column: every note null
        ("clean", "recall", 0.5, 0.4, 0.6, None), ("water_glare_s1", "recall", None, None, None, None)], note=False)
    data = tmp_path / "data"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"format": 2, "benchmark_version": "0.0.0", "dataset_digest": DIGEST,
                                                    "files": {}, "configs": {}}))
    rep = build_leaderboard(tmp_path / "results", data, tmp_path / "lb", evaluator_version=EV,
                            metrics=tmp_path / "m.json", plots=tmp_path / "plots")
    assert rep.merged == ("irnet", "older") and not rep.skipped
    md = (tmp_path / "lb" / "README.md").read_text()
    note = "Not built for thermal\\_set (thermal sensor): 1 condition whose physics does not hold for it"
    assert md.count(note) == 1 and "`water_glare` (s1)" in md and thermal not in md
    for heading in ("Recall per condition", "Precision per condition"):
        with pytest.raises(StopIteration):
            _table_row(md, heading, "water_glare_s1")
    assert "⛔" in _table_row(md, "Precision per condition", "low_light_s1")  # a real 0 [0, 0] keeps its mark
    site = (tmp_path / "lb" / "site" / "index.html").read_text()
    assert 'data-config="water_glare_s1"' not in site and thermal not in site
    assert re.search(r'<p class="sensor-note" id="not-built-sar-thermal_set">Not built for thermal_set '
                     r'\(thermal sensor\): 1 condition [^<]*water_glare \(s1\)\.</p>', site)  # visible, no hover
    model_page = (tmp_path / "lb" / "site" / "models" / "irnet.html").read_text()
    assert "water_glare_s1" not in model_page and model_page.count('class="sensor-note"') == 1
    doc = json.loads((tmp_path / "m.json").read_text())  # the compact `dvc metrics show` summary
    cond = doc["irnet"]["thermal_set"]["recall"]
    assert cond["floor_at"] == "low_light_s1" and cond["floor"] == 0.6  # the null cell is no floor
    assert "not physical" not in json.dumps(doc) and "NaN" not in (tmp_path / "m.json").read_text()
    assert rep.plots and all((tmp_path / "plots" / name).read_text().lstrip().startswith("<?xml")
                             for name in rep.plots if name.endswith(".svg"))
    assert not any("water_glare" in name for name in rep.plots)  # not built: no curve
    long = pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")
    assert long.filter(pl.col("submission") == "older")["note"].null_count() == 2
    fam = pl.read_parquet(tmp_path / "lb" / "views" / "family_summary.parquet")
    assert fam.filter((pl.col("family") == "flood") & (pl.col("submission") == "irnet")).height == 0


# ------------------------------------------------------------------ sha256


def test_sha256_column_is_the_documented_recipe(repo, index):
    """README: sha256 = SHA-256 of b"<dtype.str>|<H>x<W>x<C>|" + the decoded pixels' C-order bytes."""
    manifest = json.loads((repo / "manifest.json").read_text())
    checked = 0
    for config in ("clean", VANISH):
        shard = manifest["configs"][config]["splits"][SRC]["shards"][0]
        for r in pq.read_table(repo / shard["path"], columns=["image", "image_id", "sha256"]).to_pylist():
            pixels = np.asarray(Image.open(io.BytesIO(r["image"]["bytes"])).convert("RGB"))
            h, w, c = pixels.shape
            header = f"|u1|{h}x{w}x{c}|".encode("ascii")
            digest = hashlib.sha256(header + np.ascontiguousarray(pixels, dtype=np.uint8).tobytes()).hexdigest()
            assert digest == r["sha256"] == shard["images"][r["image_id"]]
            assert hashlib.sha256(pixels.tobytes()).hexdigest() != r["sha256"]  # the header is part of it
            checked += 1
    assert checked == 2 * len(index.gt("clean", SRC))
