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
import yaml

from aegisbench.leaderboard.build import build_leaderboard
from test_leaderboard import (DIGEST, EV, HAND, fake_dataset, hand_results, hand_rows, main,  # noqa: F401
                              row, write_result)

ROOT = Path(__file__).resolve().parents[1]


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
    assert f"1. {{Alpha (self-reported), Bravo (self-reported)}} > 3. {name} † (self-reported)" in md  # by value
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


def test_metrics_json_is_a_compact_summary_consistent_with_the_parquet(mixed_results, tmp_path):
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
    assert sorted(doc) == ["a", "b", "c", "fs_net", "fs_ref"]
    a = doc["a"]["demo"]
    assert sorted(a) == ["recall"]  # the primary metric only (fp, precision are in the leaderboard)
    assert a["recall"] == {"clean": 0.8, "clean_lo": 0.75, "clean_hi": 0.85, "floor": 0.0, "floor_lo": 0.0,
                           "floor_hi": 0.0, "floor_at": "low_light_s3", "worst": {"flood": 0.7, "storm": 0.0}}
    assert doc["b"]["demo"]["recall"]["floor_at"] == "motion_blur_s3 (+1 tied)"  # ties counted
    fs = doc["fs_net"]["firespread"]
    assert sorted(fs) == ["brier", "f1"]  # F2R and F2S headline metrics side by side
    # one family: no 'worst'; no clean; the floor with its interval
    assert fs["f1"] == {"floor": 0.2, "floor_lo": 0.19, "floor_hi": 0.21, "floor_at": "firespread_s50"}
    assert fs["brier"]["floor"] == pytest.approx(0.05 + 50 / 500 + 0.1)  # lower is better: the largest

    def leaves(d, path=()):
        for k, v in d.items():
            yield from leaves(v, (*path, k)) if isinstance(v, dict) else [((*path, k), v)]

    values = list(leaves(doc))
    assert len(values) <= 80  # a summary, not the table: 5 models here, each value with its interval
    # every number is the leaderboard.parquet's value of the condition it names
    long = pl.read_parquet(tmp_path / "lb1" / "leaderboard.parquet")
    for path, value in values:
        sub, source, metric, *rest = path
        cells = long.filter((pl.col("submission") == sub) & (pl.col("source") == source) & (pl.col("metric") == metric))
        if rest[0] in ("clean", "clean_lo", "clean_hi"):
            col = {"clean": "value", "clean_lo": "lo", "clean_hi": "hi"}[rest[0]]
            assert cells.filter(pl.col("config") == "clean")[col].to_list() == [value]
        elif rest[0] in ("floor", "floor_lo", "floor_hi"):
            at = doc[sub][source][metric]["floor_at"].split(" ")[0]
            col = {"floor": "value", "floor_lo": "lo", "floor_hi": "hi"}[rest[0]]
            assert cells.filter(pl.col("config") == at)[col].to_list() == [value]
            col = cells["value"].drop_nulls()
            assert rest[0] != "floor" or value == (col.max() if metric == "brier" else col.min())
        elif rest[0] == "worst":
            fam = cells.filter(pl.col("family") == rest[1])["value"]
            assert value == (fam.max() if metric == "brier" else fam.min())
        else:
            assert rest == ["floor_at"] and isinstance(value, str)

    def snapshot(root: Path) -> dict:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert snapshot(tmp_path / "lb1") == snapshot(tmp_path / "lb2")  # same results + flags: same bytes
    assert snapshot(tmp_path / "p1") == snapshot(tmp_path / "p2")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_severity_plots_are_titled_svg_images_beside_their_data(mixed_results, tmp_path):
    data = fake_dataset(tmp_path / "data")
    plots = tmp_path / "plots" / "severity"
    rep = build_leaderboard(mixed_results, data, tmp_path / "lb", evaluator_version=EV, references=["c"],
                            plots=plots)
    names = sorted(p.name for p in plots.iterdir())
    stems = ["firespread__firespread__stochasticity__brier", "firespread__firespread__stochasticity__f1",
             "sar__demo__low_light", "sar__demo__motion_blur", "sar__demo__turbidity_cast", "sar__demo__water_glare"]
    assert names == list(rep.plots) == sorted(f"{s}{ext}" for s in stems for ext in (".json", ".svg"))
    # the data of each image: one record per model and condition, the leaderboard's value and interval
    long = pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")
    records = json.loads((plots / "sar__demo__low_light.json").read_text())
    assert [(r["model"], r["condition"], r["severity"]) for r in records] == [
        ("Charlie [c] (reference)", "clean", 0), ("Charlie [c] (reference)", "low_light_s3", 3),
        ("Alpha [a]", "clean", 0), ("Alpha [a]", "low_light_s3", 3),
        ("Bravo [b]", "clean", 0), ("Bravo [b]", "low_light_s3", 3)]
    for r in records:
        cell = long.filter((pl.col("submission") == r["submission"]) & (pl.col("config") == r["condition"])
                           & (pl.col("metric") == "recall")).row(0, named=True)
        assert r["metric"] == "recall" and (r["value"], r["lo"], r["hi"]) == (cell["value"], cell["lo"], cell["hi"])
    fire = json.loads((plots / "firespread__firespread__stochasticity__brier.json").read_text())
    assert sorted({r["severity"] for r in fire}) == [0, 30, 50] and {r["metric"] for r in fire} == {"brier"}
    low = (plots / "sar__demo__low_light.svg").read_text()
    assert low.startswith("<?xml") and "<svg" in low and "http://" not in low.replace(
        "http://www.w3.org", "").replace("http://purl.org", "").replace("http://creativecommons.org", "")
    for text in ("vs severity: low_light on demo", "severity (0 = the model", "Charlie [c] (reference)",
                 "Alpha [a]", "Bravo [b]", "band: 95% interval"):
        assert text in low, text
    fire = (plots / "firespread__firespread__stochasticity__f1.svg").read_text()
    assert "S-Level" in fire and "severity" not in fire and "CA ensemble [fs_ref]" in fire
    assert ">30<" in fire or "30</text>" in fire  # the S-Level ticks are the levels themselves

    # a rebuild replaces the folder whole: curves that no longer exist do not linger
    (plots / "sar__demo__dust_haze.svg").write_text("<svg/>")
    shutil.rmtree(mixed_results / "fs_ref")
    shutil.rmtree(mixed_results / "fs_net")
    rep = build_leaderboard(mixed_results, data, tmp_path / "lb", evaluator_version=EV, plots=plots)
    assert sorted(p.name for p in plots.iterdir()) == list(rep.plots) == names[4:]
    assert "Charlie [c] (reference)" not in (plots / "sar__demo__low_light.svg").read_text()
    assert sorted(p.name for p in plots.parent.iterdir()) == ["severity"]


def test_cli_flags_and_bad_flags(hand_results, tmp_path, main, capsys):  # noqa: F811
    data = fake_dataset(tmp_path / "data")
    base = ["leaderboard", "--results", str(hand_results), "--dataset", str(data), "--evaluator-version", EV]
    rc = main([*base, "--out", str(tmp_path / "lb"), "--reference", "c", "--reference", "ghost",
               "--metrics", str(tmp_path / "metrics" / "leaderboard.json"), "--plots", str(tmp_path / "plots")])
    out = capsys.readouterr().out
    assert rc == 0 and "metrics " in out and "4 SVG image(s) and 4 JSON data file(s)" in out
    assert json.loads((tmp_path / "metrics" / "leaderboard.json").read_text())["c"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.md").write_text("mine")
    bad = {
        "--metrics must name a .json file": ["--metrics", str(tmp_path / "m.txt")],
        "--metrics names a folder": ["--metrics", str(tmp_path / "notes.json")],
        "another output of the command: give them separate places": ["--metrics", str(tmp_path / "lb2" / "m.json")],
        "--plots names a file": ["--plots", str(tmp_path / "notes" / "keep.md")],
        "lies inside --plots": ["--plots", str(tmp_path)],  # --plots would hold --out and --results
        "lies inside --results": ["--plots", str(hand_results / "plots")],
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


def _shift_clean_recall(results: Path, sub: str, by: float) -> None:
    """Lower ``sub``'s clean recall (value and interval) by ``by``: another experiment's result."""
    path = results / sub / "metrics.parquet"
    df = pl.read_parquet(path)
    hit = (pl.col("config") == "clean") & (pl.col("metric") == "recall")
    df.with_columns([pl.when(hit).then(pl.col(c) - by).otherwise(pl.col(c)).alias(c) for c in ("value", "lo", "hi")]
                    ).write_parquet(path)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_dvc_plots_and_metrics_show_read_the_exports(mixed_results, tmp_path):
    """`dvc plots show` shows the SVG images (offline) and draws the data; `dvc plots diff` overlays
    two revisions' curves; `dvc metrics show` / `diff` carry the intervals."""
    pytest.importorskip("dvc")
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "DVC_SITE_CACHE_DIR": str(tmp_path / "dvc-site"),
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path), "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e.org"}
    dvc = [sys.executable, "-m", "dvc"]

    def run(*args):
        proc = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{args}:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def build():
        build_leaderboard(mixed_results, fake_dataset(tmp_path / "data"), repo / "leaderboard", evaluator_version=EV,
                          references=["c"], metrics=repo / "metrics" / "leaderboard.json",
                          plots=repo / "plots" / "severity")

    run("git", "init", "-q")
    run(*dvc, "init", "-q")
    build()
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["leaderboard"]
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"leaderboard": {  # as in the project's dvc.yaml
        "cmd": "aegisbench leaderboard", "outs": [{"leaderboard": {"cache": False}}],
        "metrics": stage["metrics"], "plots": stage["plots"]}}}))
    template = stage["plots"][0]["plots/severity"]["template"]
    (repo / template).parent.mkdir(parents=True)
    shutil.copy(ROOT / template, repo / template)  # the project's template, where dvc.yaml names it

    shown = json.loads(run(*dvc, "plots", "show", "--json"))
    assert not shown.get("errors"), shown.get("errors")
    files = sorted(p.name for p in (repo / "plots" / "severity").iterdir())
    assert sorted(shown["data"]) == [f"plots/severity/{n}" for n in files] and len(files) == 12
    for name, entries in shown["data"].items():
        assert [e["type"] for e in entries] == (["image"] if name.endswith(".svg") else ["vega"]), name
    spec = shown["data"]["plots/severity/sar__demo__low_light.json"][0]["content"]
    assert spec["encoding"]["x"]["field"] == "severity" and spec["encoding"]["color"]["field"] == "model"
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["area", "line"]  # the interval band, the line
    run(*dvc, "plots", "show", "-o", str(tmp_path / "html"))
    html = (tmp_path / "html" / "index.html").read_text()
    assert html.count("<img") == 6  # the images need nothing fetched: readable offline

    metrics = json.loads(run(*dvc, "metrics", "show", "--json"))
    (entry,) = metrics.values()
    data = entry["data"]["metrics/leaderboard.json"]["data"]
    assert data == json.loads((repo / "metrics" / "leaderboard.json").read_text())
    table = run(*dvc, "metrics", "show")  # the plain table flattens the nesting into columns
    assert "c.demo.recall.floor_at" in table and "low_light_s3" in table
    assert "a.demo.recall.clean_lo" in table and "a.demo.recall.floor_hi" in table

    # another experiment: Alpha's clean recall lower; dvc plots diff overlays both revisions' curves
    run("git", "add", "-A")
    run("git", "commit", "-qm", "one experiment")
    _shift_clean_recall(mixed_results, "a", 0.25)
    build()
    diff = json.loads(run(*dvc, "plots", "diff", "HEAD", "--json"))
    (plot,) = diff["data"]["plots/severity/sar__demo__low_light.json"]
    assert plot["type"] == "vega" and sorted(plot["revisions"]) == ["HEAD", "workspace"]
    alpha = {(r["rev"], r["condition"]): (r["value"], r["lo"], r["hi"]) for r in plot["content"]["data"]["values"]
             if r["submission"] == "a"}
    assert alpha[("HEAD", "clean")] == (0.8, 0.75, 0.85)
    assert alpha[("workspace", "clean")] == pytest.approx((0.55, 0.5, 0.6))
    assert alpha[("HEAD", "low_light_s3")] == alpha[("workspace", "low_light_s3")]
    changed = json.loads(run(*dvc, "metrics", "diff", "HEAD", "--json"))["metrics/leaderboard.json"]
    assert changed["a.demo.recall.clean"]["old"] == 0.8 and changed["a.demo.recall.clean_lo"]["old"] == 0.75
    assert changed["a.demo.recall.clean_hi"]["new"] == pytest.approx(0.6)
