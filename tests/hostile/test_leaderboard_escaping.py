"""Markdown injection through submitter text: folder ids with double backticks and newlines,
model and team names, families, metric names and machine classes carrying ``<img onerror>``; the rendered
README (CommonMark + GFM tables, raw HTML allowed) and the site hold no live tag."""

from __future__ import annotations

import re

import pytest

from aegisbench.leaderboard.build import build_leaderboard
from test_leaderboard import EV, fake_dataset, hand_rows, row, write_result

IMG = "<img src=x onerror=alert({})>"
IDS = ("x``" + IMG.format(1), "nl\n" + IMG.format(2) + "``|`", "tick`" + IMG.format(3) + "\\|pipe")


def _evil_results(root):
    for i, sub in enumerate(IDS):
        rows = [{**r, "submission": sub} for r in hand_rows("a")]
        rows.append({**row(sub, "evil_s1", "recall", 0.5, 0.4, 0.6), "corruption": "evil",
                     "family": IMG.format(10 + i)})
        rows.append(row(sub, "clean", IMG.format(20 + i), 0.5))  # an unregistered metric
        write_result(root, sub, rows, model=f"M``{IMG.format(30 + i)}\n# heading | x", team=f"t\n{IMG.format(40 + i)}",
                     threshold=0.4, kernels=f"x86-64-v3``{IMG.format(50 + i)}|`")  # a machine class (one line)
    return root


def test_readme_and_site_hold_no_live_tag(tmp_path):
    md_it = pytest.importorskip("markdown_it")
    rep = build_leaderboard(_evil_results(tmp_path / "results"), fake_dataset(tmp_path / "data"), tmp_path / "lb",
                            evaluator_version=EV, references=[IDS[0]])
    assert sorted(rep.merged) == sorted(IDS)
    readme = (tmp_path / "lb" / "README.md").read_text()
    html = md_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(readme)
    assert "<img" not in html.lower(), re.findall(r".{60}<img.{30}", html)
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # shown as text, not dropped
    assert "&lt;img src=x onerror=alert(50)&gt;" in html  # the machine class too
    assert html.count("<h1>") == 1  # a newline in a name starts no heading
    for table in re.findall(r"<table>.*?</table>", html, flags=re.S):  # no row broken by a pipe or newline
        head = len(re.findall(r"<th[ >]", table.split("</thead>")[0]))
        rows = re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], flags=re.S)
        assert all(len(re.findall(r"<td[ >]", r)) == head for r in rows), table[:400]
    for line in readme.splitlines():  # every table line is one row: newlines in names were flattened
        assert not line.startswith("|") or line.rstrip().endswith("|"), line
    page = (tmp_path / "lb" / "site" / "index.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(30)&gt;" in page
    for model in (tmp_path / "lb" / "site" / "models").glob("*.html"):
        text = model.read_text()
        assert "<img src=x" not in text and "onerror=alert(5" in text, model.name  # the class, escaped
