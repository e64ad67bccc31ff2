"""The machine class of each leaderboard row (issue 36 item 2): the ``kernels`` a result's
provenance records becomes the long table's ``kernels`` column, and each model page and the
Markdown README say which class produced the rows and whether another machine gives the same
bytes; a submitter's text there is escaped, bounded, and shown as not recorded when it is not one
line of plain text. Results folders are real files on disk (metrics.parquet + provenance.json)."""

from __future__ import annotations

import logging

import polars as pl
import pytest

from aegisbench.leaderboard.aggregate import LONG_COLUMNS
from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.leaderboard.machine import (MACHINE_DEPENDENT, PORTABLE, by_submission, machine_text,
                                            portability)
from test_leaderboard import EV, HAND, fake_dataset, hand_rows, row, write_result

PORTABLE_CPU = "x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread, torch 2.14.1"
ONEDNN = "x86-64-v3, oneDNN on, MKL COMPATIBLE, 2 threads, torch 2.14.1"
GPU = "cuda:0, torch 2.14.1+cu130"


def _results(root, kernels: dict):
    for sub, model in (("a", "Alpha"), ("b", "Bravo"), ("c", "Charlie")):
        prov = {"kernels": kernels[sub]} if sub in kernels else {}
        write_result(root, sub, hand_rows(sub), model=model, threshold=0.4, **prov)
    return root


@pytest.mark.parametrize("kernels, expected", [
    (PORTABLE_CPU, (PORTABLE, None)),
    ("x86-64-v3, oneDNN off, MKL COMPATIBLE, 8 threads, torch 2.14.1+cu130", (PORTABLE, None)),
    (ONEDNN, (MACHINE_DEPENDENT, "oneDNN on")),
    (GPU, (MACHINE_DEPENDENT, "a GPU (cuda:0)")),
    ("native-aarch64, oneDNN off, MKL unpinned, 1 thread, torch 2.14.1",
     (MACHINE_DEPENDENT, "native-aarch64 kernels, not the x86-64-v3 pins")),
    ("x86-64-v3, oneDNN off, MKL AVX2, 1 thread, torch 2.14.1",
     (MACHINE_DEPENDENT, "MKL's branch not pinned to COMPATIBLE")),
    # the reference detectors' and the ConvLSTM's class since 0.9.0: the convolutions on OpenBLAS's pinned kernels
    (PORTABLE_CPU + ", conv OpenBLAS 0.3.31.188.0 Haswell", (PORTABLE, None)),
    (PORTABLE_CPU + ", conv OpenBLAS 0.3.31.188.0 SkylakeX", (MACHINE_DEPENDENT, "OpenBLAS's kernels not pinned to Haswell")),
    (PORTABLE_CPU + ", conv NumPy 2.3.0 BLAS", (MACHINE_DEPENDENT, "the convolutions on an unidentified BLAS")),
    (PORTABLE_CPU + ", conv OpenBLAS 0.3.31 Haswell, extra", (MACHINE_DEPENDENT, "not a machine class this project writes")),
    ("my laptop", (MACHINE_DEPENDENT, "not a machine class this project writes")),
    (None, None),
])
def test_portability_of_each_class(kernels, expected):
    assert portability(kernels) == expected


def test_column_model_pages_and_readme_name_the_machine_class(tmp_path):
    results = _results(tmp_path / "results", {"a": PORTABLE_CPU, "b": ONEDNN})
    write_result(results, "gpu", [row("gpu", c, "recall", *v) for c, v in HAND["c"].items()], model="Gpu",
                 kernels=GPU)
    write_result(results, "paper", [row("paper", "clean", "recall", 0.9)], model="Paper", status="published",
                 kernels=PORTABLE_CPU)  # numbers from a paper were not computed here: no class
    lb = tmp_path / "lb"
    build_leaderboard(results, fake_dataset(tmp_path / "data"), lb, evaluator_version=EV)
    long = pl.read_parquet(lb / "leaderboard.parquet")
    assert long.schema["kernels"] == pl.String and list(long.columns) == list(LONG_COLUMNS)
    per = {s: sorted(set(long.filter(pl.col("submission") == s)["kernels"].to_list()), key=str)
           for s in ("a", "b", "c", "gpu", "paper")}
    assert per == {"a": [PORTABLE_CPU], "b": [ONEDNN], "c": [None], "gpu": [GPU], "paper": [None]}
    assert by_submission(long) == {"a": PORTABLE_CPU, "b": ONEDNN, "c": None, "gpu": GPU, "paper": None}

    page = {s: (lb / "site" / "models" / f"{s}.html").read_text() for s in per}
    assert f"<code>{PORTABLE_CPU}</code>" in page["a"]
    assert "portable: the same bytes on every x86-64 machine" in page["a"]
    assert "machine-dependent (oneDNN on): rows may differ on another machine" in page["b"]
    assert "machine-dependent (a GPU (cuda:0)): rows may differ on another machine" in page["gpu"]
    for sub in ("c", "paper"):
        assert ">not recorded<" in page[sub] and "rows may differ" not in page[sub]

    readme = (lb / "README.md").read_text()
    assert "| computed on (machine class) |" in readme
    line = {s: next(ln for ln in readme.splitlines() if ln.startswith("|") and f"| `{s}` |" in ln)
            for s in ("a", "b", "c", "gpu")}
    assert f"| `{PORTABLE_CPU}`: portable: the same bytes on every x86-64 machine |" in line["a"]
    assert f"| `{ONEDNN}`: machine-dependent (oneDNN on): rows may differ on another machine |" in line["b"]
    assert "| not recorded |" in line["c"]
    assert "*Computed on* is the machine class" in readme

    again = tmp_path / "lb2"  # deterministic: the same results, the same bytes
    build_leaderboard(results, fake_dataset(tmp_path / "data"), again, evaluator_version=EV)
    for rel in ("README.md", "leaderboard.parquet", "site/models/a.html", "site/models/b.html"):
        assert (again / rel).read_bytes() == (lb / rel).read_bytes(), rel


def test_submitter_kernels_text_is_escaped_bounded_or_not_shown(tmp_path, caplog):
    evil = "x86-64-v3, <img src=x onerror=alert(1)>, `|` <script>alert(2)</script>"
    results = _results(tmp_path / "results", {"a": evil, "b": "x" * 201, "c": "cpu\nINFO forged line"})
    write_result(results, "d", [row("d", c, "recall", *v) for c, v in HAND["c"].items()], model="Delta",
                 kernels=["not", "a string"])
    lb = tmp_path / "lb"
    with caplog.at_level(logging.WARNING, logger="aegisbench"):
        build_leaderboard(results, fake_dataset(tmp_path / "data"), lb, evaluator_version=EV)
    assert by_submission(pl.read_parquet(lb / "leaderboard.parquet")) == {"a": evil, "b": None, "c": None, "d": None}
    warned = sorted(r.getMessage() for r in caplog.records if "machine" in r.name)
    assert warned == ["b: provenance kernels is 201 characters long, more than the limit of 200: shown as not recorded",
                      ("c: provenance kernels holds a control or bidirectional-override character (U+000A): write "
                       "plain text: shown as not recorded"),
                      "d: provenance kernels must be a string, got list: shown as not recorded"]
    page = (lb / "site" / "models" / "a.html").read_text()
    assert "<img src=x" not in page and page.count("<script") == 1  # only the page's own sorting script
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    for sub in "bcd":  # the machine-class row says not recorded (the raw provenance record, at the end, is text)
        machine_row = next(ln for ln in (lb / "site" / "models" / f"{sub}.html").read_text().splitlines()
                           if "machine class</th>" in ln)
        assert ">not recorded<" in machine_row and "<code>" not in machine_row, sub
    md_it = pytest.importorskip("markdown_it")
    html = md_it.MarkdownIt("commonmark", {"html": True}).enable("table").render((lb / "README.md").read_text())
    assert "<img" not in html.lower() and "<script" not in html.lower() and "&lt;img src=x onerror=alert(1)&gt;" in html
    readme = (lb / "README.md").read_text()
    assert "INFO forged line" not in readme and "x" * 201 not in readme
    # a table read from a file is bounded too: at most three classes of a submission, each one line
    table = pl.DataFrame({"submission": ["s"] * 5, "kernels": ["k\n1", *("y" * 300 + str(i) for i in range(4))]})
    shown = by_submission(table)["s"]
    assert "\n" not in shown and shown.endswith("; and 2 more") and len(shown) < 3 * 200 + 20
    assert machine_text(None) == "not recorded"
