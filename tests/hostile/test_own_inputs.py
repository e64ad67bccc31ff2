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
