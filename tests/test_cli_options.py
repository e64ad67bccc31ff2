"""The options every command shares are declared once, in aegisbench.cli_options: no command
module spells --params, --dataset, --results, --out, --no-verify or the executor options itself
(their help and defaults per command are checked by tests/test_cli_help.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

import aegisbench
from aegisbench import cli_options as O
from aegisbench.paths import DATASET, PARAMS, RESULTS

PACKAGE = Path(aegisbench.__file__).resolve().parent
SHARED = ("--params", "--dataset", "--results", "--out", "--no-verify", "--executor", "--workers", "--ray-address")


def test_no_command_declares_a_shared_option_itself():
    pattern = re.compile(r"add_argument\(\s*\"(%s)\"" % "|".join(map(re.escape, SHARED)))
    found = [f"{path.relative_to(PACKAGE)}: {m.group(1)}"
             for path in [PACKAGE / "cli.py", *sorted(PACKAGE.glob("*/commands.py"))]
             for m in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert not found, found


def test_defaults_come_from_paths_and_settings_pass_through():
    p = argparse.ArgumentParser()
    O.add_params_option(p)
    O.add_dataset_option(p)
    O.add_results_option(p, "the results folder")
    O.add_out_option(p, "output", required=True, action="append")
    O.add_no_verify_option(p)
    O.add_executor_options(p)
    args = p.parse_args(["--out", "a", "--out", "b", "--workers", "3", "--executor", "ray"])
    assert (args.params, args.dataset, args.results, args.out) == (PARAMS, DATASET, RESULTS, ["a", "b"])
    assert (args.no_verify, args.executor, args.workers, args.ray_address) == (False, "ray", 3, None)
    assert "--results DIR" in p.format_help()


def test_every_option_needs_its_help():
    with pytest.raises(ValueError, match="--out needs a help text"):
        O.add_out_option(argparse.ArgumentParser(), " ")
