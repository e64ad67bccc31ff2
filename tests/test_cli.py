"""`aegisbench --help` lists every command once, under its pipeline stage, and each command
is registered by the commands module of the code it drives."""

from __future__ import annotations

import argparse
import importlib

import pytest

from aegisbench.cli import COMMAND_GROUPS, COMMAND_MODULES, build_parser, command_groups, main


def _registered() -> dict[str, str]:
    """command -> the module that registers it."""
    owner = {}
    for name in COMMAND_MODULES:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(name).register(sub)
        for command in sub.choices:
            assert command not in owner, f"{command} registered by {owner.get(command)} and {name}"
            owner[command] = name
    return owner


def test_every_command_is_in_exactly_one_group():
    commands = list(_registered())
    grouped = [n for members in COMMAND_GROUPS.values() for n in members]
    assert len(grouped) == len(set(grouped)), "a command is in two groups"
    assert "other" not in command_groups(commands), f"ungrouped: {command_groups(commands).get('other')}"
    assert sorted(set(grouped) - set(commands)) == [], "COMMAND_GROUPS names a command nobody registers"


def test_help_lists_the_groups_in_pipeline_order(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    heads = [g for g in COMMAND_GROUPS if f"{g}:" in lines]
    assert heads == list(COMMAND_GROUPS)
    for group, members in COMMAND_GROUPS.items():
        start = lines.index(f"{group}:")
        block = lines[start + 1:]
        for name in members:
            assert any(line.split()[:1] == [name] for line in block[:3 * len(members)]), (group, name)
    assert "preview-grid" not in out


def test_commands_live_with_the_code_they_drive():
    owner = _registered()
    assert owner["run"] == "aegisbench.pipeline.commands"
    assert owner["publish"] == owner["build"] == owner["preview"] == "aegisbench.builders.commands"
    assert owner["calibrate"] == "aegisbench.corruptions.commands"
    assert owner["leaderboard"] == "aegisbench.leaderboard.commands"
    args = build_parser().parse_args(["preview", "--grid", "--image-id", "x", "--cell", "64"])
    assert (args.grid, args.image_id, args.cell, args.out) == (True, "x", 64, "data/preview")
