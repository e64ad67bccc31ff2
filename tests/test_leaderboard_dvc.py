"""``aegisbench leaderboard --reference/--metrics/--plots``: reference rows first and marked in the
Markdown and the site, the metrics JSON for ``dvc metrics show``, the severity-curve CSVs for
``dvc plots show`` with the custom ``severity`` template, checked with the real DVC."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from aegisbench.leaderboard.build import build_leaderboard
from test_leaderboard import (DIGEST, EV, HAND, fake_dataset, hand_results, hand_rows, main,  # noqa: F401
                              row, write_result)

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / ".dvc" / "plots" / "severity.json"


def _heat_order(html: str, table_id: str) -> list[str]:
    table = html[html.index(f'id="{table_id}"'):]
    table = table[:table.index("</table>")]
    return re.findall(r'<tr data-submission="([^"]+)"', table)


def _fire_rows(sub: str, shift: float) -> list[dict]:
    rows = []
    for level in (0, 30, 50):
        for metric, v in (("f1", 0.8 - level / 100 - shift), ("brier", 0.05 + level / 500 + shift),
                          ("ece", 0.02 + shift)):
            rows.append({**row(sub, f"firespread_s{level}", metric, round(v, 4), round(v - 0.01, 4),
                               round(v + 0.01, 4), source="firespread", track="firespread"),
                         "corruption": "stochasticity", "family": "firespread", "severity": level})
    return rows


@pytest.fixture
def mixed_results(hand_results):
    """The hand-made SAR results plus two fire-spread submissions."""
    for sub, model, shift in (("fs_ref", "CA ensemble", 0.0), ("fs_net", "U-Net", 0.1)):
        write_result(hand_results, sub, _fire_rows(sub, shift), model=model, track="firespread", threshold=None)
    return hand_results


def test_reference_rows_come_first_and_are_marked(hand_results, tmp_path, caplog):
    evil = "Zulu <b>Charlie</b> & co"
    write_result(hand_results, "c", hand_rows("c"), model=evil, threshold=0.4)  # the reference, hostile name
    with caplog.at_level(logging.WARNING, logger="aegisbench.leaderboard.build"):
        rep = build_leaderboard(hand_results, fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV,
                                references=["c", "ghost", "c"])
    assert rep.references == ("c",) and rep.missing_references == ("ghost",)
    assert any("--reference ghost" in r.getMessage() for r in caplog.records)  # a warning, not an error
    long = pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")
    assert long.schema["reference"] == pl.Boolean
    assert sorted(set(long.filter(pl.col("reference"))["submission"].to_list())) == ["c"]

    md = (tmp_path / "lb" / "README.md").read_text()
    name = "Zulu &lt;b&gt;Charlie&lt;/b&gt; &amp; co"
    assert evil not in md and f"{name} †" in md
    assert "† reference submission: the reference detector, trained inside this pipeline from its YAML config" in md
    assert "Models (reference † first, then alphabetical; there is no overall rank)" in md
    models = md[md.index("| model | team |"):].splitlines()
    assert models[2].startswith(f"| {name} † | team a | `c` |") and models[3].startswith("| Alpha |")
    assert f"| condition | family | sev. | {name} † (τ 0.400) | Alpha (τ 0.250) | Bravo (τ 0.400) |" in md
    assert f"1. {{Alpha, Bravo}} > 3. {name} †" in md  # order within a condition stays by value, marked
    family_row = next(ln for ln in md.splitlines() if ln.startswith(f"| {name} † | 0.510"))
    assert family_row

    index = (tmp_path / "lb" / "site" / "index.html").read_text()
    assert evil not in index
    for metric in ("recall", "fp", "precision"):
        assert _heat_order(index, f"heat-sar-demo-{metric}")[0] == "c"
    assert _heat_order(index, "heat-sar-demo-recall") == ["c", "a", "b"]
    assert '<tr data-submission="c" class="reference" data-reference="true">' in index
    assert index.count('<span class="ref-badge"') >= 4  # heat rows, rank rows, floor and family tables
    assert 'class="ref-note"' in index and "trained inside this pipeline" in index
    assert "default row: <a href=\"models/c.html\">Zulu &lt;b&gt;Charlie&lt;/b&gt; &amp; co</a>" in index
    floor = index[index.index('id="floor-sar-demo-recall"'):]
    assert floor.index("models/c.html") < floor.index("models/a.html")
    page_c = (tmp_path / "lb" / "site" / "models" / "c.html").read_text()
    page_a = (tmp_path / "lb" / "site" / "models" / "a.html").read_text()
    assert '<span class="ref-badge"' in page_c and '<span class="ref-badge"' not in page_a
    svg = (tmp_path / "lb" / "site" / "plots" / "curves-sar-demo-recall.svg").read_text()
    assert "Zulu &lt;b&gt;Charlie&lt;/b&gt; &amp; co † reference" in svg

    # without --reference: alphabetical, unmarked
    build_leaderboard(hand_results, tmp_path / "data", tmp_path / "plain", evaluator_version=EV)
    plain = (tmp_path / "plain" / "site" / "index.html").read_text()
    assert _heat_order(plain, "heat-sar-demo-recall") == ["a", "b", "c"] and '<span class="ref-badge"' not in plain
    assert "†" not in (tmp_path / "plain" / "README.md").read_text()


def test_metrics_json_per_condition_with_floor_and_deterministic(mixed_results, tmp_path):
    data = fake_dataset(tmp_path / "data")
    kw = {"evaluator_version": EV, "references": ["c", "fs_ref"]}
    one = build_leaderboard(mixed_results, data, tmp_path / "lb1", metrics=tmp_path / "m1" / "lb.json",
                            plots=tmp_path / "p1", **kw)
    build_leaderboard(mixed_results, data, tmp_path / "lb2", metrics=tmp_path / "m2" / "lb.json",
                      plots=tmp_path / "p2", **kw)
    text = (tmp_path / "m1" / "lb.json").read_bytes()
    assert text == (tmp_path / "m2" / "lb.json").read_bytes() and one.metrics == tmp_path / "m1" / "lb.json"
    doc = json.loads(text)
    assert text.decode() == json.dumps(doc, indent=1, sort_keys=True) + "\n"  # sorted keys
    assert sorted(doc) == ["firespread", "sar"] and sorted(doc["sar"]) == ["a", "b", "c"]
    a = doc["sar"]["a"]["demo"]
    assert sorted(a) == ["recall"]  # the primary metric only (fp, precision are in the leaderboard)
    want = {cfg: {"value": v, "lo": lo, "hi": hi} for cfg, (v, lo, hi) in HAND["a"].items()}
    assert a["recall"]["conditions"] == want  # every condition with its interval
    assert a["recall"]["floor"] == {"value": 0.0, "lo": 0.0, "hi": 0.0, "at": "low_light_s3"}
    assert doc["sar"]["b"]["demo"]["recall"]["floor"]["at"] == "motion_blur_s3, low_light_s3"  # ties listed
    fs = doc["firespread"]["fs_net"]["firespread"]
    assert sorted(fs) == ["brier", "f1"]  # F2R and F2S headline metrics side by side
    assert fs["f1"]["conditions"]["firespread_s30"] == {"value": 0.4, "lo": 0.39, "hi": 0.41}
    assert fs["f1"]["floor"]["at"] == "firespread_s50" and fs["brier"]["floor"]["at"] == "firespread_s50"

    def leaves(d, path=()):
        for k, v in d.items():
            yield from leaves(v, (*path, k)) if isinstance(v, dict) else [((*path, k), v)]

    for path, value in leaves(doc):  # nested numbers (and where the floor is); no averaged score anywhere
        assert path[-1] in ("value", "lo", "hi", "at"), path
        assert isinstance(value, str) if path[-1] == "at" else isinstance(value, float), (path, value)

    def snapshot(root: Path) -> dict:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert snapshot(tmp_path / "lb1") == snapshot(tmp_path / "lb2")  # same results + flags: same bytes
    assert snapshot(tmp_path / "p1") == snapshot(tmp_path / "p2")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_severity_plot_csvs(mixed_results, tmp_path):
    data = fake_dataset(tmp_path / "data")
    plots = tmp_path / "plots" / "severity"
    rep = build_leaderboard(mixed_results, data, tmp_path / "lb", evaluator_version=EV, references=["c"],
                            plots=plots)
    names = sorted(p.name for p in plots.iterdir())
    assert names == list(rep.plots) == [
        "firespread__firespread__stochasticity__brier.csv", "firespread__firespread__stochasticity__f1.csv",
        "sar__demo__low_light.csv", "sar__demo__motion_blur.csv", "sar__demo__turbidity_cast.csv",
        "sar__demo__water_glare.csv"]
    low = (plots / "sar__demo__low_light.csv").read_text()
    assert low == ("model,severity,value,lo,hi\n"
                   "Charlie [c] (reference),0,0.6,0.55,0.65\nCharlie [c] (reference),3,0.05,0.01,0.09\n"
                   "Alpha [a],0,0.8,0.75,0.85\nAlpha [a],3,0.0,0.0,0.0\n"
                   "Bravo [b],0,0.78,0.72,0.84\nBravo [b],3,0.0,0.0,0.0\n")
    rows = list(csv.DictReader(io.StringIO((plots / "firespread__firespread__stochasticity__f1.csv").read_text())))
    assert [(r["model"], r["severity"]) for r in rows] == [  # S-level 0 is the start: no clean row to add
        ("CA ensemble [fs_ref]", "0"), ("CA ensemble [fs_ref]", "30"), ("CA ensemble [fs_ref]", "50"),
        ("U-Net [fs_net]", "0"), ("U-Net [fs_net]", "30"), ("U-Net [fs_net]", "50")]
    for r in rows:
        assert float(r["lo"]) <= float(r["value"]) <= float(r["hi"])

    # a rebuild replaces the folder whole: curves that no longer exist do not linger
    (plots / "sar__demo__dust_haze.csv").write_text("model,severity,value,lo,hi\nold,0,1,1,1\n")
    shutil.rmtree(mixed_results / "fs_ref")
    shutil.rmtree(mixed_results / "fs_net")
    rep = build_leaderboard(mixed_results, data, tmp_path / "lb", evaluator_version=EV, plots=plots)
    assert sorted(p.name for p in plots.iterdir()) == list(rep.plots) == names[2:]
    assert (plots / "sar__demo__low_light.csv").read_text().splitlines()[1] == "Alpha [a],0,0.8,0.75,0.85"
    assert sorted(p.name for p in plots.parent.iterdir()) == ["severity"]


def test_cli_flags_and_bad_flags(hand_results, tmp_path, main, capsys):  # noqa: F811
    data = fake_dataset(tmp_path / "data")
    base = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--evaluator-version", EV]
    rc = main([*base, "--out", str(tmp_path / "lb"), "--reference", "c", "--reference", "ghost",
               "--metrics", str(tmp_path / "metrics" / "leaderboard.json"), "--plots", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert rc == 0 and "metrics " in out and "4 CSV file(s)" in out
    assert json.loads((tmp_path / "metrics" / "leaderboard.json").read_text())["sar"]["c"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.md").write_text("mine")
    bad = {
        "--metrics must name a .json file": ["--metrics", str(tmp_path / "m.txt")],
        "--metrics names a folder": ["--metrics", str(tmp_path / "notes.json")],
        "--metrics must not lie inside the --out folder": ["--metrics", str(tmp_path / "lb2" / "m.json")],
        "--plots names a file": ["--plots", str(tmp_path / "notes" / "keep.md")],
        "--plots would replace the --results folder": ["--plots", str(tmp_path)],
        "--plots must not lie inside": ["--plots", str(hand_results / "plots")],
        "not a severity-plots folder (it holds 'keep.md')": ["--plots", str(tmp_path / "notes")],
        "--reference must be a submission id": ["--reference", ""],
    }
    (tmp_path / "notes.json").mkdir()
    for message, flags in bad.items():
        rc = main([*base, "--out", str(tmp_path / "lb2"), *flags])
        err = capsys.readouterr().err
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, (message, err)
    assert not (tmp_path / "lb2").exists() and (tmp_path / "notes" / "keep.md").read_text() == "mine"
    assert not (hand_results / "plots").exists()
    with pytest.raises(SystemExit):
        main(["leaderboard", "--help"])
    helptext = capsys.readouterr().out
    for flag in ("--reference ID", "--metrics FILE", "--plots DIR", "dvc metrics show", "dvc plots show"):
        assert flag in " ".join(helptext.split()), flag


def test_dvc_template_file_is_tracked_and_well_formed():
    spec = json.loads(TEMPLATE.read_text())
    text = TEMPLATE.read_text()
    for anchor in ("<DVC_METRIC_DATA>", "<DVC_METRIC_X>", "<DVC_METRIC_Y>", "<DVC_METRIC_TITLE>"):
        assert anchor in text
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["area", "line"] and spec["encoding"]["color"]["field"] == "model"
    band = spec["layer"][0]["encoding"]
    assert band["y"]["field"] == "lo" and band["y2"]["field"] == "hi"
    if shutil.which("git"):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(TEMPLATE)], cwd=ROOT, capture_output=True)
        assert ignored.returncode == 1, ".dvc/plots/severity.json must not be git-ignored"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_dvc_plots_and_metrics_show_read_the_exports(mixed_results, tmp_path):
    pytest.importorskip("dvc")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site"),
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    dvc = [sys.executable, "-m", "dvc"]

    def run(*args):
        proc = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{args}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    run("git", "init", "-q")
    run(*dvc, "init", "-q")
    (repo / ".dvc" / "plots").mkdir()
    shutil.copy(TEMPLATE, repo / ".dvc" / "plots" / "severity.json")
    build_leaderboard(mixed_results, fake_dataset(tmp_path / "data"), repo / "leaderboard", evaluator_version=EV,
                      references=["c"], metrics=repo / "metrics" / "leaderboard.json",
                      plots=repo / "plots" / "severity")
    (repo / "dvc.yaml").write_text(  # the leaderboard stage's metrics and plots, as in the project's dvc.yaml
        "stages:\n  leaderboard:\n    cmd: aegisbench leaderboard\n"
        "    outs:\n      - leaderboard:\n          cache: false\n"
        "    metrics:\n      - metrics/leaderboard.json:\n          cache: false\n"
        "    plots:\n      - plots/severity:\n          cache: false\n          x: severity\n          y: value\n"
        "          template: severity\n")

    shown = json.loads(run(*dvc, "plots", "show", "--json"))
    plots = shown["data"]
    assert not shown.get("errors"), shown.get("errors")
    assert sorted(plots) == sorted(f"plots/severity/{p.name}" for p in (repo / "plots" / "severity").iterdir())
    (spec,) = plots["plots/severity/sar__demo__low_light.csv"]
    content = spec["content"]
    assert content["description"].startswith("AegisBench severity curves")  # our template, not DVC's default
    assert content["encoding"]["color"]["field"] == "model"
    assert content["encoding"]["x"]["field"] == "severity"
    assert [layer["mark"]["type"] for layer in content["layer"]] == ["area", "line"]
    assert content["layer"][1]["encoding"]["y"]["field"] == "value"
    points = {(d["model"], float(d["severity"]), float(d["value"]), float(d["lo"]), float(d["hi"]))
              for d in content["data"]["values"]}
    assert points == {("Charlie [c] (reference)", 0, 0.6, 0.55, 0.65), ("Charlie [c] (reference)", 3, 0.05, 0.01, 0.09),
                      ("Alpha [a]", 0, 0.8, 0.75, 0.85), ("Alpha [a]", 3, 0.0, 0.0, 0.0),
                      ("Bravo [b]", 0, 0.78, 0.72, 0.84), ("Bravo [b]", 3, 0.0, 0.0, 0.0)}
    fire = plots["plots/severity/firespread__firespread__stochasticity__brier.csv"][0]["content"]["data"]["values"]
    assert {d["model"] for d in fire} == {"CA ensemble [fs_ref]", "U-Net [fs_net]"} and len(fire) == 6
    assert "<DVC_METRIC" not in json.dumps(content)  # every anchor filled

    metrics = json.loads(run(*dvc, "metrics", "show", "--json"))
    (entry,) = metrics.values()
    data = entry["data"]["metrics/leaderboard.json"]["data"]
    assert data == json.loads((repo / "metrics" / "leaderboard.json").read_text())
    assert data["sar"]["c"]["demo"]["recall"]["conditions"]["low_light_s3"]["value"] == 0.05
    table = run(*dvc, "metrics", "show")  # the plain table flattens the nesting into columns
    assert "sar.c.demo.recall.floor.at" in table and "low_light_s3" in table
