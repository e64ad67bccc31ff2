"""Bounded work on hostile input: nesting in JSON / YAML, alias bombs, duplicate Parquet
columns, row counts past the declared limit, decompression-bomb images (refused from their
header, before decoding), a write that runs out of room, and duplicate rows that once made
message building quadratic. Each is one line and exit 2, never a traceback."""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, meta, write_submission
from aegisbench.builders.adapters import SourceSpec, load_source
from aegisbench.dataset.images import decode_image
from aegisbench.cli import OneLineFormatter, main, user_error
from aegisbench.errors import BadInput
from aegisbench.evaluation.formats import parse_yolo_file
from aegisbench.evaluation.rows import Frames, Problem, Problems, check_rows
from aegisbench.evaluation.submission import SubmissionInvalid, validate_submission
from aegisbench.readers import (MAX_IMAGE_PIXELS, MAX_NESTING, MAX_PREDICTION_ROWS, check_image_bytes,
                                image_header_size, read_json, read_yaml)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def good(tmp_path, index):
    return write_submission(tmp_path / "good", index, "sar", gt_table(index, "sar"))


def problems_of(folder, index) -> list[str]:
    with pytest.raises(SubmissionInvalid) as info:
        validate_submission(folder, index)
    return [str(p).replace(f"{folder}/", "") for p in info.value.problems]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# ------------------------------------------------------------------ JSON / YAML


def test_json_and_yaml_nesting_is_limited(tmp_path):
    for depth, ok in ((MAX_NESTING, True), (MAX_NESTING + 1, False), (100_000, False)):
        for name, read in (("x.json", read_json), ("x.yaml", read_yaml)):
            path = tmp_path / name
            path.write_text(nested(depth))
            if ok:
                assert read(path) == json.loads(nested(depth))
            else:
                with pytest.raises(BadInput, match=f"^{path}: nested deeper than {MAX_NESTING} levels$"):
                    read(path)


def test_yaml_alias_bombs_and_recursive_aliases_are_refused(tmp_path):
    path = tmp_path / "lol.yaml"
    path.write_text("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)))  # 10^9 nodes expanded
    with pytest.raises(BadInput, match="more than 1000000 nodes once its aliases are expanded"):
        read_yaml(path)
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(BadInput, match=r"alias \*a refers to a node that contains it"):
        read_yaml(path)
    path.write_text("a: &a [1, 2]\nb: *a\n")  # an ordinary alias is fine
    assert read_yaml(path) == {"a": [1, 2], "b": [1, 2]}


def test_a_fifo_or_a_huge_integer_is_one_line_not_a_hang_or_a_traceback(tmp_path):
    fifo = tmp_path / "params.yaml"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="params file is a FIFO, not a regular file"):
        read_yaml(fifo, "params file")
    big = tmp_path / "big.json"
    big.write_text("1" * 5000)
    with pytest.raises(BadInput, match="malformed JSON"):
        read_json(big)


def test_deeply_nested_submission_yaml_and_coco_json(good, index, repo, capsys):
    (good / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar")) + "extra: " + nested(10_000) + "\n")
    assert problems_of(good, index) == [f"submission.yaml: nested deeper than {MAX_NESTING} levels"]
    (good / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar")))
    (good / "predictions.parquet").unlink()
    (good / "predictions").mkdir()
    (good / "predictions" / "clean.json").write_text(nested(100_000))
    assert main(["validate", str(good), "--dataset", str(repo), "--no-verify"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{good}/predictions/clean.json: cannot read JSON: nested deeper than {MAX_NESTING} levels",
        "invalid submission: 1 problem(s)"]


# ------------------------------------------------------------------ Parquet


def test_duplicate_parquet_column_names(good, index, repo, capsys):
    t = pq.read_table(good / "predictions.parquet")
    twice = pa.Table.from_arrays([*t.columns, t.column("score"), t.column("label")],
                                 names=[*t.column_names, "score", "label"])
    pq.write_table(twice, good / "predictions.parquet")
    assert main(["validate", str(good), "--dataset", str(repo), "--no-verify"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"{good}/predictions.parquet: field label: column name appears 2 times; every column needs its own name",
        f"{good}/predictions.parquet: field score: column name appears 2 times; every column needs its own name",
        "invalid submission: 2 problem(s)"]


def test_rows_past_the_declared_limit_are_refused_from_the_footer(good, index):
    pq.write_table(pa.table({"config": pa.nulls(MAX_PREDICTION_ROWS + 1, pa.string())}),
                   good / "predictions.parquet")
    n_images = sum(len(index.image_ids(c, s)) for c, s in index.keys("sar"))
    limit = min(MAX_PREDICTION_ROWS, n_images * 1000)  # the images of the track x the detections per image
    assert problems_of(good, index) == [f"predictions.parquet: {MAX_PREDICTION_ROWS + 1} rows, more than the limit "
                                        f"of {limit} ({n_images} images of the track x 1000 detections per image) "
                                        "(from the file's footer, before any row is read)"]


def test_many_duplicate_yolo_lines_are_all_counted_with_the_right_first_line(tmp_path):
    n = 30_000
    path = tmp_path / "img.txt"
    path.write_text("0 0.5 0.5 0.1 0.1 0.9\n" * n)
    frames = Frames({("clean", "val"): {"img": (640, 480)}}, {"clean"}, {("clean", "val"): "sar"}, "sar")
    for problems in (Problems(), Problems(keep=n + 1)):
        raw = parse_yolo_file(path, "clean", "val", (640, 480), problems)
        check_rows(raw, frames, problems, tolerance_px=2.0, max_dets=1000)
        assert problems.total == n  # every duplicate and the cap, however many are kept
        assert len(problems.items) == min(problems.keep, n)
        dups = sorted(p for p in problems.items if p.message.startswith("duplicate"))
        assert {p.message for p in dups} == {"duplicate of line 1"}
        assert [p.row for p in dups] == list(range(2, 2 + len(dups)))
    cap = Problem(str(path), 1001, "image_id", f"image 'img' has {n} detections, more than the cap of 1000", "line")
    assert cap in problems.items


# ------------------------------------------------------------------ images


def png_bomb(width: int = 30000, height: int = 30000) -> bytes:
    """A real 8x8 PNG whose IHDR claims ``width`` x ``height`` (CRC fixed): a few hundred
    bytes that a decoder would allocate 2.7 GB for."""
    data = bytearray(cv2.imencode(".png", np.zeros((8, 8, 3), np.uint8))[1].tobytes())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def jpeg_bomb(width: int = 30000, height: int = 30000) -> bytes:
    data = bytearray(cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))[1].tobytes())
    sof = data.find(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def test_image_headers_are_read_for_every_accepted_format():
    img = np.zeros((7, 13, 3), np.uint8)
    for ext in (".png", ".jpg", ".bmp", ".tif", ".webp"):
        assert image_header_size(cv2.imencode(ext, img)[1].tobytes()) == (13, 7), ext
    assert image_header_size(png_bomb()) == (30000, 30000) == image_header_size(jpeg_bomb())
    assert image_header_size(b"not an image") is None


@pytest.mark.parametrize("bomb", [png_bomb, jpeg_bomb])
def test_a_decompression_bomb_is_refused_before_decoding(bomb):
    data = bomb()
    assert len(data) < 2000 and 30000 * 30000 > MAX_IMAGE_PIXELS
    msg = f"image header declares 30000x30000 = 900000000 pixels, more than the limit of {MAX_IMAGE_PIXELS}"
    with pytest.raises(BadInput, match=msg):
        check_image_bytes(data, "x")
    with pytest.raises(BadInput, match="refused before decoding"):
        decode_image(data, "row 3")


def test_a_bomb_in_a_source_dir_stops_the_build_with_one_line(tmp_path):
    root = tmp_path / "src"
    for split in ("train", "val", "test"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        assert cv2.imwrite(str(root / "images" / split / f"{split}.png"), np.full((32, 48, 3), 90, np.uint8))
        (root / "labels" / split / f"{split}.txt").write_text("0 0.5 0.5 0.25 0.5\n")
    (root / "images" / "test" / "bomb.png").write_bytes(png_bomb())
    (root / "labels" / "test" / "bomb.txt").write_text("0 0.5 0.5 0.25 0.5\n")
    with pytest.raises(BadInput) as info:
        load_source(SourceSpec("bomb", "yolo", root, {"0": "person"}, "person", split_mode="folders"))
    assert str(info.value).startswith(f"{root}/images/test/bomb.png: image header declares 30000x30000")


# ------------------------------------------------------------------ out of room, log lines


def test_a_write_that_runs_out_of_room_is_one_line_naming_the_path(repo, tmp_path):
    out = tmp_path / "coco"
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256)); from aegisbench.cli import main; "
            f"sys.exit(main(['export-coco', '--dataset', {str(repo)!r}, '--no-verify', '--out', {str(out)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower() or "Traceback" in line]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert errors[0].startswith(f"aegisbench export-coco: error: {out}/") and ".json" in errors[0]
    assert "file too large" in errors[0]


def test_a_full_disk_names_the_path():
    full = OSError(errno.ENOSPC, "No space left on device", "results/x/metrics.parquet")
    assert user_error(full) == "results/x/metrics.parquet: no space left on device (No space left on device)"
    assert user_error(OSError(errno.EIO, "I/O error")) is None  # an internal error stays one (exit 1)


def test_log_lines_cannot_be_forged():
    record = logging.LogRecord("aegisbench", logging.INFO, __file__, 1, "submission %s: ok", ("a\nERROR b",), None)
    assert OneLineFormatter("%(levelname)s %(message)s").format(record) == "INFO submission a\\nERROR b: ok"


def test_read_regular_bytes_checks_the_open_descriptor(tmp_path):
    """The kind and size are checked on the opened descriptor, so a path swapped for a
    FIFO or link after a caller's lstat is refused, not blocked on or followed."""
    import os

    import pytest

    from aegisbench.errors import BadInput
    from aegisbench.readers import read_regular_bytes

    good = tmp_path / "a.txt"
    good.write_bytes(b"12345")
    assert read_regular_bytes(good, "note", 5) == b"12345"
    with pytest.raises(BadInput, match="larger than the limit of 4"):
        read_regular_bytes(good, "note", 4)
    fifo = tmp_path / "b.txt"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="is a FIFO, not a regular file"):
        read_regular_bytes(fifo, "note", 5)  # O_NONBLOCK: returns at once, no writer needed
    link = tmp_path / "c.txt"
    link.symlink_to(good)
    assert read_regular_bytes(link, "note", 5) == b"12345"
    with pytest.raises(BadInput, match="is a symbolic link, not a regular file"):
        read_regular_bytes(link, "note", 5, follow=False)
    with pytest.raises(BadInput, match="note not found"):
        read_regular_bytes(tmp_path / "missing.txt", "note", 5)
