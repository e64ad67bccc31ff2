"""No command destroys its own inputs: an --out that is, holds or lies inside an input is
refused before anything is written (evaluate, leaderboard, build, export-coco, detect, ...);
building a source into a repo that holds another keeps it or is refused without --replace;
a source folder read in the wrong format is refused, not built empty."""

from __future__ import annotations

import argparse
import shutil

import pytest

from _evalkit import gt_table, write_submission
from _hostilekit import files_of
from aegisbench.cli import build_parser, main
from aegisbench.overlap import IO_KEY, refuse_overlap
from test_adapters import heridal, sard  # noqa: F401  (fixtures)
from test_leaderboard import fake_dataset, hand_results  # noqa: F401

SARD_MAP = "0=person,1=person,2=person,3=person,4=person,5=person"


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def project(tmp_path, index):
    """submissions/gt (a valid sar submission) and results/ with one earlier result."""
    sub = write_submission(tmp_path / "submissions" / "gt", index, "sar", gt_table(index, "sar"))
    (tmp_path / "results" / "old").mkdir(parents=True)
    (tmp_path / "results" / "old" / "metrics.parquet").write_bytes(b"an earlier result")
    return sub


@pytest.mark.parametrize("out", ["submissions", "submissions/gt", "submissions/gt/results", "."])
def test_evaluate_refuses_an_out_over_its_submission(project, repo, tmp_path, capsys, monkeypatch, out):
    monkeypatch.chdir(tmp_path)
    before = files_of(tmp_path)
    rc = main(["evaluate", "submissions/gt", "--dataset", str(repo), "--no-verify", "--results", out,
               "--n-resamples", "10"])
    err = _one_line(capsys)
    assert rc == 2 and err.startswith(f"aegisbench evaluate: error: --results {out}: ")
    assert "submission submissions/gt" in err and "give --results a place outside every input" in err
    assert files_of(tmp_path) == before


def test_evaluate_into_a_results_folder_still_works(project, repo, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "submissions/gt", "--dataset", str(repo), "--no-verify", "--results", "results",
                 "--n-resamples", "10"]) == 0, capsys.readouterr().err
    assert (tmp_path / "results" / "gt" / "metrics.parquet").is_file()
    assert (tmp_path / "results" / "old" / "metrics.parquet").read_bytes() == b"an earlier result"


def test_evaluate_refuses_an_out_over_its_dataset(project, repo, tmp_path, capsys):
    copy = tmp_path / "data" / "repo"
    shutil.copytree(repo, copy)
    before = files_of(copy)
    rc = main(["evaluate", str(project), "--dataset", str(copy), "--no-verify", "--out", str(copy.parent)])
    assert rc == 2 and f"holds --dataset {copy}" in _one_line(capsys)
    assert files_of(copy) == before


@pytest.mark.parametrize("flag, target", [("--out", "results"), ("--out", "data"), ("--out", "."),
                                          ("--out", "results/a"), ("--plots", "data")])
def test_leaderboard_refuses_an_out_over_results_or_dataset(hand_results, tmp_path, capsys, monkeypatch,
                                                             flag, target):
    fake_dataset(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    before = files_of(tmp_path)
    out = target if flag == "--out" else "leaderboard"
    extra = [flag, target] if flag != "--out" else []
    rc = main(["leaderboard", "--results", "results", "--dataset", "data", "--out", out, *extra])
    err = _one_line(capsys)
    assert rc == 2 and "aegisbench leaderboard: error:" in err and target in err
    assert files_of(tmp_path) == before and not (tmp_path / "leaderboard").exists()


def test_every_command_declares_what_it_reads_and_writes():
    """A command with an output option declares its inputs, so the check cannot be forgotten."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    writers = {name for name, p in sub.choices.items() if "--out" in p._option_string_actions
               and name not in ("run", "hosted-board", "calibrate-table")}
    undeclared = sorted(n for n in writers if getattr(sub.choices[n].parse_args(_minimal(n)), IO_KEY, None) is None)
    assert undeclared == []


# values the parser checks (choices, URL, file suffixes); every other required argument gets "x"
_VALUES = {"--detector": "yolo", "--track": "sar", "--source-url": "https://e.org", "--source-table": "t.parquet",
           "--sample": "2", "table": "t.csv", "tfrecords": "a.tfrecord"}


def _minimal(name: str) -> list[str]:
    """The fewest arguments the sub-command parses: its required options and positionals,
    derived from the parser so that a new command needs no entry here."""
    parser = next(a for a in build_parser()._actions if a.dest == "command").choices[name]
    argv: list[str] = []
    for action in parser._actions:
        if action.option_strings and action.required:
            flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
            argv += [flag, _VALUES.get(flag, "x")]
        elif not action.option_strings and action.nargs not in ("*", "?", argparse.REMAINDER):
            argv.append(_VALUES.get(action.dest, "x"))
    return argv


def test_refuse_overlap_resolves_links_and_dots(tmp_path):
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(ValueError, match="holds submission"):
        refuse_overlap({"--out": tmp_path / "link"}, {"submission": tmp_path / "real" / "sub"})
    with pytest.raises(ValueError, match="lies inside --dataset"):
        refuse_overlap({"--out": tmp_path / "real" / "sub" / ".." / "sub" / "x"}, {"--dataset": tmp_path / "real"})
    with pytest.raises(ValueError, match="--out m.json: is --metrics m.json, another output of the command"):
        refuse_overlap({"--out": "m.json", "--metrics": "m.json"}, {})
    refuse_overlap({"--out": tmp_path / "real2"}, {"--dataset": tmp_path / "real", "x": None, "y": []})


# ------------------------------------------------------------------ build


def _build(tmp_path, src, name, *extra) -> int:
    return main(["build", "--params", str(tmp_path / "no-params.yaml"), "--out", str(tmp_path / "repo"),
                 "--source-dir", str(src), "--source-format", "yolo", "--source", name, "--class-map", SARD_MAP,
                 "--split-mode", "folders", *extra])


def test_adding_a_source_to_a_repo_is_refused_without_replace(sard, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _build(tmp_path, sard, "a") == 0, capsys.readouterr().err
    capsys.readouterr()
    before = files_of(tmp_path / "repo")
    assert _build(tmp_path, sard, "b") == 2
    err = _one_line(capsys)
    assert f"{tmp_path / 'repo'}: already holds source(s) a that this build leaves out" in err and "--replace" in err
    assert files_of(tmp_path / "repo") == before  # a's splits byte-identical
    assert _build(tmp_path, sard, "a") == 0  # the same source again: a rebuild, not a loss
    assert files_of(tmp_path / "repo") == before
    assert _build(tmp_path, sard, "b", "--replace") == 0
    assert {p.split("/")[1].split("-")[0] for p in files_of(tmp_path / "repo") if p.startswith("clean/")} == {"b", "b_val"}


def test_a_build_over_its_source_folder_is_refused(sard, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = files_of(sard)
    rc = main(["build", "--params", str(tmp_path / "no-params.yaml"), "--out", str(sard.parent),
               "--source-dir", str(sard), "--source-format", "yolo", "--source", "s", "--class-map", SARD_MAP])
    assert rc == 2 and f"holds --source-dir {sard}" in _one_line(capsys)
    assert files_of(sard) == before


def test_a_voc_folder_read_as_yolo_is_refused_naming_what_it_looks_like(heridal, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(heridal / "testImages", heridal / "valImages")
    for f in list((heridal / "valImages").iterdir()):
        f.rename(f.with_name("val_" + f.name))
    rc = main(["build", "--params", str(tmp_path / "no-params.yaml"), "--out", str(tmp_path / "repo"),
               "--source-dir", str(heridal), "--source-format", "yolo", "--source", "h", "--class-map", "0=person",
               "--split-mode", "folders"])
    err = _one_line(capsys)
    assert rc == 2 and "source h: no 'person' box in any split" in err
    assert "no YOLO label file under labels/" in err and "this looks like a VOC folder" in err
    assert "--source-format voc" in err
    assert not (tmp_path / "repo").exists()


def test_a_class_map_that_drops_every_box_is_refused(sard, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = _build(tmp_path, sard, "s", "--class-map", ",".join(f"{k}=none" for k in range(6)))
    err = _one_line(capsys)
    assert rc == 2 and "no 'person' box in any split" in err and "the class map dropped 3 box(es)" in err
