"""Help that teaches: every command described with an example, every option with help and
its default, global options anywhere, one name per concept (former names as hidden aliases),
quiet plain-text logs (each warning once, no ANSI), and progress lines when not on a terminal."""

from __future__ import annotations

import argparse
import io
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import aegisbench
from aegisbench import logs, progress
from aegisbench.cli import build_parser, main
from aegisbench.fields import DeprecatedAlias
from aegisbench.overlap import IO_KEY
from test_adapters import heridal, put, scene, text, voc_xml  # noqa: F401  (fixtures)

NO_DEFAULT = (None, False, [], argparse.SUPPRESS)


@pytest.fixture(autouse=True)
def _restore_logging():
    """main() and logs.configure set levels and handlers; put them back for the next test."""
    root, ours, ultra = logging.getLogger(), logging.getLogger("aegisbench"), logging.getLogger("ultralytics")
    saved = (list(root.handlers), root.level, ours.level, ultra.level, list(ultra.handlers), ultra.propagate)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    ours.setLevel(saved[2])
    ultra.setLevel(saved[3])
    ultra.handlers[:] = saved[4]
    ultra.propagate = saved[5]
    logging.captureWarnings(False)
    progress.configure()


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(p: argparse.ArgumentParser):
    return [a for a in p._actions if not isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                                                         argparse._SubParsersAction))]


def test_every_command_has_a_description_an_example_and_every_option_help():
    """Fails when someone adds a command without description/example or an option without help."""
    problems = []
    for name, p in {"(top)": build_parser(), **_commands()}.items():
        if not (p.description or "").strip():
            problems.append(f"{name}: no description")
        example = "aegisbench" if name == "(top)" else f"aegisbench {name}"
        if example not in (p.epilog or ""):
            problems.append(f"{name}: no example ({example} ...) in its epilog")
        for a in _options(p):
            flag = "/".join(a.option_strings) or a.dest
            if isinstance(a, DeprecatedAlias):
                canonical = p._option_string_actions.get(a.canonical)
                if a.help != argparse.SUPPRESS or canonical is None or canonical.dest != a.dest:
                    problems.append(f"{name} {flag}: alias must be hidden and set {a.canonical}'s value")
            elif not a.help or a.help == argparse.SUPPRESS or not a.help.strip():
                problems.append(f"{name} {flag}: no help")
    assert not problems, "\n".join(problems)


def test_every_default_is_shown_in_the_help():
    for name, p in _commands().items():
        shown = " ".join(p.format_help().split())
        for a in _options(p):
            if a.option_strings and a.default not in NO_DEFAULT and not isinstance(a, DeprecatedAlias):
                assert f"default: {a.default}" in shown, (name, a.option_strings, a.default)
    assert "(default: aegisbench)" in " ".join(_commands()["evaluate"].format_help().split())


def test_help_of_a_command_runs_and_shows_examples(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.splitlines()[0].startswith("usage: aegisbench calibrate")
    assert "examples:\n  aegisbench calibrate --source-table" in out
    assert "global options (before or after the command)" in out and "(default: 0.02)" in out


@pytest.mark.parametrize("argv", [["-v", "verify", "X"], ["verify", "X", "-v"], ["verify", "-v", "X"]])
def test_global_options_before_or_after_the_command(argv):
    args = build_parser().parse_args(argv)
    assert (args.verbose, args.quiet, args.no_progress, args.path) == (True, False, False, "X")


def test_a_global_option_before_the_command_is_not_reset_by_it():
    p = build_parser()
    args = p.parse_args(["--no-progress", "--progress-interval", "3", "-q", "verify"])
    assert (args.no_progress, args.progress_interval, args.quiet) == (True, 3.0, True)
    assert p.parse_args(["verify"]).progress_interval == progress.INTERVAL_S


def test_run_hands_its_global_options_to_the_commands_of_its_stages(monkeypatch, tmp_path):
    from aegisbench.cli import INTERVAL_ENV, VERBOSITY_ENV, export_global_options
    monkeypatch.setenv(VERBOSITY_ENV, "")  # recorded, so the test's exports are undone
    monkeypatch.setenv(INTERVAL_ENV, "")
    export_global_options(build_parser().parse_args(["run", "--fast", "-v", "--progress-interval", "30"]))
    assert build_parser().parse_args(["verify"]).progress_interval == 30.0  # as a dvc stage's command sees it
    assert build_parser().parse_args(["verify", "--progress-interval", "5"]).progress_interval == 5.0
    assert main(["verify", str(tmp_path / "none")]) == 2
    assert logging.getLogger("aegisbench").getEffectiveLevel() == logging.DEBUG  # -v of `run`
    assert main(["verify", str(tmp_path / "none"), "-q"]) == 2  # the stage's own flag wins
    assert logging.getLogger("aegisbench").getEffectiveLevel() == logging.WARNING


def test_verbose_after_the_command_turns_on_debug_logging(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "none"), "-v"]) == 2
    assert logging.getLogger("aegisbench").getEffectiveLevel() == logging.DEBUG
    assert main(["verify", str(tmp_path / "none")]) == 2
    assert logging.getLogger("aegisbench").getEffectiveLevel() == logging.INFO
    assert main(["-q", "verify", str(tmp_path / "none")]) == 2
    assert logging.getLogger("aegisbench").getEffectiveLevel() == logging.WARNING
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["verify", "-v", "-q"])
    assert "exclude each other" in capsys.readouterr().err


#: (command, former name, name now, the arguments a parse needs besides it)
RENAMED = [("evaluate", "--out", "--results", ["s"]),
           ("import-published", "--out", "--results", ["t.csv", "--id", "x", "--track", "sar", "--name", "n",
                                                       "--team", "t", "--protocol", "p", "--source-url", "https://e.org",
                                                       "--citation", "c"]),
           ("firespread-baselines", "--out", "--submissions", []),
           ("warp-detect", "--out", "--submission", ["--detector", "yolo", "--weights", "w.pt"]),
           ("build", "--format", "--source-format", []), ("build", "--name", "--source", []),
           ("sources", "--format", "--source-format", []), ("sources", "--name", "--source", []),
           ("firespread-ndws", "--n-boot", "--n-resamples", ["a.tfrecord"])]


@pytest.mark.parametrize(("command", "old", "new", "needs"), RENAMED, ids=[f"{c}{o}" for c, o, _, _ in RENAMED])
def test_former_option_names_still_work_hidden(command, old, new, needs):
    p = build_parser()
    value = "30" if new == "--n-resamples" else "voc" if new == "--source-format" else "R"
    a, b = p.parse_args([command, *needs, old, value]), p.parse_args([command, *needs, new, value])
    dest = p._subparsers._group_actions[0].choices[command]._option_string_actions[new].dest
    assert getattr(a, dest) == getattr(b, dest) and str(getattr(a, dest)) == value
    assert a.deprecated_flags == [(old, new)] and not getattr(b, "deprecated_flags", None)
    shown = {s for act in _options(_commands()[command]) if not isinstance(act, DeprecatedAlias)
             for s in act.option_strings}
    assert new in shown and old not in shown  # hidden from the help


def test_a_former_name_says_once_what_to_use_instead(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="aegisbench"):
        rc = main(["evaluate", str(tmp_path / "missing"), "--out", str(tmp_path / "r"), "--no-verify"])
    said = [r.getMessage() for r in caplog.records]
    assert rc == 2 and said.count("--out is deprecated, use --results (same meaning)") == 1, said


#: the one meaning of an option name, as every command's help states it
MEANINGS = {"--results": "results folder", "--submissions": "folder of submission folders",
            "--submission": "submission folder", "--dataset": "dataset repo", "--source": "source",
            "--source-format": "format of --source-dir"}


def test_one_meaning_per_option_name_across_commands():
    """``--out`` is what a command makes (never an existing input, never a parent of other commands'
    folders); the folder names that hold other things have their own names, each with one meaning."""
    for name, p in _commands().items():
        visible = {s: a for a in _options(p) if not isinstance(a, DeprecatedAlias) for s in a.option_strings}
        assert "--n-boot" not in visible and "--format" not in visible or name == "export", name
        out = visible.get("--out")
        if out is not None:
            words = (out.help or "").lower()
            assert not any(w in words for w in ("existing", "parent", "results folder", "<id>")), (name, out.help)
            declared = getattr(p.parse_args(_needs(name)), IO_KEY, None)
            assert declared is None or "--out" in declared[1].values() and "--out" not in declared[0].values(), name
        for flag, meaning in MEANINGS.items():
            if flag in visible:
                assert meaning in (visible[flag].help or "").lower() or flag == "--dataset" and name == "verify", \
                    (name, flag, visible[flag].help)
    flags = {name: {s for a in _options(p) for s in a.option_strings} for name, p in _commands().items()}
    assert "--n-resamples" in flags["evaluate"] and "--n-resamples" in flags["firespread-ndws"]
    assert "preview-grid" not in _commands()


def _needs(name: str) -> list[str]:
    return {"detect": ["--detector", "yolo", "--weights", "w.pt", "--track", "sar", "--out", "o"],
            "train-reference": ["--source", "s", "--out", "o"], "export-coco": ["--out", "o"],
            "train-seeds": ["--source", "s", "--out", "o"],
            "reference-seeds": ["--models", "m", "--reference", "s", "--detect-stage", "d", "--out", "o"],
            "hosted-board": ["--out", "o", "--revision", "1"], "firespread-ndws": ["a.tfrecord"],
            "calibrate": ["--source-table", "t.parquet", "--sample", "2"]}.get(name, [])


def test_log_lines_are_plain_text_and_each_warning_comes_once():
    from ultralytics.utils import LOGGER, colorstr

    buf = io.StringIO()
    logs.configure(verbose=True, stream=buf)
    logs.adopt("ultralytics")  # what import_ultralytics does on first import
    LOGGER.info(f"{colorstr('train:')} epoch 1/2")
    for _ in range(5):
        logging.getLogger("aegisbench.evaluation.x").warning("a bootstrap interval is degenerate: %s", "[0, 0]")
    logging.getLogger("aegisbench.evaluation.x").warning("another warning")
    out = buf.getvalue()
    assert "\x1b" not in out and "\\x1b" not in out
    assert "INFO ultralytics: train: epoch 1/2" in out
    assert out.count("a bootstrap interval is degenerate: [0, 0]") == 1 and "another warning" in out
    buf.truncate(0)
    logs.configure(verbose=False, stream=buf)  # quiet by default: the framework's INFO is dropped
    LOGGER.info("Ultralytics trainer dump")
    logging.getLogger("aegisbench.x").info("our own line")
    assert "trainer dump" not in buf.getvalue() and "INFO aegisbench.x: our own line" in buf.getvalue()
    # Python warnings raised inside an installed package (as logging.captureWarnings logs them): -v only
    noise = "/venv/lib/python3.11/site-packages/ray/train/session.py:683: UserWarning: get_trial_id is meant"
    logging.getLogger("py.warnings").warning("%s", noise)
    logging.getLogger("py.warnings").warning("%s", "/repo/aegisbench/x.py:3: RuntimeWarning: Mean of empty slice")
    assert "get_trial_id" not in buf.getvalue() and "Mean of empty slice" in buf.getvalue()
    logs.configure(verbose=True, stream=buf)
    logging.getLogger("py.warnings").warning("%s", noise)
    assert "get_trial_id" in buf.getvalue()


def test_a_long_stage_prints_plain_progress_lines_when_not_on_a_terminal(heridal, tmp_path):  # noqa: F811
    """The real command in its own process, stderr a pipe (as under dvc repro)."""
    put(heridal / "valImages" / "val_0001.JPG", scene("h4"))
    text(heridal / "valImages" / "val_0001.xml", voc_xml("val_0001.JPG", 160, 120, [("human", 5, 5, 20, 30)]))
    env = {**os.environ, "PYTHONPATH": str(Path(aegisbench.__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-m", "aegisbench.cli", "build", "--params", str(tmp_path / "no.yaml"),
                           "--out", str(tmp_path / "repo"), "--source-dir", str(heridal), "--source-format", "voc",
                           "--source", "heridal", "--class-map", "human=person,tree=none", "--split-mode", "folders",
                           "--progress-interval", "0"], cwd=tmp_path, env=env, capture_output=True, text=True)
    err = proc.stderr
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if "build shards:" in line]
    assert lines and lines[-1].startswith("INFO aegisbench.progress: build shards: ") and "100%" in lines[-1]
    total = lines[-1].split(": ")[2].split("/")[1].split()[0]
    assert f"1/{total} shard" in lines[0] and ("eta" in lines[0] or total == "1")
    assert "\r" not in err and "\x1b" not in err
    assert "INFO aegisbench.builders.sources: source heridal:" in err  # our INFO lines, one per record


def test_progress_lines_come_every_interval_and_once_at_the_end(caplog):
    now = [0.0]
    bar = progress.LineProgress(400, "detect sar", "img", 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="aegisbench.progress"):
        for _ in range(40):
            now[0] += 1.0
            bar.update(3)
        bar.close()
        bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "detect sar: 30/400 img, 8%, 3 img/s, eta 2m03s"
    assert len(lines) == 5 and lines[-1] == "detect sar: 120/400 img, 30%, 3 img/s, eta 1m33s"


def test_a_mistyped_command_or_choice_names_the_closest_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["evalute", "submissions/x"])
    assert info.value.code == 2 and "(did you mean 'evaluate'?)" in capsys.readouterr().err
    (tmp_path / "src").mkdir()
    base = ["build", "--source-dir", str(tmp_path / "src"), "--source", "x", "--class-map", "a=person",
            "--out", str(tmp_path / "repo"), "--params", str(tmp_path / "none.yaml")]
    assert main([*base, "--source-format", "ylo"]) == 2
    assert "got 'ylo' (did you mean 'yolo'?)" in capsys.readouterr().err
    assert main([*base, "--source-format", "voc", "--split-mode", "flders"]) == 2
    assert "got 'flders' (did you mean 'folders'?)" in capsys.readouterr().err
    assert main([*base, "--source-format", "voc", "--split-mode", "zzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err  # nothing close: no guess
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("command, option, shown", [
    ("build", "--source-format", "{voc,yolo,coco,visdrone}"), ("build", "--split-mode", "{hash,folders,lists}"),
    ("build", "--modality", "{rgb,thermal}"), ("detect", "--detector", "{yolo,rtdetr,fasterrcnn}"),
    ("detect", "--executor", "{local,ray}"), ("evaluate", "--threshold-grid", "{scores,seed001,V1,V2,...}")])
def test_choices_are_shown_in_the_help(command, option, shown):
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helptext = sub.choices[command].format_help()
    assert f"{option} {shown}" in helptext
