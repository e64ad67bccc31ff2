"""Next Day Wildfire Spread (Huot et al. 2022) without TensorFlow, into the forecast scorer.

The dataset ships TFRecord files of ``tf.train.Example`` records; each feature
(``elevation``, ``th``, ``vs``, ``tmmn``, ``tmmx``, ``sph``, ``pr``, ``pdsi``, ``NDVI``,
``population``, ``erc``, ``PrevFireMask``, ``FireMask``) is a ``float_list`` of
64 x 64 values, row-major. Fire masks use 1 = fire, 0 = no fire, -1 = unknown;
unknown pixels are masked from every metric and from the Dice strata.

TFRecord framing: ``uint64 length | uint32 masked_crc32c(length) | data |
uint32 masked_crc32c(data)`` (little endian). The length CRC is always checked;
the data CRC when ``verify_data=True`` (pure Python, slow on the full dataset).
Scoring reuses :func:`aegisbench.evaluation.firespread_scoring.score_mapset` with each sample as
a bootstrap unit and the Dice between ``PrevFireMask`` and ``FireMask`` as the
stratum (seed 003 Table 3).

>>> crc32c(b"123456789") == 0xE3069283
True
>>> ex = decode_example(encode_example({"FireMask": np.zeros(4, np.float32), "id": [b"a"]}))
>>> ex["FireMask"].tolist(), ex["id"]
([0.0, 0.0, 0.0, 0.0], [b'a'])
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_path, atomic_write_bytes
from aegisbench.errors import BadInput
from aegisbench.vocab import FIRESPREAD, FIRESPREAD_FAMILY

log = logging.getLogger(__name__)

SIZE = 64
INPUT_FEATURES = ("elevation", "th", "vs", "tmmn", "tmmx", "sph", "pr", "pdsi", "NDVI", "population", "erc")
MASKS = ("PrevFireMask", "FireMask")


def _crc_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord framing."""
    c = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_tfrecord(path: str | Path, verify_data: bool = False) -> Iterator[bytes]:
    """Yield the raw records of a (uncompressed) TFRecord file."""
    path = Path(path)
    if not path.exists():
        raise BadInput("TFRecord file not found", where=str(path))
    with open(path, "rb") as fh:
        i = 0
        while True:
            head = fh.read(12)
            if not head:
                return
            if len(head) < 12:
                raise BadInput("truncated record header", where=f"{path}:record {i}")
            length, lcrc = struct.unpack("<QI", head)
            if masked_crc(head[:8]) != lcrc:
                raise BadInput("length CRC mismatch (not a TFRecord file, or compressed?)", where=f"{path}:record {i}")
            data = fh.read(length)
            tail = fh.read(4)
            if len(data) < length or len(tail) < 4:
                raise BadInput("truncated record", where=f"{path}:record {i}")
            if verify_data and masked_crc(data) != struct.unpack("<I", tail)[0]:
                raise BadInput("data CRC mismatch", where=f"{path}:record {i}")
            yield data
            i += 1


def write_tfrecord(path: str | Path, records: Sequence[bytes]) -> None:
    """Write records with TFRecord framing (atomic)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        for data in records:
            head = struct.pack("<Q", len(data))
            fh.write(head + struct.pack("<I", masked_crc(head)) + data + struct.pack("<I", masked_crc(data)))


# ----------------------------------------------------------------- protobuf wire format

def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a message: bytes for length-delimited fields."""
    i = 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        field, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield field, wt, v


def _feature(buf: bytes):
    for kind, _, body in _fields(buf):
        if kind == 1:  # BytesList
            return [bytes(v) for f, _, v in _fields(body) if f == 1]
        if kind == 2:  # FloatList: packed (wt 2) or one float per field (wt 5)
            parts = [np.frombuffer(v, "<f4") for f, _, v in _fields(body) if f == 1]
            return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
        if kind == 3:  # Int64List
            vals = []
            for f, wt, v in _fields(body):
                if f != 1:
                    continue
                if wt == 2:
                    j = 0
                    while j < len(v):
                        x, j = _varint(v, j)
                        vals.append(x)
                else:
                    vals.append(v)
            return np.array([x - (1 << 64) if x >= 1 << 63 else x for x in vals], np.int64)
    return None


def decode_example(data: bytes) -> dict[str, object]:
    """``tf.train.Example`` bytes -> ``{name: float32 array | int64 array | list of bytes}``."""
    out: dict[str, object] = {}
    for f, _, features in _fields(data):
        if f != 1:
            continue
        for g, _, entry in _fields(features):
            if g != 1:
                continue
            key, value = None, None
            for h, _, v in _fields(entry):
                if h == 1:
                    key = bytes(v).decode("utf-8")
                elif h == 2:
                    value = _feature(v)
            if key is not None:
                out[key] = value
    return out


def _tag(field: int, wt: int) -> bytes:
    return _enc_varint((field << 3) | wt)


def _enc_varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        out.append(b | (0x80 if x else 0))
        if not x:
            return bytes(out)


def _ld(field: int, body: bytes) -> bytes:
    return _tag(field, 2) + _enc_varint(len(body)) + body


def encode_example(features: Mapping[str, object]) -> bytes:
    """``tf.train.Example`` bytes of float arrays (float_list) or lists of bytes (bytes_list)."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, (list, tuple)) and all(isinstance(v, bytes) for v in value):
            feat = _ld(1, b"".join(_ld(1, v) for v in value))
        else:
            arr = np.asarray(value, "<f4").reshape(-1)
            feat = _ld(2, _ld(1, arr.tobytes()))
        entries += _ld(1, _ld(1, name.encode()) + _ld(2, feat))
    return _ld(1, entries)


# ----------------------------------------------------------------- samples and scoring

def read_ndws(paths: Sequence[str | Path], verify_data: bool = False) -> dict[str, np.ndarray]:
    """All samples of the files, in order: ``{feature: (n, 64, 64) float32}``."""
    cols: dict[str, list] = {}
    for path in paths:
        for i, rec in enumerate(read_tfrecord(path, verify_data)):
            try:
                ex = decode_example(rec)
            except ValueError as exc:
                raise BadInput(f"malformed tf.train.Example ({exc})", where=f"{path}:record {i}") from None
            for name in MASKS:
                v = ex.get(name)
                if not isinstance(v, np.ndarray) or v.size != SIZE * SIZE:
                    raise BadInput(f"feature {name} missing or not {SIZE}x{SIZE} floats", where=f"{path}:record {i}")
            for name, v in ex.items():
                if isinstance(v, np.ndarray) and v.size == SIZE * SIZE:
                    cols.setdefault(name, []).append(v.reshape(SIZE, SIZE))
    if not cols:
        raise BadInput("no samples", where=", ".join(map(str, paths)))
    return {k: np.stack(v) for k, v in cols.items()}


def read_ndws_forecasts(path: str | Path, n: int) -> np.ndarray:
    """``(n, 64, 64)`` maps from a Parquet file with columns ``sample`` (0-based index in
    reading order) and ``probability`` (64 lists of 64 floats), validated like submissions."""
    from aegisbench.forecasters.submission import forecasts_from_table
    path = Path(path)
    if not path.is_file():
        raise BadInput("forecast file not found", where=str(path))
    t = pq.read_table(path)
    if "sample" not in t.column_names or "probability" not in t.column_names:
        raise BadInput("needs columns 'sample' and 'probability'", where=str(path))
    m = t.num_rows
    keyed = pa.table({"config": pa.array(["ndws"] * m), "initial_condition": pa.array(np.zeros(m, np.int32)),
                      "realization": pa.array(np.zeros(m, np.int32)), "t": t.column("sample"),
                      "probability": t.column("probability")})
    maps = forecasts_from_table(keyed, str(path), (SIZE, SIZE), [("ndws", 0, 0, i) for i in range(n)])
    return np.stack([maps[("ndws", 0, 0, i)] for i in range(n)])


def ndws_mapset(samples: Mapping[str, np.ndarray], probs: np.ndarray):
    """The scorer's view of NDWS: y = FireMask == 1, unknown (-1) masked, Dice(Prev, Fire) strata."""
    from aegisbench.firespread.ensemble import dice
    from aegisbench.evaluation.firespread_scoring import MapSet
    prev, fire = samples["PrevFireMask"], samples["FireMask"]
    known = (prev >= 0) & (fire >= 0)
    d = dice((prev == 1) & known, (fire == 1) & known)
    n = len(fire)
    return MapSet(p=np.asarray(probs, np.float64).reshape(n, -1), y=(fire == 1).reshape(n, -1),
                  valid=(fire >= 0).reshape(n, -1), unit=np.arange(n), dice=d)


def score_ndws(paths: Sequence[str | Path], forecast: str | np.ndarray = "persistence", out: str | Path | None = None,
               n_boot: int = 1000, threshold: float = 0.5, n_bins: int = 10) -> pa.Table:
    """Score forecasts of ``FireMask`` from the NDWS files (``"persistence"`` = ``PrevFireMask == 1``)."""
    from aegisbench.evaluation.results import results_table
    from aegisbench.evaluation.firespread_track import CALIBRATION_SCHEMA, calibration_png
    from aegisbench.evaluation.firespread_scoring import ScoreConfig, score_mapset
    samples = read_ndws(paths)
    n = len(samples["FireMask"])
    if isinstance(forecast, str) and forecast == "persistence":
        probs = (samples["PrevFireMask"] == 1).astype(np.float32)
        name = "persistence"
    elif isinstance(forecast, str):
        probs, name = read_ndws_forecasts(forecast, n), Path(forecast).stem
    else:
        probs, name = np.asarray(forecast, np.float32), "array"
        if probs.shape != (n, SIZE, SIZE) or not np.isfinite(probs).all() or probs.min() < 0 or probs.max() > 1:
            raise BadInput(f"forecast must be ({n}, {SIZE}, {SIZE}) in [0, 1]", where="forecast")
    rows, calib = score_mapset(ndws_mapset(samples, probs), ScoreConfig(threshold, n_bins, n_boot), ("ndws",))
    table = results_table([{"submission": name, "track": FIRESPREAD, "source": "next_day_wildfire_spread",
                            "config": "ndws", "corruption": "real", "family": FIRESPREAD_FAMILY, "severity": None,
                            **r} for r in rows])
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "metrics.parquet") as tmp:
            pq.write_table(table, tmp)
        cal = pa.Table.from_pylist([{"submission": name, "config": "ndws", "severity": None, "prob_pred": float(a),
                                     "prob_true": float(b), "count": int(c)} for a, b, c in
                                    zip(calib["prob_pred"], calib["prob_true"], calib["count"])], schema=CALIBRATION_SCHEMA)
        atomic_write_bytes(out / "calibration.png", calibration_png(cal, title=f"NDWS {name}: calibration"))
    return table
