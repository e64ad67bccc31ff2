"""What a dataset shard holds, re-derived from its decoded rows (``verify``).

The builder hashes a shard's *content*, not its bytes. Each row has a content key, declared by
the config's family (:mod:`aegisbench.dataset.families`): for an image row its
:func:`~aegisbench.dataset.schema.content_key`, whose ``sha256`` is the pixel SHA-256 of the
decoded image; for a fire-spread row the ids, the layout digest and the hashes of the
ignition-time map / burn counts / Z moments. A row's hash is
:func:`~aegisbench.hashing.json_sha256` of its key, and a run of rows (a shard, or a whole split
across its shards) hashes to :func:`~aegisbench.dataset.manifest.rows_sha256` of its row hashes, so a
split's hash does not depend on how its rows are cut into shards. :func:`shard_facts` decodes a shard and
recomputes exactly that, never trusting a stored hash: each image is decoded as the detectors
decode it (:func:`~aegisbench.dataset.images.decode_image`) and its pixels re-hashed.
It also reports rows that contradict themselves (a ``sha256`` column that is not the pixels'
hash, a row of another config, a schema that is not the builder's).

>>> facts = ShardFacts(rows=0, content_sha256=rows_sha256(""), images={})
>>> facts.rows, facts.ok
(0, True)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.dataset.manifest import rows_sha256
from aegisbench.hashing import json_sha256

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


def shard_facts(data: bytes, config: str, name: str = "shard") -> ShardFacts:
    """Decode the shard ``data`` (the bytes of file ``name``, listed under ``config``) and
    recompute what the builder hashed; an unreadable shard and bad rows become problems.
    The caller hashes the same bytes, so a record of these facts names what was decoded.
    The config's family (:func:`~aegisbench.dataset.families.family_of`) declares the rows'
    schema and recomputes each row's content key."""
    from aegisbench.dataset.families import family_of, row_kind, schema_of  # ``datasets``: only when decoding
    try:
        family, kind, want = family_of(config), row_kind(config), schema_of(config)
    except ValueError as exc:
        return ShardFacts(0, "", {}, (str(exc),))
    try:
        pf = pq.ParquetFile(pa.BufferReader(data))
        if not pf.schema_arrow.equals(want, check_metadata=False) or pf.schema_arrow.metadata != want.metadata:
            return ShardFacts(0, "", {}, (f"schema is not the builder's {kind} schema",))
        rows = [row for g in range(pf.num_row_groups) for row in pf.read_row_group(g).to_pylist()]
    except (OSError, pa.ArrowException) as exc:
        return ShardFacts(0, "", {}, (f"cannot read the shard ({exc})",))
    keys, images, problems = [], {}, []
    for k, row in enumerate(rows):
        try:
            key, pixels, bad = family.row_key(kind, config, row, f"{name}:{row.get('image_id')}")
            images.update(pixels)
            problems += [f"row {k} {b}" for b in bad]
        except (TypeError, KeyError, ValueError, OverflowError) as exc:
            key = None
            problems.append(f"row {k}: malformed ({type(exc).__name__}: {exc})")
        keys.append(key)
    if len(problems) > MAX_ROW_PROBLEMS:
        problems[MAX_ROW_PROBLEMS:] = [f"... and {len(problems) - MAX_ROW_PROBLEMS} more row problems"]
    row_hashes = "".join(json_sha256(key) for key in keys)
    return ShardFacts(len(rows), rows_sha256(row_hashes), images, tuple(problems), row_hashes)
