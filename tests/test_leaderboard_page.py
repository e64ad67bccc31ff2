"""The leaderboard page as a reader meets it (issue 18 item 3), in headless Chromium at
1400 and 400 px: no horizontal page overflow, the floor and where it happens visible on a
phone, every figure (severity curves, fire-spread ones included) whole on screen at no less
than 3/4 of its size, interval text >= 12 px, captions and header scopes, nothing behind a
hover; display names and directions from the metric registry; fire-spread panels without
detection leftovers; model metadata and verified / self-reported status from
submission.yaml; the condition gallery from the preview grid; the smoke-test banner on tiny
data. A thermal source (issue 33 item 3): only the conditions built for its sensor are
columns, panels and gallery rows, the others one note, and its heat map fits 1400 px.

Measurements run in the real page: it is opened in an iframe of the wanted width and a
script reads the layout back (computed styles, bounding boxes) into the dumped DOM.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import yaml

from _evalkit import gt_table, write_submission
from aegisbench.attestation import attest_files
from aegisbench.cli import main
from aegisbench.corruptions.preview import grid_corruptions, preview_grid
from aegisbench.corruptions.registry import names
from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.metrics import REGISTRY
from test_leaderboard import DIGEST, EV, fake_dataset
from aegisbench.vocab import THERMAL
from test_leaderboard_site import CHROMIUM, _detection_rows, chromium, paper_like_results

needs_chromium = pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian chromium is not installed at "
                                    "/usr/bin/chromium (apt-get install -y chromium)")
WEIGHTS = "ab" * 32
META = {"paper": "https://arxiv.org/abs/2410.17725", "code": "https://github.com/ultralytics/ultralytics",
        "architecture": "YOLO11m", "parameters": 20_100_000, "training_data": "COCO 2017 + SARD train",
        "date": "2024-10-01"}

MEASURE = """
(function (win) {
  var doc = win.document, W = win.innerWidth, out = {inner: W, scroll: doc.documentElement.scrollWidth};
  function clipped(el) {
    var r = el.getBoundingClientRect();
    if (r.width === 0 || r.left < -0.5 || r.right > W + 0.5) { return true; }
    for (var a = el.parentElement; a; a = a.parentElement) {
      if (win.getComputedStyle(a).overflowX !== "visible") {
        var b = a.getBoundingClientRect();
        if (r.left < b.left - 0.5 || r.right > b.right + 0.5) { return true; }
      }
    }
    return false;
  }
  out.intervals = Array.prototype.map.call(doc.querySelectorAll(".ci, table.plain small, table.heat small"),
    function (e) { return parseFloat(win.getComputedStyle(e).fontSize); });
  out.tables = doc.querySelectorAll("table").length;
  out.no_caption = Array.prototype.filter.call(doc.querySelectorAll("table"),
    function (t) { return !t.caption || !t.caption.textContent.trim(); }).length;
  out.th_no_scope = doc.querySelectorAll("th:not([scope])").length;
  out.titles = doc.querySelectorAll("[title]").length;
  out.floors = [];
  doc.querySelectorAll("table.floor").forEach(function (t) {
    if (!t.offsetParent) { return; }  /* a metric panel not shown */
    Array.prototype.forEach.call(t.tBodies[0].rows, function (row) {
      var where = row.querySelector("td.where");
      out.floors.push({table: t.id, floor: row.cells[1].textContent.trim(), where: where.textContent.trim(),
                       hidden: clipped(row.cells[1]) || clipped(where)});
    });
  });
  out.figures = [];  /* every figure shown: which file (a <picture> picks by width), clipped, scale */
  doc.querySelectorAll(".curves img").forEach(function (im) {
    if (!im.offsetParent) { return; }
    var r = im.getBoundingClientRect();
    out.figures.push({src: im.currentSrc.split("/").pop(), clipped: clipped(im),
                      scale: r.width / im.naturalWidth});
  });
  out.heat = [];  /* the condition headers of each heat map shown, and whether each is on screen */
  doc.querySelectorAll("table.heat").forEach(function (t) {
    if (!t.offsetParent) { return; }
    out.heat.push({id: t.id, hidden: Array.prototype.filter.call(t.querySelectorAll("th[data-config]"), clipped)
                   .map(function (h) { return h.getAttribute("data-config"); }),
                   columns: t.querySelectorAll("th[data-config]").length});
  });
  out.text = doc.body.innerText;
  var pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})
"""


def measure(site: Path, page: str, width: int, tmp: Path) -> dict:
    """Open ``site/page`` in an iframe ``width`` px wide and read its layout back."""
    wrap = site / f"measure-{width}.html"
    wrap.write_text(f'<!DOCTYPE html><html><body style="margin:0"><iframe id="f" src="{page}" '
                    f'style="border:0;width:{width}px;height:900px"></iframe><script>document.getElementById("f")'
                    f'.onload = function () {{ {MEASURE}(this.contentWindow); }};</script></body></html>')
    try:
        res = chromium("--allow-file-access-from-files", "--window-size=1600,1000", "--dump-dom",
                       wrap.resolve().as_uri(), tmp=tmp, timeout=120)
    finally:
        wrap.unlink()
    found = re.search(r'<pre id="measured">(.*?)</pre>', res.stdout, re.S)
    assert res.returncode == 0 and found, res.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


THERMAL_SOURCE = "hituav"
NOT_PHYSICAL = f"not physical for {THERMAL}"


def add_thermal_source(results: Path, subs=("yolo11", "frcnn")) -> None:
    """Rows of a thermal source beside the others, as the evaluator writes them: SARD-like
    values where the corruption is built for a thermal sensor, else null rows noted
    ``not physical for thermal`` (one per metric)."""
    built = set(grid_corruptions(THERMAL))
    for sub in subs:
        path = results / sub / "metrics.parquet"
        df = pl.read_parquet(path).with_columns(pl.lit(None, pl.String).alias("note"))
        rows = [{**r, "source": THERMAL_SOURCE, "note": None} for r in _detection_rows(sub, "sard")]
        for r in rows:
            if r["corruption"] and r["corruption"] not in built:
                r.update(value=None, lo=None, hi=None, n=None, note=NOT_PHYSICAL)
        pl.concat([df, pl.DataFrame(rows, schema=df.schema)]).write_parquet(path)
        prov = json.loads((results / sub / "provenance.json").read_text())
        prov["frozen_threshold"][THERMAL_SOURCE] = 0.33
        (results / sub / "provenance.json").write_text(json.dumps(prov))


def tiny_manifest(root: Path, test_images: int) -> Path:
    """A dataset folder whose manifest says how many clean test images each source has."""
    root.mkdir(parents=True, exist_ok=True)
    def split(source, rows, role="test"):  # a well-formed split entry without shards (the page reads rows)
        return {"rows": rows, "source": source, "role": role, "shards": [], "content_sha256": "0" * 64}
    splits = {src: split(src, test_images) for src in ("sard", "heridal")} | {"sard_val": split("sard", 2, "val")}
    (root / "manifest.json").write_text(json.dumps({"format": 2, "benchmark_version": "0.0.0", "dataset_digest": DIGEST,
                                                    "files": {}, "configs": {"clean": {"splits": splits}}}))
    return root


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """The paper-like results with metadata on two models, one of them a reference with a
    weights hash (verified), a thermal source beside the rgb ones, preview grids (the thermal
    one with the rows of its sensor only) and a tiny dataset (a smoke test)."""
    tmp = tmp_path_factory.mktemp("page")
    results = paper_like_results(tmp / "results")
    add_thermal_source(results)
    for sub, extra in (("yolo11", {"metadata": META, "weights_sha256": WEIGHTS}),
                       ("rtdetr", {"metadata": {"date": "2023-04-17", "parameters": 32_000_000,
                                                "paper": "javascript:alert(1)"}, "weights_sha256": WEIGHTS})):
        prov = json.loads((results / sub / "provenance.json").read_text())
        (results / sub / "provenance.json").write_text(json.dumps({**prov, **extra}))
    private = tmp / "project"  # this project ran yolo11 itself (attested); rtdetr's record names other weights
    attest_files("yolo11", {"predictions.parquet": "0" * 64}, dataset_digest=DIGEST, weights_sha256=WEIGHTS,
                 by="test", root=private)
    attest_files("rtdetr", {"predictions.parquet": "0" * 64}, dataset_digest=DIGEST, weights_sha256="cd" * 32,
                 by="test", root=private)
    preview = tmp / "preview"
    rng = np.random.default_rng(7)
    frame = (rng.random((48, 64, 3)) * 200 + 20).astype(np.uint8)
    preview_grid(frame, preview / "sard_grid.png", cell=40)
    preview_grid(frame, preview / f"{THERMAL_SOURCE}_grid.png", cell=40, corruptions=grid_corruptions(THERMAL))
    from aegisbench.corruptions.calibrate import calibrate
    report = calibrate({"f": frame}, measured_on={"sources": ["sard"], "splits": ["test"]})
    (tmp / "report.json").write_text(json.dumps(report.to_dict()))
    out = tmp / "leaderboard"
    build_leaderboard(results, tiny_manifest(tmp / "data", 3), out, evaluator_version=EV,
                      references=["yolo11", "rtdetr"], preview=preview, private=private,
                      calibration=tmp / "report.json")
    return tmp, out / "site"


@needs_chromium
@pytest.mark.parametrize("page", ["index.html", "models/yolo11.html", "models/ca_ensemble.html"])
def test_page_fits_and_explains_at_1400_and_400_px(board, page, tmp_path):
    _, site = board
    wide = measure(site, page, 1400, tmp_path)
    assert wide["inner"] == 1400 and wide["scroll"] <= wide["inner"], wide["scroll"]
    narrow = measure(site, page, 400, tmp_path)
    assert narrow["inner"] == 400 and narrow["scroll"] <= narrow["inner"], narrow["scroll"]
    for m in (wide, narrow):
        # every figure whole on screen, its labels at no less than 3/4 of their size
        bad = [f for f in m["figures"] if f["clipped"] or f["scale"] < 0.75]
        assert not bad, (m["inner"], bad)
        assert m["tables"] > 0 and m["no_caption"] == 0 and m["th_no_scope"] == 0
        assert m["titles"] == 0  # nothing is said only on hover
        assert m["intervals"] and min(m["intervals"]) >= 12, min(m["intervals"])
    assert narrow["floors"], "no floor table shown"
    hidden = [f for f in narrow["floors"] if f["hidden"]]
    assert not hidden, hidden[:3]  # the floor and where it happens, on screen at 400 px
    if page == "index.html":
        assert {"floor-sar-sard-recall", "floor-sar-heridal-recall"} <= {f["table"] for f in narrow["floors"]}
        # a phone gets the severity curves one panel a row, fire spread's included
        shown = {f["src"] for f in narrow["figures"]}
        assert "curves-sar-sard-recall-narrow.svg" in shown and "curves-firespread-firespread-f1.svg" in shown
        assert "curves-sar-sard-recall.svg" in {f["src"] for f in wide["figures"]}
        assert any(f["where"] == "low_light_s3" and f["floor"] == "0.000" for f in narrow["floors"])
    # display names only: no registered metric key (snake_case) in the visible text
    # (the registry's own one-line descriptions, formulas such as "brier - oracle_brier", aside)
    text = wide["text"]
    for spec in REGISTRY:
        text = text.replace(spec.description, "")
    raw = [n for n in REGISTRY.names() if "_" in n and re.search(rf"\b{n}\b", text)]
    assert not raw, raw
    assert "τ none" not in wide["text"] and "-0.000" not in wide["text"]


def _heat_configs(page: str, table_id: str) -> list[str]:
    table = page[page.index(f'id="{table_id}"'):]
    return re.findall(r'<th [^>]*data-config="([^"]+)"', table[:table.index("</thead>")])


def test_thermal_source_shows_only_the_conditions_built_for_it(board):
    _, site = board
    page = (site / "index.html").read_text()
    built = ["clean"] + [f"{n}_s{k}" for n in grid_corruptions(THERMAL) for k in (1, 2, 3)]
    assert _heat_configs(page, "heat-sar-hituav-recall") == built  # 10 columns, not 28
    assert len(_heat_configs(page, "heat-sar-sard-recall")) == 28  # an rgb source keeps every condition
    sec = _section(page, "sar-hituav")
    notes = re.findall(r'<p class="sensor-note" id="not-built-sar-hituav">(.*?)</p>', sec, re.S)
    assert len(notes) == 1 and notes[0].startswith("Not built for hituav (thermal sensor): 18 conditions")
    assert "low_light (s1, s2, s3)" in notes[0] and "water_glare (s1, s2, s3)" in notes[0]
    assert "motion_blur" not in notes[0] and "10 conditions built for its thermal sensor" in sec
    assert "sensor-note" not in _section(page, "sar-sard")  # nothing to say for an rgb source
    model = (site / "models" / "yolo11.html").read_text()
    for text in (page, model, (site.parent / "README.md").read_text()):
        assert NOT_PHYSICAL not in text  # no n/a cell, column or row anywhere: the note says it once
    part = model[model.index("sar · hituav"):]
    part = part[:part.index("</section>")]
    assert part.count('class="sensor-note"') == 1 and re.findall(r"<tr><td><code>([^<]+)</code>", part) == built
    svg = (site / "plots" / "curves-sar-hituav-recall.svg").read_text()
    assert [n for n in grid_corruptions() if f"{n} · " in svg] == grid_corruptions(THERMAL)  # 3 panels, not 9
    gallery = page[page.index('id="conditions"'):]
    assert [n for n in grid_corruptions() if f'id="cond-hituav-{n}"' in gallery] == grid_corruptions(THERMAL)
    assert gallery.count("Not built for hituav") == 1
    md = (site.parent / "README.md").read_text()
    md = md[md.index("## sar · hituav"):]
    md = md[:md.index("\n## ", 5)]
    assert md.count("> Not built for hituav (thermal sensor): 18 conditions") == 1 and "`low_light` (s1, s2, s3)" in md
    recall = md[md.index("### Recall per condition"):]
    recall = recall[:recall.index("\n\n", recall.index("| ---"))]
    assert re.findall(r"^\| `([^`]+)`", recall, re.M) == built


@needs_chromium
def test_thermal_heat_map_fits_1400_px(board, tmp_path):
    _, site = board
    heat = {h["id"]: h for h in measure(site, "index.html", 1400, tmp_path)["heat"]}
    assert heat["heat-sar-hituav-recall"]["columns"] == 10 and heat["heat-sar-hituav-recall"]["hidden"] == []
    assert heat["heat-sar-sard-recall"]["hidden"]  # 28 conditions do not: that table scrolls


def _section(text: str, anchor: str) -> str:
    start = text.index(f'id="sec-{anchor}"')
    end = text.find('<section class="sec"', start)
    return text[start:end if end > 0 else len(text)]


def test_directions_units_and_fire_spread_panels(board):
    _, site = board
    page = (site / "index.html").read_text()
    assert "FP count (boxes; lower is better): models × conditions" in page
    assert "Recall (higher is better): models × conditions" in page
    fire = _section(page, "firespread-firespread")
    assert "collapse: value 0" not in fire and "silent failure" not in fire  # not the detection legend
    assert ">τ<" not in fire and "S-Level" in fire
    assert "F2S Brier (lower is better)" in fire
    sar = _section(page, "sar-sard")
    assert ">τ<" in sar and "collapse: value 0" in sar


def test_model_metadata_and_status(board):
    _, site = board
    page = (site / "index.html").read_text()
    table = page[page.index('id="models-table"'):]
    rows = dict(re.findall(r'<tr[^>]*data-submission="([^"]+)">(.*?)</tr>', table[:table.index("</table>")], re.S))
    assert set(rows) == {"frcnn", "rtdetr", "yolo11", "yolo11_aug", "ca_ensemble", "unet"}
    assert 'class="status verified"' in rows["yolo11"]  # this project's attestation matches its results
    assert 'class="status self-reported"' in rows["rtdetr"] and "names other weights" in rows["rtdetr"]
    assert 'class="status self-reported"' in rows["frcnn"] and "why" not in rows["frcnn"]  # no attestation at all
    for value in ("YOLO11m", "20.10 M", "COCO 2017 + SARD train", "2024-10-01", f'href="{META["paper"]}"',
                  f'href="{META["code"]}"'):
        assert value in rows["yolo11"], value
    assert "javascript:" not in page and "2023-04-17" in rows["rtdetr"]  # a bad URL is dropped, the rest shown
    model = (site / "models" / "yolo11.html").read_text()
    assert WEIGHTS in model and "YOLO11m" in model and 'class="status verified"' in model


@needs_chromium
def test_model_table_sorts_by_date(board, tmp_path):
    _, site = board
    page = (site / "index.html").read_text()
    head = page[page.index('id="models-table"'):]
    col = re.search(r'<th scope="col" data-col="(\d+)">date</th>', head).group(1)
    dom = chromium("--dump-dom", f"{(site / 'index.html').resolve().as_uri()}#sort=models-table:{col}:desc",
                   tmp=tmp_path).stdout
    table = dom[dom.index('id="models-table"'):]
    order = re.findall(r'data-submission="([^"]+)"', table[:table.index("</table>")])
    assert order[:2] == ["yolo11", "rtdetr"]  # 2024-10-01, 2023-04-17, then the ones without a date


def test_condition_gallery_from_the_preview_grid(board):
    tmp, site = board
    page = (site / "index.html").read_text()
    gallery = page[page.index('id="conditions"'):]
    for name in ("low_light", "water_glare", "dust_haze"):
        block = gallery[gallery.index(f'id="cond-sard-{name}"'):]
        block = block[:block.index("</table>")]
        for s in (1, 2, 3):
            assert f'src="gallery/sard-{name}_s{s}.png"' in block
            assert (site / "gallery" / f"sard-{name}_s{s}.png").is_file()
        assert 'src="gallery/sard-clean.png"' in block  # the same frame, clean
    low = gallery[gallery.index('id="cond-sard-low_light"'):]
    assert "mean_luminance" in low and "0.2355" in low and "stops" in low and "Poisson-Gaussian" in low
    import cv2
    clean = cv2.imread(str(site / "gallery" / "sard-clean.png"))
    dark = cv2.imread(str(site / "gallery" / "sard-low_light_s3.png"))
    assert clean.shape == dark.shape == (40, 40, 3) and dark.mean() < clean.mean() / 2  # cut from the right rows
    assert len([n for n in names() if f'id="cond-sard-{n}"' in gallery]) == len(names())
    # the calibration report beside the targets: measured values, the difference and both verdicts
    report = json.loads((tmp / "report.json").read_text())["corruptions"]["low_light"]
    low = low[:low.index('<div class="cond"', 10)]
    assert "measured (sard, 1 frames)" in low
    for s in ("s1", "s2", "s3"):
        cell = report["severities"][s]
        assert f"{cell['measured']:.4g}" in low and f"{cell['diff_pct']:+.1f}%" in low
    on = sum(c["on_target"] for c in report["severities"].values())
    assert f"monotone: {'yes' if report['monotone'] else 'no'}; on target (within 2%): {on} of 3 severities" in low
    assert "Targets: HERIDAL" in low and " ok" not in low


def test_smoke_test_banner_only_on_tiny_data(board, tmp_path):
    tmp, site = board
    for page in ("index.html", "models/frcnn.html"):
        assert 'class="smoke-test"' in (site / page).read_text()
    assert "3 sard" in (site / "index.html").read_text()
    assert (site.parent / "README.md").read_text().splitlines()[2].startswith("> **Smoke test.**")
    out = tmp_path / "lb"
    build_leaderboard(tmp / "results", tiny_manifest(tmp_path / "data", 40), out, evaluator_version=EV)
    assert 'class="smoke-test"' not in (out / "site" / "index.html").read_text()
    build_leaderboard(tmp / "results", fake_dataset(tmp_path / "nodata"), tmp_path / "lb2", evaluator_version=EV)
    assert 'class="smoke-test"' not in (tmp_path / "lb2" / "site" / "index.html").read_text()


def test_bad_preview_grid_is_refused(board, tmp_path, capsys):
    tmp, _ = board
    (tmp_path / "preview").mkdir()
    shutil.copy(tmp / "preview" / "sard_grid.png", tmp_path / "preview" / "x.png")
    import cv2
    cv2.imwrite(str(tmp_path / "preview" / "sard_grid.png"), np.zeros((50, 70, 3), np.uint8))
    rc = main(["leaderboard", "--results", str(tmp / "results"), "--dataset", str(tiny_manifest(tmp_path / "d", 3)),
               "--out", str(tmp_path / "lb"), "--evaluator-version", EV, "--preview", str(tmp_path / "preview")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "not a preview grid" in err[-1] and not (tmp_path / "lb").exists()


@pytest.mark.parametrize("field,value,expected", [
    ("paper", "arxiv.org/abs/1", "field paper: must be an http(s) URL"),
    ("code", "javascript:alert(1)", "field code: must be an http(s) URL"),
    ("date", "2024-02-30", "field date: must be a date YYYY-MM-DD"),
    ("parameters", "many", "field parameters: must be a positive integer"),
])
def test_malformed_metadata_is_refused(field, value, expected, tmp_path, index, repo, capsys):
    sub = write_submission(tmp_path / "m", index, "sar", gt_table(index, "sar"), **{field: value})
    results = tmp_path / "results"
    rc = main(["evaluate", str(sub), "--dataset", str(repo), "--results", str(results)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not results.exists()
    listed = [line for line in err if line.startswith(str(sub))]
    assert len(listed) == 1 and expected in listed[0], err


def test_metadata_reaches_the_results_and_the_page(tmp_path, index, repo):
    sub = write_submission(tmp_path / "meta_model", index, "sar", gt_table(index, "sar"), **META)
    yaml_doc = yaml.safe_load((sub / "submission.yaml").read_text())
    assert yaml_doc["date"] == "2024-10-01"
    results = tmp_path / "results"
    assert main(["evaluate", str(sub), "--dataset", str(repo), "--results", str(results)]) == 0
    prov = json.loads((results / "meta_model" / "provenance.json").read_text())
    assert prov["metadata"] == META and "weights_sha256" not in prov
    build_leaderboard(results, repo, tmp_path / "lb")
    row = (tmp_path / "lb" / "site" / "index.html").read_text()
    assert "YOLO11m" in row and 'class="status self-reported"' in row


def test_detect_requires_a_team_unless_reference(tmp_path, capsys):
    rc = main(["detect", "--detector", "yolo", "--weights", "w.pt", "--dataset", str(tmp_path / "none"),
               "--track", "sar", "--out", str(tmp_path / "sub")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--team" in err[0] and not (tmp_path / "sub").exists()
    rc = main(["detect", "--detector", "yolo", "--weights", "w.pt", "--dataset", str(tmp_path / "none"),
               "--track", "sar", "--out", str(tmp_path / "sub"), "--reference"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--team" not in err[0]  # past the team check: the dataset is missing


def test_a_calibration_report_of_another_version_is_refused(tmp_path):
    from aegisbench.errors import BadInput
    from aegisbench.leaderboard.calibration_report import read_calibration_report
    old = tmp_path / "report.json"
    old.write_text(json.dumps({"ok": True, "tolerance": 0.02, "corruptions": {"low_light": {
        "monotone": True, "on_target": True, "ok": True, "severities": {
            "s1": {"mean": 0.2, "target": 0.2355, "rel_error": 0.15}}}}}))
    with pytest.raises(BadInput, match=f"{old}: not a calibration report of this version: "
                                       "'corruptions.low_light.severities.s1.measured' is missing"):
        read_calibration_report(old)


def test_each_detection_section_says_what_its_results_show(board):
    """The findings block (issue 34 item 6) is on the page and in the README, per detection section."""
    tmp, site = board
    page = (site / "index.html").read_text()
    readme = (site.parent / "README.md").read_text()
    for anchor in ("sar-sard",):
        block = page[page.index(f'id="findings-{anchor}"'):]
        block = block[:block.index("</div>")]
        assert "What these results show" in block and "keeps most recall under <b>" in block
    assert readme.count("**What these results show**") == page.count('class="findings"') >= 1
    assert 'id="findings-firespread' not in page
