"""``aegisbench export`` (CSV, LaTeX, JSON of the per-condition table with intervals) and
``leaderboard/CITATION.bib``, on hand-made results folders: every exported number is the
leaderboard's, the LaTeX compiles (pdflatex, when installed), the BibTeX parses (pybtex, and
``bibtex`` when installed), and bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import csv
import io
import json
import logging
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from aegisbench.leaderboard.build import build_leaderboard
from aegisbench.leaderboard.export_table import COLUMNS, export_table
from aegisbench.leaderboard.latex import tex
from test_leaderboard import (DIGEST, EV, SCHEMA, fake_dataset, hand_results, hand_rows, main,  # noqa: F401
                              row, write_result)

HOSTILE = "Zoë <b>&co_1 $5 #1 ~^\\ 50% {x} α†"


@pytest.fixture
def board(hand_results, tmp_path):
    """A built leaderboard of the hand-made results plus a thermal source with a value that is
    not defined (n/a with its reason) and a model with a hostile name."""
    rows = [row("t", "clean", "recall", 0.5, 0.4, 0.6, source="thermal"),
            row("t", "low_light_s1", "recall", None, source="thermal"),
            row("t", "clean", "fp", 3.0, 1.0, 5.0, source="thermal")]
    folder = write_result(hand_results, "t", rows, model=HOSTILE, threshold=0.3)
    df = pl.read_parquet(folder / "metrics.parquet").with_columns(
        pl.when(pl.col("value").is_null()).then(pl.lit("not physical for thermal")).otherwise(None).alias("note"))
    df.write_parquet(folder / "metrics.parquet")
    build_leaderboard(hand_results, fake_dataset(tmp_path / "data"), tmp_path / "lb", evaluator_version=EV)
    return tmp_path / "lb"


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _num(text: str) -> float | None:
    return None if text == "" else float(text)


def test_csv_and_json_hold_every_headline_cell_of_the_leaderboard(board, hand_results):
    text, n = export_table("csv", leaderboard=board)
    assert text.splitlines()[0] == ",".join(COLUMNS)
    rows = _csv(text)
    long = pl.read_parquet(board / "leaderboard.parquet")
    assert n == len(rows) == long.height  # every cell of these results is a headline cell
    cells = {(r["submission"], r["source"], r["config"], r["metric"]): r for r in long.iter_rows(named=True)}
    for r in rows:
        cell = cells[(r["submission"], r["source"], r["condition"], r["metric"])]
        for col in ("value", "lo", "hi"):
            assert _num(r[col]) == cell[col], (r, col)
        assert (r["model"], r["status"], r["n"]) == (cell["model"], cell["status"], str(cell["n"]))
    na = next(r for r in rows if r["submission"] == "t" and r["condition"] == "low_light_s1")
    assert (na["value"], na["lo"], na["note"]) == ("", "", "not physical for thermal")  # never 0
    assert [r["condition"] for r in rows if r["submission"] == "a" and r["metric"] == "recall"] == [
        "clean", "water_glare_s1", "turbidity_cast_s1", "motion_blur_s3", "low_light_s3"]  # condition order

    doc, again = json.loads(export_table("json", leaderboard=board)[0]), export_table("csv", leaderboard=board)[0]
    assert again == text  # same bytes
    assert [list(d) for d in doc] == [list(COLUMNS)] * len(rows)
    for d, r in zip(doc, rows):
        assert {k: ("" if v is None else str(v)) for k, v in d.items() if k not in ("value", "lo", "hi")} == \
            {k: v for k, v in r.items() if k not in ("value", "lo", "hi")}
        assert all(d[k] == _num(r[k]) for k in ("value", "lo", "hi"))

    # the results folders themselves give the same table
    assert export_table("csv", results=hand_results)[0] == text
    one = _csv(export_table("csv", results=hand_results, models=["b"])[0])
    assert {r["submission"] for r in one} == {"b"} and len(one) == sum(r["submission"] == "b" for r in rows)


def test_filters_keep_one_model_and_source(board):
    rows = _csv(export_table("csv", leaderboard=board, models=["Alpha"], metrics=["recall"])[0])
    assert {(r["submission"], r["metric"]) for r in rows} == {("a", "recall")} and len(rows) == 5
    by_id = export_table("csv", leaderboard=board / "leaderboard.parquet", models=["a"], metrics=["recall"])[0]
    assert _csv(by_id) == rows
    rows = _csv(export_table("csv", leaderboard=board, sources=["thermal"])[0])
    assert {r["source"] for r in rows} == {"thermal"} and len(rows) == 3


def _tables(text: str) -> list[str]:
    return re.findall(r"\\begin\{table\}.*?\\end\{table\}", text, flags=re.S)


def test_latex_is_a_booktabs_table_per_metric_with_intervals_and_notes(board, tmp_path):
    text, n = export_table("latex", leaderboard=board)
    tables = _tables(text)
    # no --metric: the primary metric (recall) of each source
    assert len(tables) == 2 and n == 15 + 2 and "\\cite{aegisbench}" in text
    demo = next(t for t in tables if "texttt{demo}" in t)
    assert "\\toprule" in demo and "\\midrule" in demo and "\\bottomrule" in demo
    assert "Condition & Alpha & Bravo & Charlie \\\\" in demo
    assert "clean & 0.800 [0.750, 0.850] & 0.780 [0.720, 0.840] & 0.600 [0.550, 0.650] \\\\" in demo
    assert "Recall (higher is better) per condition on \\texttt{demo} (sar track)" in demo
    for tab in tables:  # every row has one cell per column
        body = tab[tab.index("\\midrule"):tab.index("\\bottomrule")].splitlines()[1:]
        cols = int(re.search(r"\*\{(\d+)\}\{c\}", tab).group(1)) + 1
        assert body and all(len(re.split(r"(?<!\\)&", line)) == cols for line in body), tab
    thermal = next(t for t in tables if "texttt{thermal}" in t)
    assert tex(HOSTILE) in thermal and HOSTILE not in thermal
    # a condition not built for the sensor: no n/a row, one line under the table (as on the page)
    assert "low\\_light\\_s1 &" not in thermal
    assert "Not built for the thermal sensor (its physics does not hold): low\\_light\\_s1." in thermal
    assert "Not verified by the benchmark's own run:" in thermal  # self-reported rows are marked
    fp = _tables(export_table("latex", leaderboard=board, metrics=["fp"])[0])
    demo_fp = next(t for t in fp if "texttt{demo}" in t)
    assert "water\\_glare\\_s1 & 40 [35, 45] & -- & -- \\\\" in demo_fp  # counts without decimals; not scored: --
    assert "--: not scored on this condition." in demo_fp

    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex is not installed: the LaTeX was checked, not compiled")
    (tmp_path / "tables.tex").write_text(text + "\n".join(fp))
    (tmp_path / "paper.tex").write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
                                        "\\input{tables.tex}\n\\end{document}\n")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "paper.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:]
    log = (tmp_path / "paper.log").read_text(errors="replace")
    assert (tmp_path / "paper.pdf").stat().st_size > 1000 and "Missing character" not in log


def test_cli_writes_the_file_atomically_or_stdout(board, tmp_path, main, capsys):  # noqa: F811
    out = tmp_path / "paper" / "table.csv"
    assert main(["export", "--leaderboard", str(board), "--format", "csv", "--out", str(out)]) == 0
    assert f"export {out}: " in capsys.readouterr().out
    assert out.read_text() == export_table("csv", leaderboard=board)[0]
    assert sorted(p.name for p in out.parent.iterdir()) == ["table.csv"]  # no temporary file left
    assert main(["export", "--leaderboard", str(board), "--format", "json", "--model", "b", "--out", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(export_table("json", leaderboard=board, models=["b"])[0])
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for text in ("--format {csv,latex,json}", "--leaderboard PATH", "--results DIR", "--model NAME", "--out FILE"):
        assert text in help_text, text


def _empty_result(root: Path, sub: str) -> Path:
    folder = write_result(root, sub, [row(sub, "clean", "recall", 0.5, 0.4, 0.6)])
    pl.DataFrame(schema=SCHEMA).write_parquet(folder / "metrics.parquet")
    return folder


def test_bad_input_is_one_line_exit_2_and_nothing_written(board, hand_results, tmp_path, main, capsys):  # noqa: F811
    out = tmp_path / "out.csv"
    empty = _empty_result(tmp_path / "lonely", "e")
    (tmp_path / "nothing").mkdir()
    build_leaderboard(tmp_path / "nothing", tmp_path / "data", tmp_path / "empty_lb", evaluator_version=EV)
    other = write_result(tmp_path / "mixed", "x", [row("x", "clean", "recall", 0.5, 0.4, 0.6)], digest="e" * 64)
    write_result(tmp_path / "mixed", "y", [row("y", "clean", "recall", 0.5, 0.4, 0.6)])
    (tmp_path / "folder.csv").mkdir()
    cases = {
        f"{empty / 'metrics.parquet'}: no rows": ["--results", str(empty.parent)],
        f"is one submission's results, not the results folder: give --results {empty.parent} --model e":
            ["--results", str(empty)],
        "no results folder in it": ["--results", str(tmp_path / "nothing")],
        "no rows: nothing to export": ["--leaderboard", str(tmp_path / "empty_lb")],
        f"--leaderboard {tmp_path / 'absent'}: does not exist": ["--leaderboard", str(tmp_path / "absent")],
        "--model: 'Alpah' is not in the table (did you mean 'Alpha'?)": ["--leaderboard", str(board), "--model", "Alpah"],
        "--source: 'dem' is not in the table (did you mean 'demo'?)": ["--leaderboard", str(board), "--source", "dem"],
        "--model a --source thermal: no row has all of them": ["--leaderboard", str(board), "--model", "a",
                                                               "--source", "thermal"],
        f"x on dataset {'e' * 12} by evaluator": ["--results", str(other.parent)],
        "names a folder, expected a file": ["--leaderboard", str(board), "--out", str(tmp_path / "folder.csv")],
        "writing it would change that input": ["--leaderboard", str(board), "--out", str(board / "leaderboard.parquet")],
    }
    for message, flags in cases.items():
        args = ["export", *flags] if "--out" in flags else ["export", *flags, "--out", str(out)]
        rc = main(args)
        err = capsys.readouterr().err
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, (message, err)
        assert not out.exists()
    assert list((tmp_path / "folder.csv").iterdir()) == []
    with pytest.raises(SystemExit) as exc:
        main(["export", "--leaderboard", str(board), "--format", "latx"])
    assert exc.value.code == 2 and "did you mean 'latex'" in capsys.readouterr().err


def _card(dataset: Path, sources: list[dict]) -> None:
    doc = {"descriptions": {"clean": "clean"}, "sources": sources}
    (dataset / "README.md").write_text("# card\n\n<!-- aegisbench-card-inputs " + json.dumps(doc, sort_keys=True)
                                       + " -->\n")


def test_citation_bib_has_the_benchmark_and_every_source(hand_results, tmp_path, caplog):
    pybtex = pytest.importorskip("pybtex.database")
    data = fake_dataset(tmp_path / "data")
    manifest = json.loads((data / "manifest.json").read_text())
    (data / "manifest.json").write_text(json.dumps({**manifest, "benchmark_version": "9.8.7"}))
    hit = "@article{suo2023hituav,\n  title = {{HIT-UAV}: A high-altitude infrared thermal dataset},\n" \
          "  author = {Suo, Jiashun and others},\n  journal = {Scientific Data},\n  year = {2023}\n}"
    _card(data, [{"name": "hit_uav", "citation": hit}, {"name": "synthetic_sar", "citation": ""},
                 {"name": "broken", "citation": "@article{broken, title={x}"},
                 {"name": "again", "citation": "@misc{SUO2023HITUAV, title={dup}, year={2024}}"}])
    with caplog.at_level(logging.WARNING, logger="aegisbench.leaderboard.citations"):
        build_leaderboard(hand_results, data, tmp_path / "lb", evaluator_version=EV)
    text = (tmp_path / "lb" / "CITATION.bib").read_text()
    parsed = pybtex.parse_string(text, "bibtex")
    assert list(parsed.entries) == ["aegisbench", "suo2023hituav"]
    assert f"Benchmark version 9.8.7, dataset digest {DIGEST}" in parsed.entries["aegisbench"].fields["note"]
    assert hit in text and "% synthetic_sar: no citation given in the dataset card" in text
    assert "% broken: its citation in the dataset card is not valid BibTeX (left out)" in text
    assert "% again: its citation key SUO2023HITUAV is already used above (left out)" in text
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "source broken: citation" in warned and "'SUO2023HITUAV' is already in CITATION.bib" in warned
    build_leaderboard(hand_results, data, tmp_path / "lb2", evaluator_version=EV)
    assert (tmp_path / "lb2" / "CITATION.bib").read_text() == text  # same dataset, same bytes

    if shutil.which("bibtex") is None:
        pytest.skip("bibtex is not installed: the file was parsed with pybtex, not run through BibTeX")
    (tmp_path / "lb" / "paper.aux").write_text("\\citation{*}\n\\bibdata{CITATION}\n\\bibstyle{plain}\n")
    proc = subprocess.run(["bibtex", "paper"], cwd=tmp_path / "lb", capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "error" not in proc.stdout.lower(), proc.stdout
    bbl = (tmp_path / "lb" / "paper.bbl").read_text()
    assert "AegisBench" in bbl and "HIT-UAV" in bbl


def test_latex_names_conditions_not_built_for_the_sensor_once_instead_of_n_a_rows():
    from aegisbench.leaderboard.latex import latex_table

    def r(cond, value, note=None, order=0):
        return {"submission": "s", "model": "m", "status": "verified", "condition": cond, "_order": order,
                "value": value, "lo": value, "hi": value, "note": note, "dataset_version": "0.6.0",
                "evaluator_version": EV, "track": "sar", "source": "thermal", "metric": "recall"}
    rows = [r("clean", 0.8, order=0), r("low_light_s3", None, "not physical for thermal", 1),
            r("motion_blur_s3", 0.4, order=2), r("inundation_s1", None, "0/0", 3)]
    text = latex_table("sar", "thermal", "recall", rows)
    body = text[text.index(r"\midrule"):text.index(r"\bottomrule")]
    assert "low\\_light" not in body and "motion\\_blur\\_s3 & 0.400" in body
    assert "inundation\\_s1 & n/a\\textsuperscript{a}" in body  # 0/0 stays a row: it was built and is undefined
    assert "Not built for the thermal sensor (its physics does not hold): low\\_light\\_s3." in text
