"""Faults that must stop only what they concern (issue 32, items 5 and 6).

* One bad results folder stops only itself: ``aegisbench leaderboard`` publishes every valid
  result and lists the folder it could not use, with a one-line reason, on stderr, in
  ``skipped.json``, the README and the page; a valid row with hostile text is merged, never
  skipped (a renderer that crashes on it is a bug).
* A full disk (the process's file size limit, ``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored) during
  ``evaluate``, ``leaderboard`` and ``export-coco`` ends with exit 2 and one line naming the
  path it could not write, and leaves no lock, staging folder or temp file, and the last
  published output as it was (``export-coco`` never half-written).
* ``aegisbench pull`` from an empty folder remote keeps DVC's whole message (the targets it
  could not check out); an unreachable ``--ray-address`` is one line naming the address as
  given and the reason, within bounded time.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, tiny_params, write_submission
from _hostilekit import files_of
from aegisbench.atomic import leftovers, lock_path
from aegisbench.cli import main
from aegisbench.readers import MAX_RESULT_ROWS
from test_leaderboard import EV, SCHEMA, fake_dataset, hand_results, row, write_result  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
SID = "stranger"  # the bad results folder beside the good a, b and c
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]


# ------------------------------------------------------------------ one bad row stops only itself


def _good(sub: str, **over) -> list[dict]:
    return [{**row(sub, cfg, "recall", 0.5, 0.4, 0.6), **over} for cfg in ("clean", "low_light_s3")]


def _edit_provenance(folder: Path, text) -> None:
    """Replace provenance.json's text by ``text(old_text)``."""
    path = folder / "provenance.json"
    path.write_text(text(path.read_text()))


def _garbled_parquet(root: Path) -> None:
    f = write_result(root, SID, _good(SID))
    data = bytearray((f / "metrics.parquet").read_bytes())
    data[40:240] = b"\xff" * 200  # header and footer kept: a reader gets far before it fails
    (f / "metrics.parquet").write_bytes(bytes(data))


def _huge_threshold(root: Path) -> None:  # was: OverflowError in float() for everyone
    _edit_provenance(write_result(root, SID, _good(SID)),
                     lambda t: t.replace('"frozen_threshold": 0.5', '"frozen_threshold": 1' + "0" * 400))


def _nested_provenance(root: Path) -> None:  # was: RecursionError
    f = write_result(root, SID, _good(SID))
    (f / "provenance.json").write_text("[" * 100_000 + "]" * 100_000)


def _long_integer(root: Path) -> None:  # was: ValueError (more digits than Python converts)
    _edit_provenance(write_result(root, SID, _good(SID)), lambda t: t[:-1] + ', "extra": 1' + "0" * 5000 + "}")


def _lone_surrogate(root: Path) -> None:  # was: UnicodeEncodeError writing the page
    _edit_provenance(write_result(root, SID, _good(SID)), lambda t: t.replace(f'"model": "{SID}"', f'"model": "{SID}\\ud800"'))


def _wrong_schema(root: Path) -> None:
    f = write_result(root, SID, _good(SID))
    pl.read_parquet(f / "metrics.parquet").with_columns(pl.col("severity").cast(pl.String)).write_parquet(
        f / "metrics.parquet")


def _folder_for_a_file(root: Path) -> None:  # was: IsADirectoryError
    f = write_result(root, SID, _good(SID))
    (f / "metrics.parquet").unlink()
    (f / "metrics.parquet").mkdir()


def _fifo_for_a_file(root: Path) -> None:  # was: the leaderboard blocked on it for ever
    f = write_result(root, SID, _good(SID))
    (f / "provenance.json").unlink()
    os.mkfifo(f / "provenance.json")


def _severity_against_its_name(root: Path) -> None:  # was: IndexError in the rank tables
    write_result(root, SID, [{**row(SID, "low_light_s3", "recall", 0.9, 0.85, 0.95), "severity": 7},
                             row(SID, "clean", "recall", 0.5, 0.4, 0.6)])


def _severity_against_the_others(root: Path) -> None:  # was: IndexError in the rank tables
    for sub, value, sev in (("a2", 0.5, 1), ("b2", 0.3, 1), (SID, 0.9, 4)):
        write_result(root, sub, [row(sub, "clean", "recall", 0.5, 0.4, 0.6),
                                 {**row(sub, "clean", "recall", value, value - 0.01, value + 0.01),
                                  "config": "custom_cfg", "corruption": "custom", "family": None, "severity": sev}])


def _rows_past_the_limit(root: Path) -> None:  # refused from the footer, before 1e6 rows are decoded
    f = write_result(root, SID, _good(SID))
    one = pa.Table.from_pylist(_good(SID)[:1], schema=pa.schema([(k, pa.string() if v == pl.String else
                                                                  pa.int64() if v == pl.Int64 else pa.float64())
                                                                 for k, v in SCHEMA.items()]))
    big = one.take(pa.array(np.zeros(MAX_RESULT_ROWS + 1, dtype=np.int64)))
    pq.write_table(big, f / "metrics.parquet", compression="zstd")


BAD = {
    "garbled_parquet": (_garbled_parquet, "metrics.parquet: unreadable Parquet"),
    "huge_threshold": (_huge_threshold, "frozen_threshold must be a number or null, got an integer of 401 digits"),
    "nested_provenance": (_nested_provenance, "provenance.json: unreadable JSON (nested deeper than"),
    "long_integer": (_long_integer, "provenance.json: unreadable JSON"),
    "lone_surrogate": (_lone_surrogate, "provenance.json: holds text that is not valid Unicode"),
    "wrong_schema": (_wrong_schema, "column 'severity' has type String, expected int"),
    "folder_for_a_file": (_folder_for_a_file, "metrics.parquet: not a regular file"),
    "fifo_for_a_file": (_fifo_for_a_file, "provenance.json: not a regular file"),
    "severity_against_its_name": (_severity_against_its_name,
                                  "config 'low_light_s3' is corruption 'low_light' at severity 3, the row says"),
    "severity_against_the_others": (_severity_against_the_others,
                                    ("config 'custom_cfg' of sar/demo is corruption 'custom', family None, "
                                     "severity 4 here; 2 other result(s) say")),
    "rows_past_the_limit": (_rows_past_the_limit, f"metrics.parquet: {MAX_RESULT_ROWS + 1} rows, "),
}


def _leaderboard(results: Path, tmp_path: Path, *extra: str, capsys=None) -> tuple[int, str]:
    """``aegisbench leaderboard`` over ``results``: (exit status, stderr); in this process
    with ``capsys``, else in a subprocess bounded in time (a reader that blocks fails)."""
    args = ["leaderboard", "--results", str(results), "--dataset", str(fake_dataset(tmp_path / "data")),
            "--out", str(tmp_path / "lb"), "--evaluator-version", EV, *extra]
    if capsys is not None:
        capsys.readouterr()
        rc = main(args)
        return rc, capsys.readouterr().err
    proc = subprocess.run([sys.executable, "-m", "aegisbench.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("case", list(BAD))
def test_one_bad_results_folder_stops_only_itself(case, hand_results, tmp_path, capsys):
    make, needle = BAD[case]
    make(hand_results)
    t = time.monotonic()
    rc, err = _leaderboard(hand_results, tmp_path, capsys=None if case == "fifo_for_a_file" else capsys)
    assert rc == 0, err
    assert time.monotonic() - t < 60 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("skipped ")]
    assert len(lines) == 1 and lines[0].startswith(f"skipped {SID} (malformed): ") and needle in lines[0], err
    lb = tmp_path / "lb"
    merged = set(pl.read_parquet(lb / "leaderboard.parquet")["submission"].to_list())
    assert {"a", "b", "c"} <= merged and SID not in merged  # everyone else is published
    listed = json.loads((lb / "skipped.json").read_text())
    assert [(d["folder"], d["problem"]) for d in listed] == [(SID, "malformed")]
    assert needle in listed[0]["reason"] and "\n" not in listed[0]["reason"]
    readme = (lb / "README.md").read_text()
    assert "## Skipped results folders" in readme and f"`{SID}` | malformed" in readme
    assert SID in (lb / "site" / "index.html").read_text()
    assert leftovers(lb) == [] and not lock_path(lb).exists()


def test_under_strict_the_board_is_still_published_and_the_stage_fails(hand_results, tmp_path, capsys):
    """``--strict`` (the pipeline's stage) makes the skip an exit 2, after everyone else's
    results were published: a stranger's folder never holds the page back."""
    _huge_threshold(hand_results)
    rc, err = _leaderboard(hand_results, tmp_path, "--strict", capsys=capsys)
    assert rc == 2 and "Traceback" not in err
    assert [ln for ln in err.splitlines() if ln.startswith("skipped ")] == [
        (f"skipped {SID} (malformed): provenance.json: frozen_threshold must be a number or null, got an integer of "
         "401 digits")]
    assert set(pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")["submission"]) == {"a", "b", "c"}
    assert SID in (tmp_path / "lb" / "site" / "index.html").read_text()


def test_valid_rows_with_hostile_text_are_merged_not_skipped(hand_results, tmp_path, capsys):
    """Text a renderer could choke on (mathtext, markup, huge and infinite numbers, long
    names) in valid rows: rendered as text, the row merged."""
    mathtext = "$\\undefinedmacro{x}$"
    write_result(hand_results, "m", [row("m", c, "recall", 0.5, 0.4, 0.6, source=mathtext)
                                     for c in ("clean", "low_light_s3")], model=mathtext, team="<b>t</b>")
    write_result(hand_results, "n", [row("n", c, mathtext, 1e308, -1e308, 1e308) for c in ("clean", "low_light_s3")],
                 model="n" * 5000)
    write_result(hand_results, "i", [row("i", c, "fp", float("inf"), 0.0, float("inf"), n=2**62)
                                     for c in ("clean", "low_light_s3")], metadata={"parameters": 10**400})
    rc, err = _leaderboard(hand_results, tmp_path, capsys=capsys)
    assert rc == 0 and "Traceback" not in err, err
    assert json.loads((tmp_path / "lb" / "skipped.json").read_text()) == []
    merged = set(pl.read_parquet(tmp_path / "lb" / "leaderboard.parquet")["submission"].to_list())
    assert merged == {"a", "b", "c", "i", "m", "n"}


# ------------------------------------------------------------------ a full disk names its path


def _out_of_room(argv: list[str], limit: int) -> subprocess.CompletedProcess:
    """``aegisbench ARGV`` in a process that may write files of at most ``limit`` bytes (a
    write past it fails with EFBIG, as a full disk fails with ENOSPC)."""
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "from aegisbench.cli import main; "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); sys.exit(main({argv!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          check=False)


def _the_error(proc: subprocess.CompletedProcess, command: str) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"aegisbench {command}: error: ")
    assert "file too large" in errors[0] and "(path not known)" not in errors[0]
    return errors[0].removeprefix(f"aegisbench {command}: error: ")


def _nothing_left(folder: Path) -> None:
    """No lock, staging folder or temp file of any writer beside or under ``folder``'s outputs."""
    hidden = [p for p in folder.rglob(".*")]
    assert hidden == [], hidden


@pytest.mark.parametrize("limit, failed", [(0, ".{sid}.lock"), (2000, "{sid}/metrics.parquet")])
def test_evaluate_out_of_room_names_the_path_and_keeps_the_last_results(limit, failed, repo, index, tmp_path):
    sub = write_submission(tmp_path / "subs" / "gt", index, "sar", gt_table(index, "sar"))
    results = tmp_path / "results"
    argv = ["evaluate", str(sub), "--dataset", str(repo), "--out", str(results), "--no-verify", "-q"]
    assert main(argv) == 0
    before = files_of(results)
    line = _the_error(_out_of_room(argv, limit), "evaluate")
    assert line.startswith(f"{results}/{failed.format(sid='gt')}: "), line
    assert files_of(results) == before and sorted(p.name for p in results.iterdir()) == ["gt"]
    _nothing_left(tmp_path)


@pytest.mark.parametrize("limit", [100, 12_000])
def test_leaderboard_out_of_room_names_the_path_and_keeps_the_last_board(limit, hand_results, tmp_path):
    out, metrics, plots = tmp_path / "lb", tmp_path / "metrics.json", tmp_path / "plots"
    argv = ["leaderboard", "--results", str(hand_results), "--dataset", str(fake_dataset(tmp_path / "data")),
            "--out", str(out), "--evaluator-version", EV, "--metrics", str(metrics), "--plots", str(plots), "-q"]
    assert main(argv) == 0
    before = {p: files_of(p) for p in (out, plots)}, metrics.read_bytes()
    line = _the_error(_out_of_room(argv, limit), "leaderboard")
    path = line.split(": ")[0]
    assert path.startswith((f"{out}/", f"{plots}/", str(metrics))) and ".staging" not in path, line
    assert ({p: files_of(p) for p in (out, plots)}, metrics.read_bytes()) == before
    _nothing_left(tmp_path)


def test_export_coco_out_of_room_leaves_nothing_half_written(repo, tmp_path):
    out = tmp_path / "coco"
    argv = ["export-coco", "--dataset", str(repo), "--no-verify", "--out", str(out), "-q"]
    line = _the_error(_out_of_room(argv, 100), "export-coco")
    assert line.startswith(f"{out}/clean.json: "), line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no out, no lock, no staging
    # over an earlier export beside the user's own file: all of it as it was
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(argv) == 0
    before = files_of(out)
    assert "clean.json" in before and before["notes.txt"] == b"mine"
    _the_error(_out_of_room(argv, 2000), "export-coco")
    assert files_of(out) == before
    _nothing_left(tmp_path)


# ------------------------------------------------------------------ DVC and Ray messages, whole


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_pull_from_an_empty_remote_keeps_dvcs_whole_message(tmp_path, monkeypatch, capsys):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def sh(args, cwd):
        proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert proc.returncode == 0, f"{args}:\n{proc.stdout}\n{proc.stderr}"

    dvc = [sys.executable, "-m", "dvc"]
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (tmp_path / "empty_remote").mkdir()  # mounted, but nobody pushed
    sh(["git", "init", "-q"], project)
    sh([*dvc, "init", "-q"], project)
    sh([*dvc, "config", "core.analytics", "false"], project)
    (project / "data" / "first.txt").write_text("one\n")
    (project / "data" / "second.txt").write_text("two\n")
    sh([*dvc, "add", "-q", "data/first.txt", "data/second.txt"], project)
    sh([*dvc, "remote", "add", "-d", "shared", str(tmp_path / "empty_remote")], project)
    sh([*GIT, "add", "-A"], project)
    sh([*GIT, "commit", "-qm", "init"], project)
    sh(["git", "clone", "-q", str(project), str(tmp_path / "clone")], tmp_path)
    monkeypatch.chdir(tmp_path / "clone")
    capsys.readouterr()
    rc = main(["pull", "--no-verify"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("aegisbench pull: error: remote 'shared'") and "dvc pull failed" in err[0]
    assert "Checkout failed for following targets:" in err[0]
    assert "data/first.txt" in err[0] and "data/second.txt" in err[0]  # the targets, not dropped
    assert not (tmp_path / "clone" / "data" / "first.txt").exists()


def _ray_build(tmp_path: Path, address: str) -> tuple[subprocess.CompletedProcess, float]:
    pytest.importorskip("ray")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(tmp_path, {}).raw, sort_keys=False))
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "aegisbench.cli", "build", "--params", str(params), "--executor",
                           "ray", "--ray-address", address], capture_output=True, text=True, cwd=tmp_path, timeout=90, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])})
    return proc, time.monotonic() - t


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_ray_address_is_named_as_given(tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    proc, took = _ray_build(tmp_path, address)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"aegisbench build: error: --ray-address: cannot reach a Ray cluster at {address} (")
    assert err[0].endswith(")") and "refused" in err[0].lower()  # the reason
    assert took < 30 and sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_a_port_that_is_not_a_ray_cluster_is_refused_in_bounded_time(tmp_path):
    """Something listens but no Ray GCS answers: Ray alone would wait 40 s and then retry in
    ``ray.init`` without end; here one line with the address as given and Ray's reason."""
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen(16)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        proc, took = _ray_build(tmp_path, address)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"aegisbench build: error: --ray-address: cannot reach a Ray cluster at {address} (")
    assert "no Ray GCS answered within" in err[0]
    assert took < 30 and sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]
