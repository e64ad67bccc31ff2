"""The checksums manifest of a dataset repo: its format, its one reader and the dataset digest.

``manifest.json`` lists every file of the repo with its SHA-256 and size, every
shard's row count, content hash and per-image pixel SHA-256, the builder source
hash, library versions and the benchmark version. The *dataset digest* is a hash of
content only (pixels, boxes, labels, ids, version) so two machines that produce the
same pixels agree on it even if an encoder writes different bytes.

:func:`load_manifest` is the one reader (every field checked, every path inside the repo:
:func:`repo_file`); :mod:`aegisbench.dataset.verify` checks a repo against it.

>>> repo_file("/data/repo", "clean/demo-00000-of-00001.parquet").as_posix()
'/data/repo/clean/demo-00000-of-00001.parquet'
>>> repo_file("/data/repo", "../x")
Traceback (most recent call last):
aegisbench.errors.BadInput: /data/repo/manifest.json: manifest path '../x' has '..', '.' or empty parts ...
"""

from __future__ import annotations

import logging
import re
from pathlib import Path, PureWindowsPath

from aegisbench.errors import BadInput
from aegisbench.hashing import bytes_sha256, json_sha256
from aegisbench.readers import read_json

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
#: 2: every split records its content hash over all its rows and the dataset digest hashes those
#: (layout-free); 1 hashed the shards' content hashes in order, so re-sharding changed the digest.
MANIFEST_FORMAT = 2
CARD = "README.md"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def rows_sha256(row_hashes: str) -> str:
    """SHA-256 of a run of rows given as their concatenated hex content hashes (each a
    :func:`json_sha256` of the row's content key). A split's hash is this over all its rows,
    so it does not depend on how the rows are cut into shards.

    >>> a, b = json_sha256(["r0"]), json_sha256(["r1"])
    >>> rows_sha256(a + b) == bytes_sha256(bytes.fromhex(a) + bytes.fromhex(b))
    True
    """
    if len(row_hashes) % 64:
        raise ValueError(f"row hashes must be 64 hex digits each, got {len(row_hashes)} characters")
    return bytes_sha256(bytes.fromhex(row_hashes))


def dataset_digest(version: str, configs: dict) -> str:
    """Content digest: version + every split's content hash (``rows_sha256`` of all its rows,
    whatever the shards), so re-sharding keeps the digest."""
    content = {cfg: {split: info["content_sha256"] for split, info in sorted(c["splits"].items())}
               for cfg, c in sorted(configs.items())}
    return json_sha256({"benchmark_version": version, "configs": content})


def repo_file(repo: str | Path, rel: object, where: str | None = None) -> Path:
    """``repo / rel`` for a manifest path that stays inside the repo: a relative POSIX path
    without ``..``, ``.`` or empty parts that goes through no symlink; else BadInput."""
    where = where or str(Path(repo) / MANIFEST)
    if not isinstance(rel, str) or not rel:
        raise BadInput(f"manifest path {rel!r} is not a non-empty string", where=where)
    if rel.startswith("/") or PureWindowsPath(rel).drive or PureWindowsPath(rel).root:
        raise BadInput(f"manifest path {rel!r} is absolute (it must stay inside the repo)", where=where)
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in rel or "\0" in rel:
        raise BadInput(f"manifest path {rel!r} has '..', '.' or empty parts (it must stay inside the repo)",
                       where=where)
    path = Path(repo)
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise BadInput(f"manifest path {rel!r} goes through a symlink ({path.name})", where=where)
    return path


def iter_shards(manifest: dict):
    """``(config, split, split_info, shard_entry)`` of every shard, in manifest order."""
    for config, cfg in manifest["configs"].items():
        for split, info in cfg["splits"].items():
            for shard in info["shards"]:
                yield config, split, info, shard


def load_manifest(repo: str | Path) -> dict:
    """The manifest of a repo, checked: a JSON object of the known format with the required
    fields of the right types and every path inside the repo (BadInput, one line, if not)."""
    path = Path(repo) / MANIFEST
    if not Path(repo).is_dir():
        raise BadInput("dataset repo folder not found", where=str(repo))
    if path.is_symlink():
        raise BadInput("manifest.json is a symlink (it must be a file of the repo)", where=str(path))
    manifest = read_json(path, "manifest.json (not an AegisBench dataset repo?)")
    if not isinstance(manifest, dict):
        raise BadInput(f"malformed manifest: a JSON object is needed, got a {type(manifest).__name__}",
                       where=str(path))
    if manifest.get("format") == 1:
        raise BadInput("manifest format 1 (a dataset digest over the shard layout) is from an older AegisBench: "
                       "rebuild the repo with `aegisbench build`", where=str(path))
    if manifest.get("format") != MANIFEST_FORMAT:
        raise BadInput(f"unsupported manifest format {manifest.get('format')!r}", where=str(path))
    _check_fields(manifest, str(path))
    for rel in manifest["files"]:
        repo_file(repo, rel, str(path))
    seen: set[str] = set()
    for config, split, _, shard in iter_shards(manifest):
        if shard["path"] not in manifest["files"]:
            raise BadInput(f"shard path {shard['path']!r} of {config}/{split} is not listed in files",
                           where=str(path))
        if shard["path"] in seen:
            raise BadInput(f"shard path {shard['path']!r} is listed twice", where=str(path))
        seen.add(shard["path"])
    return manifest


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_hex(v: object) -> bool:
    return isinstance(v, str) and _HEX64.fullmatch(v) is not None


def _need(ok: bool, name: str, what: str, where: str) -> None:
    if not ok:
        raise BadInput(f"malformed manifest: {name} {what}", where=where)


def _check_fields(m: dict, where: str) -> None:
    """Types of the fields that verify, the evaluator and the card read."""
    for key, test, what in (("benchmark_version", lambda v: isinstance(v, str) and v, "a non-empty string"),
                            ("dataset_digest", _is_hex, "64 lowercase hex digits"),
                            ("files", lambda v: isinstance(v, dict), "an object"),
                            ("configs", lambda v: isinstance(v, dict), "an object")):
        _need(key in m, key, "is missing", where)
        _need(bool(test(m[key])), key, f"must be {what}", where)
    _need(isinstance(m.get("sources", {}), dict) and all(isinstance(s, dict) for s in m.get("sources", {}).values()),
          "sources", "must be an object of objects", where)
    withheld = m.get("withheld_labels", [])
    _need(isinstance(withheld, list) and all(isinstance(s, str) for s in withheld), "withheld_labels",
          "must be a list of split names", where)
    for rel, f in m["files"].items():
        _need(isinstance(f, dict) and _is_hex(f.get("sha256")) and _is_count(f.get("bytes")), f"files[{rel!r}]",
              "must have sha256 (64 hex digits) and bytes (a count)", where)
    for config, cfg in m["configs"].items():
        name = f"configs[{config!r}]"
        _need(isinstance(cfg, dict) and isinstance(cfg.get("splits"), dict), name, "must have splits (an object)",
              where)
        _need(isinstance(cfg.get("meta") or {}, dict), f"{name}.meta", "must be an object", where)
        for split, info in cfg["splits"].items():
            sname = f"{name}.splits[{split!r}]"
            _need(isinstance(info, dict) and _is_count(info.get("rows")) and isinstance(info.get("source"), str)
                  and isinstance(info.get("role"), str) and isinstance(info.get("shards"), list)
                  and _is_hex(info.get("content_sha256")), sname,
                  "must have rows (a count), source, role (strings), shards (a list) and content_sha256", where)
            for i, shard in enumerate(info["shards"]):
                _check_shard(shard, f"{sname}.shards[{i}]", where)


def _check_shard(s: object, name: str, where: str) -> None:
    ok = (isinstance(s, dict) and isinstance(s.get("path"), str) and _is_hex(s.get("sha256"))
          and _is_count(s.get("bytes")) and _is_count(s.get("rows")) and _is_hex(s.get("content_sha256"))
          and isinstance(s.get("images"), dict)
          and all(isinstance(k, str) and _is_hex(v) for k, v in s["images"].items()))
    _need(ok, name, "must have path, sha256, bytes, rows, content_sha256 and images (image id -> 64 hex digits)",
          where)
