"""The static site in a real browser: headless Chromium opens index.html from file://,
a screenshot is saved and the heat-map table is read back from the DOM.

The fixture is a paper-like multi-model results tree (seed 004's headline numbers where
the paper gives them, smooth made-up values elsewhere) with collapses, ties, a stale
and a malformed folder, and a fire-spread track.
"""

from __future__ import annotations

import json
import math
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import cv2
import numpy as np
import polars as pl
import pytest

from aegisbench.hashing import rng_for
from aegisbench.leaderboard.build import build_leaderboard
from test_leaderboard import DIGEST, EV, FAMILY, fake_dataset, row, write_result

CHROMIUM = Path("/usr/bin/chromium")
CORRUPTIONS = list(FAMILY)
# recall kept at severity 3 relative to clean, per source (seed 004: flood mildest; rain/blur
# mild on SARD, near-total on HERIDAL; low light zero everywhere)
KEEP_S3 = {
    "sard": {"water_glare": .86, "turbidity_cast": .80, "inundation": .76, "smoke_haze": .44, "fire_warm_tint": .70,
             "rain_streaks": .93, "motion_blur": .45, "low_light": 0.0, "dust_haze": .065},
    "heridal": {"water_glare": .80, "turbidity_cast": .72, "inundation": .66, "smoke_haze": .33,
                "fire_warm_tint": .58, "rain_streaks": .04, "motion_blur": .002, "low_light": 0.0, "dust_haze": .18},
}
CLEAN = {"sard": {"frcnn": .879, "yolo11": .891, "rtdetr": .884, "yolo11_aug": .874},
         "heridal": {"frcnn": .745, "yolo11": .768, "rtdetr": .792}}
MODELS = {"frcnn": ("Faster R-CNN R50-FPN", "Aegis baselines", 0.41),
          "yolo11": ("YOLOv11-m", "Aegis baselines", 0.28),
          "rtdetr": ("RT-DETR-L", "Aegis baselines", 0.46),
          "yolo11_aug": ("YOLOv11-m + low-light aug", "Night Ops Lab", 0.31)}
N_GT = {"sard": 620, "heridal": 410}


def _interval(p: float, n: int) -> tuple[float, float]:
    if p <= 0:
        return 0.0, 0.0
    w = 1.96 * math.sqrt(max(p * (1 - p), 1.0 / n) / n)
    return round(max(0.0, p - w), 4), round(min(1.0, p + w), 4)


def _detection_rows(sub: str, source: str) -> list[dict]:
    rows, n = [], N_GT[source]
    clean_r = CLEAN[source][sub]
    fp_clean = {"frcnn": 33, "yolo11": 41, "rtdetr": 28, "yolo11_aug": 45}[sub]
    conds = [("clean", None, 0)] + [(f"{c}_s{s}", c, s) for c in CORRUPTIONS for s in (1, 2, 3)]
    for config, corr, sev in conds:
        rng = rng_for("leaderboard-fixture", sub, source, config)
        if corr is None:
            r = clean_r
        else:
            k3 = KEEP_S3[source][corr]
            keep = {1: 1 - (1 - k3) * 0.35, 2: 1 - (1 - k3) * 0.7, 3: k3}[sev]
            if corr == "low_light":
                keep = {1: 0.21, 2: 0.035, 3: 0.0}[sev]
            r = 0.0 if keep == 0 else min(1.0, clean_r * keep * float(1 + rng.normal(0, 0.07)))
            if source == "heridal" and corr == "motion_blur" and sev == 3:
                r = {"frcnn": 0.0, "yolo11": 0.001, "rtdetr": 0.003}[sub]
            if sub == "yolo11_aug":  # seed 004: augmentation lifts the low-light floor, costs a little elsewhere
                r = {1: 0.552, 2: 0.391, 3: 0.188}[sev] if corr == "low_light" else max(0.0, r - 0.019)
        r = round(r, 4)
        tp = round(r * n)
        fp = fp_clean * (1 + 0.4 * sev) if corr not in ("low_light", "motion_blur") else fp_clean * max(0.0, 1 - 0.45 * sev)
        if corr == "water_glare":
            fp = {1: 2.5, 2: 5.0, 3: 19.8 if sub == "frcnn" else 7.0}[sev] * fp_clean
        fp = float(round(fp))
        prec = tp / (tp + fp) if tp + fp else float("nan")
        f1 = 2 * prec * r / (prec + r) if tp else 0.0
        m50 = round(min(1.0, r * 0.97 + 0.02 * float(rng.random())), 4) if r else 0.0
        drop = 1 - r / clean_r
        lo, hi = _interval(r, n)
        rows += [row(sub, config, "recall", r, lo, hi, source=source, n=n),
                 row(sub, config, "tp", float(tp), source=source, n=n),
                 row(sub, config, "fp", fp, max(0.0, fp - 2 * math.sqrt(fp)), fp + 2 * math.sqrt(fp), source=source, n=n),
                 row(sub, config, "fn", float(n - tp), source=source, n=n),
                 row(sub, config, "map50", m50, *_interval(m50, n), source=source, n=n),
                 row(sub, config, "f1", round(f1, 4), *_interval(f1, n), source=source, n=n),
                 row(sub, config, "silent_failure", 1.0 if r < 0.1 * clean_r else 0.0, source=source, n=n)]
        if math.isnan(prec):
            rows.append(row(sub, config, "precision", float("nan"), source=source, n=n))
        else:
            rows.append(row(sub, config, "precision", round(prec, 4), *_interval(prec, tp + int(fp)), source=source, n=n))
        if config != "clean":
            rows.append(row(sub, config, "relative_drop_recall", round(drop, 4),
                            round(1 - hi / clean_r, 4), round(1 - lo / clean_r, 4), source=source, n=n))
    return rows


def _firespread_rows(sub: str) -> list[dict]:
    """Rows shaped like the fire-spread evaluator's: plain metric names, family ``firespread``,
    corruption ``stochasticity``, severity = S-level, pooled + per-frame + stratified cells."""
    rows = []
    for level in (10, 30, 50):
        base = {"ca_ensemble": 0.0, "unet": 0.08}[sub]
        sev = level // 20 + 1
        cfg = f"firespread_s{level}"
        for t, stratum in ((None, "all"), (1, "all"), (2, "all"), (None, "var_z:low"), (None, "var_z:high")):
            rng = rng_for("leaderboard-fixture", sub, level, t, stratum)
            f1 = round(0.82 - 0.12 * sev - base + 0.02 * float(rng.random()), 4)
            brier = round(0.05 + 0.035 * sev + base / 2 + 0.005 * float(rng.random()), 4)
            ece = round(0.02 + 0.015 * sev + base / 3, 4)
            for metric, v, w in (("f1", f1, .03), ("precision", f1 + .04, .03), ("recall", f1 - .03, .03),
                                 ("average_precision", f1 + .02, .025), ("brier", brier, .006), ("ece", ece, .004),
                                 ("excess_brier", round(brier - 0.04, 4), .005), ("brier_uncertainty", 0.2, .01),
                                 ("f1_sd_maps", 0.05, None)):
                lo, hi = (None, None) if w is None else (round(v - w, 4), round(v + w, 4))
                rows.append({**row(sub, cfg, metric, v, lo, hi, source="firespread", track="firespread", n=4096),
                             "corruption": "stochasticity", "family": "firespread", "severity": level,
                             "t": t, "stratum": stratum, "n_units": 8})
    return rows


def paper_like_results(root: Path) -> Path:
    """A realistic results tree: 4 SAR submissions on 2 sources, 2 fire-spread ones, 2 bad folders."""
    for sub, (model, team, thr) in MODELS.items():
        rows = [r for source in CLEAN if sub in CLEAN[source] for r in _detection_rows(sub, source)]
        write_result(root, sub, rows, model=model, team=team, threshold={"sard": thr, "heridal": thr + 0.03},
                     params_sha256="5" * 64)
    for sub, model in (("ca_ensemble", "CA ensemble mean (N=100)"), ("unet", "U-Net burn-probability")):
        write_result(root, sub, _firespread_rows(sub), model=model, team="Fire modelling group",
                     track="firespread", threshold=None)
    write_result(root, "detr_2024", [row("detr_2024", "clean", "recall", 0.7, 0.65, 0.75, source="sard")],
                 model="DETR (old run)", digest="0" * 64)
    bad = write_result(root, "broken_upload", [row("broken_upload", "clean", "recall", 0.5, source="sard")])
    (bad / "metrics.parquet").write_bytes(b"truncated")
    return root


def chromium(*args: str, tmp: Path, timeout: int = 60) -> subprocess.CompletedProcess:
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
           f"--user-data-dir={tmp / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


class HeatReader(HTMLParser):
    """Collect {table id: {submission: {config: (value text, interval text, classes)}}}."""

    def __init__(self):
        super().__init__()
        self.tables: dict = {}
        self.order: dict = {}  # table id -> submissions in row order
        self.cols: dict = {}  # table id -> {config: sort column}
        self.table = self.sub = self.cell = self.span = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "heat" in (a.get("class") or ""):
            self.table = self.tables.setdefault(a["id"], {})
            self.order[a["id"]], self.cols[a["id"]] = [], {}
            self.tid = a["id"]
        elif tag == "th" and self.table is not None and "data-col" in a and "data-config" in a:
            self.cols[self.tid][a["data-config"]] = a["data-col"]
        elif tag == "tr" and self.table is not None and "data-submission" in a:
            self.sub = self.table.setdefault(a["data-submission"], {})
            self.order[self.tid].append(a["data-submission"])
        elif tag == "td" and self.sub is not None and "data-config" in a:
            self.cell = {"v": "", "ci": "", "cls": a.get("class", ""), "config": a["data-config"]}
        elif tag == "span" and self.cell is not None:
            self.span = a.get("class")

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.sub[self.cell["config"]] = self.cell
            self.cell = None
        elif tag == "span":
            self.span = None
        elif tag == "table":
            self.table = self.sub = None

    def handle_data(self, data):
        if self.cell is not None and self.span in ("v", "ci"):
            self.cell[self.span] += data


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("site")
    results = paper_like_results(tmp / "results")
    rep = build_leaderboard(results, fake_dataset(tmp / "data"), tmp / "leaderboard", evaluator_version=EV)
    return tmp, rep


def test_fixture_build_merges_current_and_skips_bad(site):
    tmp, rep = site
    assert rep.merged == ("ca_ensemble", "frcnn", "rtdetr", "unet", "yolo11", "yolo11_aug")
    assert [(s.folder, s.problem) for s in rep.skipped] == [("broken_upload", "malformed"), ("detr_2024", "stale")]
    long = pl.read_parquet(tmp / "leaderboard" / "leaderboard.parquet")
    sard = long.filter((pl.col("source") == "sard") & (pl.col("metric") == "recall"))
    assert sard.height == 4 * 28  # 4 models x 28 conditions, each its own row
    ll3 = sard.filter(pl.col("config") == "low_light_s3")
    assert ll3.sort("submission")["value"].to_list() == [0.0, 0.0, 0.0, 0.188]


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed at /usr/bin/chromium "
                                                   "(apt-get install -y chromium)")
def test_page_in_headless_chromium(site, tmp_path):
    tmp, _ = site
    index = tmp / "leaderboard" / "site" / "index.html"
    url = index.resolve().as_uri()
    dom = chromium("--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'class="js-ready"' in dom.stdout  # the inline sorting script ran without error
    reader = HeatReader()
    reader.feed(dom.stdout)
    heat = reader.tables["heat-sar-sard-recall"]
    long = pl.read_parquet(tmp / "leaderboard" / "leaderboard.parquet")
    want = long.filter((pl.col("track") == "sar") & (pl.col("source") == "sard") & (pl.col("metric") == "recall"))
    assert set(heat) == set(want["submission"].to_list())
    for r in want.iter_rows(named=True):
        cell = heat[r["submission"]][r["config"]]
        two = [f"{x:.2f}".removeprefix("0") for x in (r["lo"], r["hi"])]  # ".71", "1.00"
        assert cell["v"] == f"{r['value']:.3f}"
        assert cell["ci"] == ("[0, 0]" if r["lo"] == r["hi"] == 0 else "–".join(two))
        assert ("collapse" in cell["cls"].split()) == (r["value"] == 0 and r["lo"] == 0 and r["hi"] == 0)
    assert sum("floor" in c["cls"].split() for c in heat["yolo11_aug"].values()) == 1  # low_light is not its floor
    assert "heat-sar-heridal-fp" in reader.tables and "heat-firespread-firespread-f1" in reader.tables
    assert "heat-firespread-firespread-brier" in reader.tables  # F2R and F2S side by side
    pooled = long.filter((pl.col("track") == "firespread") & (pl.col("metric") == "brier") & pl.col("t").is_null()
                         & (pl.col("stratum") == "all"))
    brier = reader.tables["heat-firespread-firespread-brier"]
    assert {(s, c) for s, cs in brier.items() for c in cs} == set(pooled.select("submission", "config").iter_rows())
    for r in pooled.iter_rows(named=True):  # the heat map shows the pooled cell, not a frame or a stratum
        assert brier[r["submission"]][r["config"]]["v"] == f"{r['value']:.3f}"

    # the sortable tables really sort: an address #sort=TABLE:COLUMN:DIR sorts on load, like a click
    alphabetical = reader.order["heat-sar-sard-recall"]
    assert alphabetical == ["frcnn", "rtdetr", "yolo11", "yolo11_aug"]  # no overall rank: rows by name
    for config, direction in (("low_light_s3", "desc"), ("clean", "asc")):
        col = reader.cols["heat-sar-sard-recall"][config]
        value = {r["submission"]: r["value"] for r in want.filter(pl.col("config") == config).iter_rows(named=True)}
        expect = sorted(alphabetical, key=lambda s: value[s] if direction == "asc" else -value[s])  # stable
        assert expect != alphabetical
        sorted_dom = chromium("--dump-dom", f"{url}#sort=heat-sar-sard-recall:{col}:{direction}", tmp=tmp_path)
        again = HeatReader()
        again.feed(sorted_dom.stdout)
        assert again.order["heat-sar-sard-recall"] == expect, (config, direction)

    shot = tmp_path / "index.png"
    res = chromium(f"--screenshot={shot}", "--window-size=1720,2300", url, tmp=tmp_path)
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    assert "<code>low_light_s3</code> — all 4 models" not in dom.stdout  # the augmented model did not collapse
    assert "<code>low_light_s3</code> — all 3 models" in dom.stdout  # HERIDAL: every model did
    img = cv2.imread(str(shot))
    assert img.shape[:2] == (2300, 1720)
    # the heat map is drawn: the collapse red and the good blue of the colour scale are both on screen
    red = np.all(np.abs(img.astype(int) - [38, 0, 165]) < 40, axis=2).sum()
    blue = np.all(np.abs(img.astype(int) - [180, 120, 60]) < 60, axis=2).sum()
    assert red > 2000 and blue > 2000, (red, blue)


def test_model_page_has_all_numbers_and_provenance(site):
    tmp, _ = site
    page = (tmp / "leaderboard" / "site" / "models" / "frcnn.html").read_text()
    prov = json.loads((tmp / "results" / "frcnn" / "provenance.json").read_text())
    for key in prov:
        assert f"<dt>{key}</dt>" in page
    assert "5" * 64 in page and DIGEST in page
    long = pl.read_parquet(tmp / "leaderboard" / "leaderboard.parquet").filter(pl.col("submission") == "frcnn")
    assert page.count('class="num') >= long.height  # one cell per number (plus severity columns)
    assert "sar · heridal" in page and "sar · sard" in page


@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed at /usr/bin/chromium "
                                                   "(apt-get install -y chromium)")
def test_script_model_name_stays_text_in_the_browser(tmp_path):
    evil = "<script>alert(1)</script>"
    root = tmp_path / "results"
    write_result(root, "evil", [row("evil", "clean", "recall", 0.7, 0.6, 0.8),
                                row("evil", "low_light_s3", "recall", 0.0, 0.0, 0.0)], model=evil, team=evil)
    write_result(root, "fine", [row("fine", "clean", "recall", 0.5, 0.4, 0.6),
                                row("fine", "low_light_s3", "recall", 0.1, 0.05, 0.15)], model="Fine model")
    build_leaderboard(root, fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV)
    dom = chromium("--dump-dom", (tmp_path / "lb" / "site" / "index.html").resolve().as_uri(), tmp=tmp_path)
    assert dom.returncode == 0 and 'class="js-ready"' in dom.stdout
    assert dom.stdout.count("<script") == 1  # the page's own script only; the name did not become one

    class Names(HTMLParser):
        def __init__(self):
            super().__init__()
            self.names, self.inside = [], False

        def handle_starttag(self, tag, attrs):
            self.inside = tag == "a" and dict(attrs).get("href", "").startswith("models/")

        def handle_data(self, data):
            if self.inside:
                self.names.append(data)

        def handle_endtag(self, tag):
            self.inside = False

    names = Names()
    names.feed(dom.stdout)
    assert evil in names.names and "Fine model" in names.names  # shown as literal text
