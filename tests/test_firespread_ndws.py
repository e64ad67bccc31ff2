"""Next Day Wildfire Spread adapter: TFRecord + tf.train.Example without TensorFlow, into
the forecast scorer with unknown (-1) pixels masked."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow.parquet as pq
import pytest

from aegisbench import cli
from aegisbench.errors import BadInput
from aegisbench.evaluation.firespread_ndws import (INPUT_FEATURES, crc32c, decode_example, encode_example, masked_crc,
                                        read_ndws, read_tfrecord, score_ndws, write_tfrecord)
from aegisbench.forecasters.submission import forecasts_table


def sample(rng, i):
    feats = {name: rng.normal(size=(64, 64)).astype(np.float32) for name in INPUT_FEATURES}
    prev = np.zeros((64, 64), np.float32)
    prev[20 + i:30 + i, 20:30] = 1
    fire = np.roll(prev, 3, axis=1)
    fire[0:4, :] = -1  # unknown strip
    prev[60:, :] = -1
    feats["PrevFireMask"], feats["FireMask"] = prev, fire
    return feats


@pytest.fixture
def fixture_files(tmp_path):
    rng = np.random.default_rng(0)
    samples = [sample(rng, i) for i in range(6)]
    a, b = tmp_path / "next_day_wildfire_spread_test_00.tfrecord", tmp_path / "next_day_wildfire_spread_test_01.tfrecord"
    write_tfrecord(a, [encode_example(s) for s in samples[:4]])
    write_tfrecord(b, [encode_example(s) for s in samples[4:]])
    return [a, b], samples


def test_crc_and_hand_built_record(tmp_path):
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"") == 0
    # Example{features{feature{key:"x" value{float_list{value:[1.5, -2]}}}}} built by hand
    floats = struct.pack("<2f", 1.5, -2.0)
    float_list = b"\x0a" + bytes([len(floats)]) + floats
    feature = b"\x12" + bytes([len(float_list)]) + float_list
    entry = b"\x0a\x01x" + b"\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry
    example = b"\x0a" + bytes([len(features)]) + features
    assert encode_example({"x": [1.5, -2.0]}) == example
    path = tmp_path / "one.tfrecord"
    head = struct.pack("<Q", len(example))
    path.write_bytes(head + struct.pack("<I", masked_crc(head)) + example + struct.pack("<I", masked_crc(example)))
    recs = list(read_tfrecord(path, verify_data=True))
    assert decode_example(recs[0])["x"].tolist() == [1.5, -2.0]
    path.write_bytes(path.read_bytes()[:-1] + b"\x00")
    with pytest.raises(BadInput, match="data CRC"):
        list(read_tfrecord(path, verify_data=True))
    path.write_bytes(b"\x01" * 12)
    with pytest.raises(BadInput, match="length CRC"):
        list(read_tfrecord(path))


def test_read_real_layout(fixture_files):
    paths, samples = fixture_files
    data = read_ndws(paths, verify_data=True)
    assert data["FireMask"].shape == (6, 64, 64) and set(INPUT_FEATURES) <= set(data)
    assert np.array_equal(data["PrevFireMask"][5], samples[5]["PrevFireMask"])
    assert np.array_equal(data["elevation"][2], samples[2]["elevation"])


def test_unknown_pixels_are_masked_from_every_metric(fixture_files, tmp_path):
    paths, samples = fixture_files
    fire = np.stack([s["FireMask"] for s in samples])
    rng = np.random.default_rng(1)
    probs = rng.random((6, 64, 64)).astype(np.float32)
    t1 = score_ndws(paths, probs, n_boot=50).to_pylist()
    probs2 = probs.copy()
    probs2[fire == -1] = 1 - probs2[fire == -1]  # change only the unknown pixels
    t2 = score_ndws(paths, probs2, n_boot=50).to_pylist()
    assert [r["value"] for r in t1] == pytest.approx([r["value"] for r in t2], nan_ok=True)
    n_known = int((fire >= 0).sum())
    brier = next(r for r in t1 if r["metric"] == "brier" and r["stratum"] == "all")
    assert brier["n"] == n_known and brier["n_units"] == 6
    known = fire >= 0
    assert brier["value"] == pytest.approx(np.mean((probs[known] - (fire[known] == 1)) ** 2))
    assert any(r["stratum"].startswith("dice:") for r in t1)


def test_persistence_cli_and_forecast_file(fixture_files, tmp_path, monkeypatch):
    paths, samples = fixture_files
    out = tmp_path / "res"
    assert cli.main(["firespread-ndws", *map(str, paths), "--out", str(out), "--n-resamples", "30"]) == 0
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    dice = [r for r in rows if r["metric"] == "recall" and r["stratum"].startswith("dice:")]
    assert dice and all(r["config"] == "ndws" for r in rows)
    # the persistence forecast written as a file scores the same
    prev = np.stack([(s["PrevFireMask"] == 1).astype(np.float32) for s in samples])
    t = forecasts_table([("x", 0, 0, i) for i in range(6)], prev).rename_columns(
        ["config", "initial_condition", "realization", "sample", "probability"])
    pq.write_table(t.select(["sample", "probability"]), tmp_path / "f.parquet")
    again = score_ndws(paths, str(tmp_path / "f.parquet"), n_boot=30).to_pylist()
    assert [r["value"] for r in again] == pytest.approx([r["value"] for r in rows], nan_ok=True)
    pq.write_table(t.select(["sample", "probability"]).slice(0, 5), tmp_path / "g.parquet")
    assert cli.main(["firespread-ndws", *map(str, paths), "--forecast", str(tmp_path / "g.parquet")]) == 2
