"""Records of earlier content verifications, so consumers need not re-decode every shard.

:func:`~aegisbench.dataset.manifest.require_verified` (evaluate, detect, WARP) re-hashes
every file of a repo, then looks a shard's facts (rows, content hash, pixel hashes) up
here by the SHA-256 of its *bytes* (plus the config it is listed under and the recipe version);
a record holds its rows' content hashes too, from which the split's hash is recomputed.
Bytes -> content is a pure function, so a record can never let a changed file pass: a
changed file has another SHA-256 and misses. A record is written only after the shard was
decoded and matched its manifest entry. The card check is recorded the same way, keyed by
the card's bytes and the loaded manifest.

Records live outside the repo: ``$AEGISBENCH_CACHE``, else ``$XDG_CACHE_HOME/aegisbench``,
else ``~/.cache/aegisbench``, one small JSON file per record under ``verified/``, each
written atomically (concurrent writers write the same bytes; a lost or unreadable record
only costs a re-decode). ``aegisbench verify`` never reads or writes them.

>>> import os, tempfile
>>> from unittest import mock
>>> facts = ShardFacts(rows=1, content_sha256="c" * 64, images={"a": "d" * 64}, row_hashes="e" * 64)
>>> with mock.patch.dict(os.environ, {"AEGISBENCH_CACHE": tempfile.mkdtemp()}):
...     store_facts("f" * 64, "clean", facts)
...     cached_facts("f" * 64, "clean") == facts, cached_facts("e" * 64, "clean")
(True, None)
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from aegisbench.atomic import atomic_write_text
from aegisbench.hashing import json_sha256
from aegisbench.dataset.shard_content import RECIPE_VERSION, ShardFacts

log = logging.getLogger(__name__)


def cache_root() -> Path:
    """``$AEGISBENCH_CACHE``, else ``$XDG_CACHE_HOME/aegisbench``, else ``~/.cache/aegisbench``."""
    if os.environ.get("AEGISBENCH_CACHE"):
        return Path(os.environ["AEGISBENCH_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "aegisbench"


def _record(key: list) -> Path:
    digest = json_sha256(key)
    return cache_root() / "verified" / digest[:2] / f"{digest}.json"


def _read(key: list) -> dict | None:
    try:
        rec = json.loads(_record(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and rec.get("key") == key else None


def _write(key: list, value: dict) -> None:
    try:
        atomic_write_text(_record(key), json.dumps({"key": key, **value}, sort_keys=True))
    except OSError as exc:  # read-only or full cache: the next call decodes again
        log.debug("cannot record a verification in %s: %s", cache_root(), exc)


def _shard_key(file_sha256: str, config: str) -> list:
    return ["shard", RECIPE_VERSION, file_sha256, config]


def cached_facts(file_sha256: str, config: str) -> ShardFacts | None:
    """The recorded facts of a shard with these bytes listed under ``config``, if any."""
    rec = _read(_shard_key(file_sha256, config))
    if rec is None:
        return None
    rows, content, images, hashes = (rec.get(k) for k in ("rows", "content_sha256", "images", "row_hashes"))
    if not (isinstance(rows, int) and isinstance(content, str) and isinstance(images, dict)
            and isinstance(hashes, str) and len(hashes) == 64 * rows):
        return None
    return ShardFacts(rows, content, images, row_hashes=hashes)


def store_facts(file_sha256: str, config: str, facts: ShardFacts) -> None:
    """Record the facts of a shard that was decoded and matched its manifest entry."""
    _write(_shard_key(file_sha256, config),
           {"rows": facts.rows, "content_sha256": facts.content_sha256, "images": facts.images,
            "row_hashes": facts.row_hashes})


def _card_key(card_sha256: str, manifest: dict) -> list:
    return ["card", RECIPE_VERSION, card_sha256, json_sha256(manifest)]


def card_verified(card_sha256: str, manifest: dict) -> bool:
    """Whether this card passed the card check against this very manifest before."""
    return _read(_card_key(card_sha256, manifest)) is not None


def store_card(card_sha256: str, manifest: dict) -> None:
    _write(_card_key(card_sha256, manifest), {"ok": True})
