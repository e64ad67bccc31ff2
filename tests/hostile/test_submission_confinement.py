"""A hostile submission folder: links to the folder or above it, FIFOs, sockets and devices
inside it, ids outside the documented character set, non-UTF-8 and control characters in
names, huge ids and threshold-like keys anywhere in submission.yaml. Every one is refused
with exit 2 and one line per problem, nothing written to results/, nothing left hanging."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat

import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, meta, rewrite_rows, rows_of, write_submission
from aegisbench.cli import main
from aegisbench.errors import MAX_MESSAGE_CHARS, BadInput
from aegisbench.evaluation.submission import SubmissionInvalid, validate_submission

PREFIX = "aegisbench validate: error: "


@pytest.fixture
def good(tmp_path, index):
    return write_submission(tmp_path / "subs" / "good", index, "sar", gt_table(index, "sar"))


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail (instead of hanging the suite) when the block runs longer than ``seconds``."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def validate(folder, repo, capsys) -> tuple[int, list[str]]:
    with deadline(60):
        rc = main(["validate", str(folder), "--dataset", str(repo), "--no-verify"])
    return rc, capsys.readouterr().err.splitlines()


def problems_of(folder, index) -> list[str]:
    with deadline(60), pytest.raises(SubmissionInvalid) as info:
        validate_submission(folder, index)
    return [str(p).replace(f"{folder}/", "") for p in info.value.problems]


# ------------------------------------------------------------------ the folder itself


def test_a_symlinked_submission_folder_is_refused_and_results_are_untouched(good, repo, tmp_path, capsys):
    results = tmp_path / "results"
    (results / "good").mkdir(parents=True)
    (results / "good" / "metrics.parquet").write_text("the real result")
    evil = good.parent / "evil"
    evil.symlink_to(good, target_is_directory=True)
    rc = main(["evaluate", str(evil), "--dataset", str(repo), "--no-verify", "--out", str(results)])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err == [f"aegisbench evaluate: error: {evil}: the submission folder is a symbolic link; "
                               "links are not followed: give the real folder"]
    assert sorted(p.name for p in results.rglob("*")) == ["good", "metrics.parquet"]
    assert (results / "good" / "metrics.parquet").read_text() == "the real result"


def test_a_symlinked_folder_on_the_path_is_refused(good, repo, tmp_path, capsys):
    link = tmp_path / "linked"
    link.symlink_to(good.parent, target_is_directory=True)
    rc, err = validate(link / "good", repo, capsys)
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"{PREFIX}{link}/good: {link} is a symbolic link; a submission folder is read only "
                             "through real folders")
    rc, err = validate(link / "good" / ".." / "good", repo, capsys)  # '..' through a link is no way round
    assert rc == 2 and len(err) == 1 and "is a symbolic link" in err[0]


def test_a_device_or_a_file_is_not_a_submission_folder(good, repo, capsys):
    rc, err = validate("/dev/null", repo, capsys)
    assert rc == 2 and err == [f"{PREFIX}/dev/null: submission folder is a character device, not a folder"]
    rc, err = validate(good / "submission.yaml", repo, capsys)
    assert rc == 2 and err == [f"{PREFIX}{good}/submission.yaml: submission folder is a regular file, not a folder"]


# ------------------------------------------------------------------ what it holds


def _yolo_txt(folder, index) -> str:
    """Move ``folder`` to the YOLO form's layout with no predictions; the path of one
    ``<image_id>.txt`` of clean/<sar val split>."""
    (folder / "predictions.parquet").unlink()
    config, split = next((c, s) for c, s in index.keys("sar") if c == "clean")
    d = folder / "predictions" / config / split
    d.mkdir(parents=True)
    return str(d / f"{index.gt(config, split).image_ids[0]}.txt")


def test_a_fifo_is_refused_without_reading_it(good, index, repo, capsys):
    fifo = _yolo_txt(good, index)
    os.mkfifo(fifo)  # opening it for reading would block until a writer comes
    rel = os.path.relpath(fifo, good)
    assert problems_of(good, index) == [f"{rel}: a FIFO is not accepted in a submission (only regular files and "
                                        "folders)"]
    os.unlink(fifo)
    os.mkfifo(good / "submission.yaml.fifo")
    rc, err = validate(good, repo, capsys)
    assert rc == 2 and err[0].endswith("submission.yaml.fifo: a FIFO is not accepted in a submission (only regular "
                                       "files and folders)")


def test_a_socket_or_a_device_node_is_refused(good, index):
    sock = socket.socket(socket.AF_UNIX)
    path = good / "s.sock"
    try:
        sock.bind(str(path))
        assert problems_of(good, index) == ["s.sock: a socket is not accepted in a submission (only regular files "
                                            "and folders)"]
    finally:
        sock.close()
        path.unlink()
    try:  # a /dev/zero of one's own: needs CAP_MKNOD
        os.mknod(good / "predictions.parquet.zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("mknod needs privileges here")
    assert problems_of(good, index) == ["predictions.parquet.zero: a character device is not accepted in a "
                                        "submission (only regular files and folders)"]


def test_a_non_utf8_file_name_is_refused_on_one_line(good, repo, capsys):
    try:
        with open(os.fsencode(str(good)) + b"/notes-\xff.txt", "wb") as fh:
            fh.write(b"x")
    except OSError:
        pytest.skip("this file system refuses non-UTF-8 names")
    rc, err = validate(good, repo, capsys)
    assert rc == 2 and err == [f"{good}/notes-\\xff.txt: file name is not valid UTF-8; rename it",
                               "invalid submission: 1 problem(s)"]


def test_a_non_utf8_folder_name_is_refused_on_one_line(good, repo, capsys):
    bad = os.fsdecode(os.fsencode(str(good.parent)) + b"/sub\xff")
    try:
        shutil.copytree(good, bad)
    except OSError:
        pytest.skip("this file system refuses non-UTF-8 names")
    rc, err = validate(bad, repo, capsys)
    assert rc == 2 and err == [f"{PREFIX}{good.parent}/sub\\xff: the path of the submission folder is not valid "
                               "UTF-8; rename it"]


# ------------------------------------------------------------------ the id


@pytest.mark.parametrize("name", ["bad id", "-dash", ".hidden", "caf\u00e9", "x" * 65, "tab\there"])
def test_ids_outside_the_documented_charset_are_refused(name, good, repo, capsys):
    folder = good.rename(good.parent / name)
    rc, err = validate(folder, repo, capsys)
    assert rc == 2 and len(err) == 1
    assert err[0].endswith("(the folder name) must be 1 to 64 ASCII letters, digits, '.', '_' or '-', starting "
                           "with a letter or digit")


def test_ids_inside_the_charset_are_accepted(good, index):
    folder = good.rename(good.parent / ("Team.A_1-b" + "x" * 54))
    assert validate_submission(folder, index).id == folder.name and len(folder.name) == 64


def test_a_newline_in_a_folder_name_prints_one_line(good, repo, capsys):
    folder = good.rename(good.parent / "ok\nINFO aegisbench: forged line")
    rc, err = validate(folder, repo, capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"{PREFIX}{good.parent}/ok\\nINFO aegisbench: forged line")


def test_a_megabyte_id_gives_capped_lines(good, index, repo, capsys):
    rows = rows_of(good)
    rows[0]["image_id"] = "x" * 1_000_000
    rewrite_rows(good, rows, pq.read_schema(good / "predictions.parquet"))
    rc, err = validate(good, repo, capsys)
    assert rc == 2 and err[-1] == "invalid submission: 1 problem(s)" and len(err) == 2
    assert err[0].startswith(f"{good}/predictions.parquet:row 0 field image_id: image 'xxxx")
    assert err[0].endswith("... is not in config 'clean' split 'synthetic_sar'") and len(err[0]) < 300
    rc, err = validate(good.parent / ("y" * 1_000_000), repo, capsys)  # the argument itself: a name too long
    assert rc == 2 and len(err) == 1 and len(err[0]) <= len(PREFIX) + MAX_MESSAGE_CHARS
    assert err[0].endswith(" chars)")


def test_messages_escape_control_characters_and_cap_their_length():
    exc = BadInput("unknown \x1b[31mclass\x1b[0m\r\n\u202eevil", where="ann\x85/\udcff.xml")
    assert str(exc) == "ann\\x85/\\xff.xml: unknown \\x1b[31mclass\\x1b[0m\\r\\n\\u202eevil"
    long = str(BadInput("y" * 10_000, where="f"))
    assert len(long) == MAX_MESSAGE_CHARS and long.endswith("... (10003 chars)")
    assert exc.message.startswith("unknown \x1b")  # the raw text stays available to the code


# ------------------------------------------------------------------ thresholds


@pytest.mark.parametrize("over, field", [
    ({"conf_thresh": 0.3}, "conf_thresh"),
    ({"Threshold": 0.2}, "Threshold"),
    ({"detector": {"tiling": {"tile": 640}, "threshold": 0.1}}, "detector.threshold"),
    ({"detector": {"post": [{"min_score": 0.05}]}}, "detector.post[0].min_score"),
    ({"SCORE-THR": 0.4}, "SCORE-THR"),
])
def test_threshold_like_keys_are_refused_at_any_depth(over, field, good, index):
    (good / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar", **over)))
    got = problems_of(good, index)
    assert got == [f"submission.yaml: field {field}: thresholds cannot be set by a submission: the evaluator "
                   "freezes one threshold per source on the clean _val predictions (maximum F1) and applies it to "
                   "every condition; remove this field"]


def test_harmless_keys_are_accepted(good, index):
    harmless = {"description": "thresholds are frozen by the evaluator", "classes": {"person": "person"},
                "detector": {"score_floor": 0.001, "model_nms_iou": 0.7, "max_det_window": 300,
                             "tiling": {"tile": 1024, "overlap": 256, "merge_iou": 0.6}},
                "contributors": ["Three Authors"]}
    (good / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar", **harmless)))
    assert validate_submission(good, index).meta.extra["detector"]["score_floor"] == 0.001
