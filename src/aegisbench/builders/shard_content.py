"""What a dataset shard holds, re-derived from its decoded rows (``verify``).

The builder hashes a shard's *content*, not its bytes. Each row has a content key: for an
image row its :func:`~aegisbench.builders.hfrepo.content_key`, whose ``sha256`` is the pixel
SHA-256 of the decoded image; for a fire-spread row its entry in the ``content`` list of
:class:`~aegisbench.builders.firespread.FirespreadTask` (ids, the layout digest and the hashes
of the ignition-time maps / burn counts / Z moments). A row's hash is
:func:`~aegisbench.hashing.json_sha256` of its key, and a run of rows (a shard, or a whole split
across its shards) hashes to :func:`~aegisbench.builders.manifest.rows_sha256` of its row hashes, so a
split's hash does not depend on how its rows are cut into shards. :func:`shard_facts` decodes a shard and
recomputes exactly that, never trusting a stored hash: each image is decoded as the detectors
decode it (:func:`~aegisbench.builders.source_table.decode_image`) and its pixels re-hashed.
It also reports rows that contradict themselves (a ``sha256`` column that is not the pixels'
hash, a row of another config, a schema that is not the builder's).

>>> facts = ShardFacts(rows=0, content_sha256=rows_sha256(""), images={})
>>> facts.rows, facts.ok
(0, True)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.errors import BadInput
from aegisbench.builders.manifest import rows_sha256
from aegisbench.hashing import bytes_sha256, json_sha256, pixel_sha256
from aegisbench.vocab import FIRESPREAD_STATISTIC_CONFIG, is_firespread_config

log = logging.getLogger(__name__)

#: Version of the recipe below; part of every cache key (bump when the recipe changes).
RECIPE_VERSION = 2
MAX_ROW_PROBLEMS = 5  # per shard; the rest are counted


@dataclass(frozen=True)
class ShardFacts:
    """Rows, content hash and per-image pixel hashes recomputed from a shard's rows."""

    rows: int
    content_sha256: str
    images: dict[str, str]
    problems: tuple[str, ...] = field(default=())
    row_hashes: str = ""  # every row's content hash, hex, in row order (for the split's hash)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def readable(self) -> bool:
        """False for a shard that could not be read as the builder's kind (no rows to compare)."""
        return bool(self.content_sha256)


def shard_kind(config: str) -> str:
    """``"image"``, ``"realizations"`` or ``"statistic"`` (how the builder wrote the shard)."""
    if not is_firespread_config(config):
        return "image"
    return "statistic" if config == FIRESPREAD_STATISTIC_CONFIG else "realizations"


def _schema(kind: str) -> pa.Schema:
    from aegisbench.builders.hfrepo import SCHEMA, features_schema
    if kind == "image":
        return SCHEMA
    from aegisbench.builders.firespread import FIRESPREAD_FEATURES
    return features_schema(FIRESPREAD_FEATURES[kind])


def shard_facts(data: bytes, config: str, name: str = "shard") -> ShardFacts:
    """Decode the shard ``data`` (the bytes of file ``name``, listed under ``config``) and
    recompute what the builder hashed; an unreadable shard and bad rows become problems.
    The caller hashes the same bytes, so a record of these facts names what was decoded."""
    kind = shard_kind(config)
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        want = _schema(kind)
        if not pf.schema_arrow.equals(want, check_metadata=False) or pf.schema_arrow.metadata != want.metadata:
            return ShardFacts(0, "", {}, (f"schema is not the builder's {kind} schema",))
        rows = [row for g in range(pf.num_row_groups) for row in pf.read_row_group(g).to_pylist()]
    except (OSError, pa.ArrowException) as exc:
        return ShardFacts(0, "", {}, (f"cannot read the shard ({exc})",))
    keys, images, problems = [], {}, []
    for k, row in enumerate(rows):
        try:
            if kind == "image":
                key, sha, bad = _image_key(row, config, f"{name}:{row.get('image_id')}")
                images[row["image_id"]] = sha
                problems += [f"row {k} ({row['image_id']}): {b}" for b in bad]
            else:
                key = (_statistic_key if kind == "statistic" else _realization_key)(config, row)
        except (TypeError, KeyError, ValueError, OverflowError) as exc:
            key = None
            problems.append(f"row {k}: malformed ({type(exc).__name__}: {exc})")
        keys.append(key)
    if len(problems) > MAX_ROW_PROBLEMS:
        problems[MAX_ROW_PROBLEMS:] = [f"... and {len(problems) - MAX_ROW_PROBLEMS} more row problems"]
    row_hashes = "".join(json_sha256(key) for key in keys)
    return ShardFacts(len(rows), rows_sha256(row_hashes), images, tuple(problems), row_hashes)


def _image_key(row: dict, config: str, where: str) -> tuple[list, str | None, list[str]]:
    """The row's content key with its pixel hash recomputed from the decoded image."""
    from aegisbench.builders.hfrepo import content_key
    from aegisbench.builders.source_table import decode_image
    bad = []
    try:
        sha = pixel_sha256(decode_image((row["image"] or {}).get("bytes") or b"", where))
    except BadInput:
        sha = None
        bad.append("the image cannot be decoded")
    if sha is not None and row["sha256"] != sha:
        bad.append("its sha256 column is not the hash of its decoded pixels")
    if row["condition"] != config:
        bad.append(f"condition {row['condition']!r} is not the config {config!r}")
    return content_key({**row, "sha256": sha}), sha, bad


def _layout_digest(row: dict) -> str:
    """The builder's digest of an initial condition (``firespread._ic_digest``), from the row."""
    tree = np.asarray(row["tree"], dtype=bool)
    seeds = np.asarray(row["seeds"], dtype="<i8")
    return bytes_sha256(np.packbits(tree).tobytes() + seeds.tobytes())


def _realization_key(config: str, row: dict) -> list:
    """``FirespreadTask._realization_rows`` content of one realization row."""
    tau = np.asarray(row["ignition_time"], dtype=np.int16)
    return [config, row["initial_condition"], row["realization"], row["s_level"], _layout_digest(row),
            row["n_steps"], row["truncated"], bytes_sha256(tau.astype("<i2").tobytes())]


def _statistic_key(config: str, row: dict) -> list:
    """``FirespreadTask._statistic_rows`` content of one statistic row."""
    counts = np.asarray(row["burn_counts"], dtype=np.int64)
    moments = np.asarray(row["z_mean"], dtype="<f8").tobytes() + np.asarray(row["z_var"], dtype="<f8").tobytes()
    return [config, row["initial_condition"], row["s_level"], row["n_realizations"], row["held_out_realizations"],
            _layout_digest(row), row["n_frames"] - 1, bytes_sha256(counts.astype("<i4").tobytes()),
            bytes_sha256(moments)]
