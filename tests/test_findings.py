"""The generated findings block (issue 34 item 6): which families are mildest and harshest, where
recall collapses and whether each collapse is silent or loud, derived from the section's own
cells by the rules in aegisbench/leaderboard/findings.py, checked on hand-computed sections; a
hostile model name stays inert in HTML and Markdown; the built page and README carry the block."""

from __future__ import annotations

import pytest

from aegisbench.leaderboard.findings import findings_html, model_findings, section_findings
from aegisbench.leaderboard.tables import ModelRow, Section


def _section(name="ref <b>`x`**", cells=None, track="sar") -> Section:
    conds = [{"config": c, "family": f, "corruption": c[:-3], "severity": int(c[-1])} for c, f in (
        ("low_light_s3", "storm"), ("rain_streaks_s3", "storm"), ("water_glare_s3", "flood"),
        ("dust_haze_s3", "earthquake"))]
    model = ModelRow("m", "yolo", "team", name, 0.3, "#000", "models/m.html", reference=True)
    other = ModelRow("o", "other", "team", "other", 0.3, "#111", "models/o.html")
    return Section(track, "src", (other, model), tuple(conds), ("recall", "fp", "silent_failure"), cells or {})


def _cells(**recall) -> dict:
    c = {("m", "clean", "recall"): {"value": 0.8, "lo": 0.7, "hi": 0.9}, ("m", "clean", "fp"): {"value": 10.0}}
    for config, (value, lo, hi, fp, silent) in recall.items():
        c[("m", config, "recall")] = {"value": value, "lo": lo, "hi": hi}
        c[("m", config, "fp")] = {"value": fp}
        c[("m", config, "silent_failure")] = {"value": silent}
    return c


CELLS = _cells(low_light_s3=(0.05, 0.0, 0.1, 500.0, 0.0),       # collapse, fp 10 -> 500: loud
               rain_streaks_s3=(0.72, 0.6, 0.8, 11.0, 0.0),     # mild
               water_glare_s3=(0.32, 0.2, 0.4, 9.0, 1.0),       # collapse flagged silent
               dust_haze_s3=(0.38, 0.2, 0.72, 12.0, 0.0))       # half of clean, but the interval reaches clean's


def test_families_and_collapses_follow_the_rules():
    f = model_findings(_section(cells=CELLS).cells.get, "m", list(_section().conditions))
    shares = {r["family"]: r["share"] for r in f["families"]}
    assert shares == pytest.approx({"storm": (0.05 / 0.8 + 0.72 / 0.8) / 2, "flood": 0.4, "earthquake": 0.475})
    assert [r["family"] for r in f["families"]] == ["storm", "earthquake", "flood"]  # mildest first
    assert [(c["config"], c["kind"]) for c in f["collapses"]] == [("low_light_s3", "loud"), ("water_glare_s3", "silent")]
    quiet = _cells(low_light_s3=(0.05, 0.0, 0.1, 15.0, 0.0))  # collapse, fp 10 -> 15: neither
    assert model_findings(_section(cells=quiet).cells.get, "m", list(_section().conditions))["collapses"][0]["kind"] == "quiet"


def test_sentences_name_the_default_row_and_each_kind():
    text = section_findings(_section(name="Ref", cells=CELLS))
    assert text[0].startswith("Ref (clean recall 0.800) keeps most recall under **storm** (mean 48% of clean over 2")
    assert "least under **flood** (40% over 1)" in text[0]
    assert "under 2 conditions" in text[1]
    assert any(t.startswith("Silent") and "`water_glare_s3` 0.320" in t for t in text)
    assert any(t.startswith("Loud") and "false positives 10 clean -> 500 at `low_light_s3`" in t for t in text)
    none = _cells(rain_streaks_s3=(0.72, 0.6, 0.8, 11.0, 0.0))
    assert section_findings(_section(cells=none))[1].startswith("Recall collapses nowhere")
    assert section_findings(_section(cells=CELLS, track="firespread")) == []


def test_a_hostile_model_name_stays_inert():
    html = "".join(findings_html(_section(cells=CELLS)))
    assert "<b>`x`" not in html and "ref &lt;b&gt;x (clean recall" in html and "<b>storm</b>" in html
    assert "<code>low_light_s3</code>" in html
