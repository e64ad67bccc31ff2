"""What a stranger controls, bounded and typed before it is read: submission.yaml fields
(huge numbers, duplicate keys, escape and bidi characters, oversized texts, TeX in a name),
prediction classes other than the track's, a threshold column in forecasts, source folders
whose annotations leave the folder or lie about their images, and files whose size, row
count, map size, nesting or encoding would take unbounded time or memory. Each ends with
exit 2 and one line naming the file, row or field, nothing written, inputs unchanged."""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from _evalkit import gt_table, rows_of, write_submission, write_yolo_predictions
from _hostilekit import files_of
from aegisbench.cli import main
from aegisbench.dataset.index import export_coco
from test_adapters import put, scene, text

ROOT = Path(__file__).resolve().parents[2]
PY = str(Path(sys.executable))


@pytest.fixture
def good(tmp_path, index):
    return write_submission(tmp_path / "subs" / "good", index, "sar", gt_table(index, "sar"))


def _refused(argv, capsys, *needles, seconds: float = 10.0) -> str:
    """Run ``argv``: exit 2, within ``seconds``, errors naming every needle, no traceback."""
    t0 = time.monotonic()
    rc = main(argv)
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    assert took < seconds, f"took {took:.1f} s"
    return err


def _stats_of(folder: Path) -> dict:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _validate(folder, repo, capsys, *needles, seconds: float = 10.0, huge: bool = False) -> str:
    """``validate folder``, refused; the folder unchanged (by its bytes, or size and time if ``huge``)."""
    snapshot = _stats_of if huge else files_of
    before = snapshot(folder)
    err = _refused(["validate", str(folder), "--dataset", str(repo), "--no-verify"], capsys, *needles,
                   seconds=seconds)
    assert snapshot(folder) == before
    return err


def _yaml(folder: Path, text_: str) -> None:
    (folder / "submission.yaml").write_text(text_)


def _limited(argv: list[str], gib: float, timeout: float = 120) -> subprocess.CompletedProcess:
    """``aegisbench argv`` in a child whose address space is capped at ``gib`` GiB."""
    cap = int(gib * 1024 ** 3)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([PY, "-c", "import sys; from aegisbench.cli import main; sys.exit(main(sys.argv[1:]))", *argv], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit, env=env, cwd=ROOT)


# ------------------------------------------------------------------ submission.yaml


def test_a_401_digit_parameter_count_is_refused(good, repo, capsys):
    _yaml(good, yaml.safe_dump({**yaml.safe_load((good / "submission.yaml").read_text()),
                                "parameters": int("1" + "0" * 400)}))
    err = _validate(good, repo, capsys, "submission.yaml", "parameters", "at most 1e+13")
    assert "0" * 100 not in err  # the number is shortened in the message


def test_a_second_name_key_is_refused_not_silently_winning(good, repo, capsys):
    raw = (good / "submission.yaml").read_text()
    _yaml(good, raw + "name: the second name\n")
    _validate(good, repo, capsys, "submission.yaml", "key 'name' given twice")


@pytest.mark.parametrize("team", ["evil\x1b[31mred", "left\u202eright", "bell\x07", "new\nline"])
def test_escape_and_bidi_characters_in_team_are_refused(good, repo, capsys, team):
    _yaml(good, yaml.safe_dump({**yaml.safe_load((good / "submission.yaml").read_text()), "team": team}))
    err = _validate(good, repo, capsys, "submission.yaml", "team")
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err


@pytest.mark.parametrize("field", ["model", "team", "name", "description"])
def test_300_kb_texts_are_refused(good, repo, capsys, field):
    _yaml(good, yaml.safe_dump({**yaml.safe_load((good / "submission.yaml").read_text()), field: "x" * 300_000}))
    err = _validate(good, repo, capsys, "submission.yaml", field)
    assert len(err) < 2000


# ------------------------------------------------------------------ classes


def _as_yolo(folder: Path, index, cls: int) -> Path:
    """The good submission as YOLO txt files (predictions/<config>/<split>/<id>.txt) of class ``cls``."""
    out = write_yolo_predictions(folder.parent / "yolo", index, gt_table(index, "sar"), cls)
    (out / "submission.yaml").write_text((folder / "submission.yaml").read_text())
    return out


def test_yolo_lines_of_another_class_are_refused(good, index, repo, capsys):
    sub = _as_yolo(good, index, 7)
    _validate(sub, repo, capsys, ".txt", "class 7")


def test_yolo_lines_of_the_track_class_are_scored(good, index, repo, capsys):
    sub = _as_yolo(good, index, 0)
    assert main(["validate", str(sub), "--dataset", str(repo), "--no-verify"]) == 0, capsys.readouterr().err


def test_a_declared_class_map_is_read(good, index, repo, capsys):
    sub = _as_yolo(good, index, 7)
    raw = yaml.safe_load((sub / "submission.yaml").read_text())
    _yaml(sub, yaml.safe_dump({**raw, "class_ids": {7: "person"}}))
    assert main(["validate", str(sub), "--dataset", str(repo), "--no-verify"]) == 0, capsys.readouterr().err
    _yaml(sub, yaml.safe_dump({**raw, "class_ids": {7: "car"}}))
    _validate(sub, repo, capsys, "class 7", "class_ids")


def _as_coco(folder: Path, index, category: int, tmp: Path) -> Path:
    """The good submission as COCO results (predictions/<config>.json) of ``category``."""
    out = folder.parent / "coco"
    export_coco(index, tmp / "gt")
    (out / "predictions").mkdir(parents=True)
    table = gt_table(index, "sar")
    for config in sorted({k[0] for k in table}):
        gt = json.loads((tmp / "gt" / f"{config}.json").read_text())
        ids = {(im["split"], Path(im["file_name"]).stem): im["id"] for im in gt["images"]}
        res = [{"image_id": ids[(s, i)], "category_id": category,
                "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])], "score": float(sc)}
               for (c, s, i), det in sorted(table.items()) if c == config for b, sc in zip(det.xyxy, det.score)]
        (out / "predictions" / f"{config}.json").write_text(json.dumps(res))
    (out / "submission.yaml").write_text((folder / "submission.yaml").read_text())
    return out


def test_coco_results_of_another_category_are_refused(good, index, repo, capsys):
    sub = _as_coco(good, index, 99, good.parent)
    _validate(sub, repo, capsys, "predictions/clean.json", "category_id", "99")


def test_coco_results_of_the_exported_category_are_scored(good, index, repo, capsys):
    sub = _as_coco(good, index, 1, good.parent)
    assert main(["validate", str(sub), "--dataset", str(repo), "--no-verify"]) == 0, capsys.readouterr().err


# ------------------------------------------------------------------ fire spread


@pytest.fixture(scope="module")
def fire(tmp_path_factory):
    from aegisbench.builders.firespread import build_firespread_repo
    from aegisbench.forecasters.baselines import write_baselines
    root = tmp_path_factory.mktemp("fire")
    params = {"grid": [16, 16], "realizations": 12, "s_levels": [0, 30], "initial_conditions": 4,
              "test_initial_conditions": [2, 3], "realizations_per_shard": 6,
              "forecast": {"observe": 4, "horizon": 6, "eval_realizations": 3}}
    build_firespread_repo(params, "0.1.0", root / "repo")
    write_baselines(root / "repo", root / "subs", names=("persistence", "oracle"))
    return root


def _fire_copy(fire, tmp_path) -> Path:
    import shutil
    sub = tmp_path / "firespread_persistence"
    shutil.copytree(fire / "subs" / "firespread_persistence", sub)
    return sub


def test_a_threshold_column_in_forecasts_is_refused(fire, tmp_path, capsys):
    sub = _fire_copy(fire, tmp_path)
    t = pq.read_table(sub / "forecasts.parquet")
    pq.write_table(t.append_column("threshold", pa.array([0.3] * t.num_rows, pa.float32())),
                   sub / "forecasts.parquet")
    _validate(sub, fire / "repo", capsys, "forecasts.parquet", "threshold")


def test_tex_in_a_forecaster_name_is_plain_text(fire, tmp_path, capsys):
    sub = _fire_copy(fire, tmp_path)
    raw = yaml.safe_load((sub / "submission.yaml").read_text())
    _yaml(sub, yaml.safe_dump({**raw, "name": r"$\undefinedmacro{x}$"}))
    rc = main(["evaluate", str(sub), "--dataset", str(fire / "repo"), "--results", str(tmp_path / "res"),
               "--n-resamples", "20"])
    assert rc == 0, capsys.readouterr().err
    assert (tmp_path / "res" / sub.name / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    rc = main(["leaderboard", "--results", str(tmp_path / "res"), "--dataset", str(fire / "repo"),
               "--out", str(tmp_path / "lb")])
    assert rc == 0, capsys.readouterr().err
    assert r"$\undefinedmacro{x}$" in (tmp_path / "lb" / "site" / "models" / f"{sub.name}.html").read_text()


@pytest.mark.parametrize("strata", [b"PAR1 not parquet PAR1", "stratum", "value"])
def test_bad_fire_spread_strata_skip_only_their_folder(fire, tmp_path, capsys, strata):
    res = tmp_path / "res"
    for name in ("persistence", "oracle"):
        assert main(["evaluate", str(fire / "subs" / f"firespread_{name}"), "--dataset", str(fire / "repo"),
                     "--results", str(res), "--n-resamples", "20"]) == 0
    path = res / "firespread_oracle" / "strata.parquet"
    if isinstance(strata, bytes):
        path.write_bytes(strata)
    else:
        t = pq.read_table(path)
        i = t.schema.get_field_index(strata)
        bad = pa.array(["x"] * t.num_rows) if strata == "stratum" else pa.array(["high"] * t.num_rows)
        pq.write_table(t.set_column(i, strata, bad), path)
    capsys.readouterr()
    assert main(["leaderboard", "--results", str(res), "--dataset", str(fire / "repo"),
                 "--out", str(tmp_path / "lb")]) == 0
    err = capsys.readouterr().err
    assert "skipped firespread_oracle (malformed)" in err and "strata.parquet" in err, err
    board = pq.read_table(tmp_path / "lb" / "leaderboard.parquet")
    assert set(board.column("submission").to_pylist()) == {"firespread_persistence"}
    assert "firespread_oracle" in (tmp_path / "lb" / "README.md").read_text()


def test_a_forecast_map_of_250_million_values_is_refused_from_the_footer(fire, tmp_path):
    sub = _fire_copy(fire, tmp_path)
    t = pq.read_table(sub / "forecasts.parquet")
    n = t.num_rows
    rows = pa.array(np.zeros(250_000_000, np.float32))
    inner = pa.ListArray.from_arrays(pa.array([0, 250_000_000], pa.int32()), rows)
    last = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), inner)
    bomb = pa.concat_arrays([t.column("probability").combine_chunks().slice(0, n - 1).cast(last.type), last])
    pq.write_table(t.set_column(4, "probability", bomb), sub / "forecasts.parquet", compression="zstd")
    del rows, inner, last, bomb
    assert (sub / "forecasts.parquet").stat().st_size < 2_000_000
    before = files_of(sub)
    p = _limited(["validate", str(sub), "--dataset", str(fire / "repo"), "--no-verify"], gib=2.5)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "forecasts.parquet" in p.stderr and "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert files_of(sub) == before


# ------------------------------------------------------------------ sizes before reading


def test_a_1_tib_sparse_file_is_refused_before_hashing(good, repo, capsys):
    with open(good / "huge.bin", "wb") as f:
        f.truncate(1 << 40)
    _validate(good, repo, capsys, "huge.bin", "refused before", seconds=5, huge=True)


def test_a_3_gib_predictions_file_is_refused_before_hashing(good, repo, capsys):
    (good / "predictions.parquet").unlink()
    with open(good / "predictions.parquet", "wb") as f:
        f.truncate(3 << 30)
    _validate(good, repo, capsys, "predictions.parquet", "refused before", seconds=5, huge=True)


def test_19_million_identical_rows_are_refused_from_the_footer_under_a_memory_cap(good, repo):
    row = rows_of(good)[0]
    block = pa.Table.from_pylist([row] * 1_000_000, schema=pq.read_schema(good / "predictions.parquet"))
    with pq.ParquetWriter(good / "predictions.parquet", block.schema, compression="zstd") as w:
        for _ in range(19):
            w.write_table(block)
    del block
    assert (good / "predictions.parquet").stat().st_size < 5_000_000
    before = files_of(good)
    t0 = time.monotonic()
    p = _limited(["validate", str(good), "--dataset", str(repo), "--no-verify"], gib=2.5)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "predictions.parquet" in p.stderr and "19000000 rows" in p.stderr
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert time.monotonic() - t0 < 60
    assert files_of(good) == before


# ------------------------------------------------------------------ source folders


def _coco_source(root: Path, file_name: str, **image) -> Path:
    put(root / "images" / "a.png", scene("a"))
    data = {"images": [{"id": 1, "file_name": file_name, "width": 128, "height": 96, **image}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]}],
            "categories": [{"id": 1, "name": "person"}]}
    text(root / "annotations" / "instances_test.json", json.dumps(data))
    return root


def _build(tmp_path, src, fmt, *extra) -> list[str]:
    return ["build", "--params", str(tmp_path / "no-params.yaml"), "--out", str(tmp_path / "repo"),
            "--source-dir", str(src), "--source-format", fmt, "--source", "s", "--class-map", "person=person",
            "--split-mode", "folders", *extra]


@pytest.mark.parametrize("where", ["../outside.png", "../../outside.png", "ABS"])
def test_a_coco_file_name_outside_the_source_folder_is_refused(tmp_path, capsys, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    put(tmp_path / "outside.png", scene("o"))
    put(tmp_path / "src" / "outside.png", scene("o"))
    file_name = str(tmp_path / "outside.png") if where == "ABS" else where
    src = _coco_source(tmp_path / "src" / "coco", file_name)
    _refused(_build(tmp_path, src, "coco"), capsys, "instances_test.json", "file_name", "inside --source-dir")
    assert not (tmp_path / "repo").exists()


def test_a_coco_width_of_5001_digits_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _coco_source(tmp_path / "coco", "a.png")
    path = src / "annotations" / "instances_test.json"
    path.write_text(path.read_text().replace('"width": 128', '"width": 1' + "0" * 5000))
    err = _refused(_build(tmp_path, src, "coco"), capsys, "instances_test.json")
    assert "0" * 100 not in err and len(err) < 2000
    assert not (tmp_path / "repo").exists()


def test_a_200000_deep_coco_json_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _coco_source(tmp_path / "coco", "a.png")
    (src / "annotations" / "instances_test.json").write_text('{"images": ' + "[" * 200_000 + "]" * 200_000 + "}")
    _refused(_build(tmp_path, src, "coco"), capsys, "instances_test.json", "nest")
    assert not (tmp_path / "repo").exists()


def _png_lying_about_its_size(path: Path, header=(64, 64), data=(2000, 2000)) -> None:
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)
    w, h = data
    raw = b"".join(b"\x00" + bytes(w * 3) for _ in range(h))
    ihdr = struct.pack(">IIBBBBB", header[0], header[1], 8, 2, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9))
                     + chunk(b"IEND", b""))


def _yolo_source(root: Path) -> Path:
    text(root / "data.yaml", "path: .\ntrain: images/train\nval: images/val\ntest: images/test\n"
         "nc: 1\nnames: [person]\n")
    for split in ("train", "val", "test"):
        put(root / "images" / split / f"{split}1.png", scene(split))
        text(root / "labels" / split / f"{split}1.txt", "0 0.5 0.5 0.25 0.25\n")
    return root


def _yolo_build(tmp_path, src) -> list[str]:
    return ["build", "--params", str(tmp_path / "no-params.yaml"), "--out", str(tmp_path / "repo"),
            "--source-dir", str(src), "--source-format", "yolo", "--source", "s", "--class-map", "0=person",
            "--split-mode", "folders"]


def test_the_yolo_source_of_these_tests_builds(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(_yolo_build(tmp_path, _yolo_source(tmp_path / "y"))) == 0, capsys.readouterr().err


def test_a_png_whose_header_lies_about_its_size_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _yolo_source(tmp_path / "y")
    (src / "images" / "test" / "test1.png").unlink()
    _png_lying_about_its_size(src / "images" / "test" / "test1.png")
    _refused(_yolo_build(tmp_path, src), capsys, "test1.png", "64x64")
    assert not (tmp_path / "repo").exists()


def test_a_data_yaml_alias_bomb_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _yolo_source(tmp_path / "y")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (src / "data.yaml").write_text(bomb + "names: [person]\n")
    _refused(_yolo_build(tmp_path, src), capsys, "data.yaml", "alias")
    assert not (tmp_path / "repo").exists()


def test_a_non_utf8_data_yaml_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _yolo_source(tmp_path / "y")
    (src / "data.yaml").write_bytes(b"names: [p\xe9rson]\n")
    _refused(_yolo_build(tmp_path, src), capsys, "data.yaml", "UTF-8")
    assert not (tmp_path / "repo").exists()


def test_a_yolo_label_with_a_non_utf8_byte_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _yolo_source(tmp_path / "y")
    (src / "labels" / "test" / "test1.txt").write_bytes(b"0 0.5 0.5 0.25 0.25\xff\n")
    _refused(_yolo_build(tmp_path, src), capsys, "test1.txt", "UTF-8")
    assert not (tmp_path / "repo").exists()
