"""The checksums manifest of a dataset repo, and ``verify``.

``manifest.json`` lists every file of the repo with its SHA-256 and size, every
shard's row count, content hash and per-image pixel SHA-256, the builder source
hash, library versions and the benchmark version. The *dataset digest* is a hash of
content only (pixels, boxes, labels, ids, version) so two machines that produce the
same pixels agree on it even if an encoder writes different bytes.

``verify`` trusts none of the declared hashes: it re-hashes every file, decodes every
shard and recomputes its content hash as the builder does
(:mod:`aegisbench.builders.shard_content`), recomputes the dataset digest from those,
and checks the card (:func:`aegisbench.builders.card.card_problems`). Every path of the
manifest must stay inside the repo (:func:`repo_file`).

>>> repo_file("/data/repo", "clean/demo-00000-of-00001.parquet").as_posix()
'/data/repo/clean/demo-00000-of-00001.parquet'
>>> repo_file("/data/repo", "../x")
Traceback (most recent call last):
aegisbench.errors.BadInput: /data/repo/manifest.json: manifest path '../x' has '..', '.' or empty parts ...
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath

from aegisbench.errors import BadInput, VerificationError
from aegisbench.hashing import bytes_sha256, file_sha256, json_sha256
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


@dataclass
class VerifyReport:
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    altered: list[str] = field(default_factory=list)
    digest_mismatch: bool = False  # the declared split content hashes do not give the declared digest
    content: list[str] = field(default_factory=list)  # "<path>: <what differs>" (recomputed from rows)
    manifest: dict | None = field(default=None, repr=False, compare=False)  # the manifest that was checked

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.altered or self.digest_mismatch or self.content)

    def lines(self) -> list[str]:
        out = [f"missing: {p}" for p in self.missing]
        out += [f"extra: {p}" for p in self.extra]
        out += [f"altered: {p}" for p in self.altered]
        out += [f"content: {p}" for p in self.content]
        if self.digest_mismatch:
            out.append("altered: manifest.json (dataset digest does not match its splits' content hashes)")
        return out


def _present(repo: Path, ignore_hidden: bool) -> set[str]:
    """Every non-folder entry under ``repo`` (symlinks included, never followed) but the manifest."""
    out = set()
    for top, dirs, files in os.walk(repo):
        rel_top = Path(top).relative_to(repo)
        if ignore_hidden:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            files = [f for f in files if not f.startswith(".")]
        links = [d for d in dirs if (Path(top) / d).is_symlink()]
        out |= {(rel_top / name).as_posix() for name in [*files, *links]}
    out.discard(MANIFEST)
    return out


def _check_files(repo: Path, manifest: dict, report: VerifyReport, ignore_hidden: bool) -> dict[str, str]:
    """Missing / extra / altered files; returns the SHA-256 of every intact listed file."""
    listed: dict[str, dict] = manifest["files"]
    present = _present(repo, ignore_hidden)
    intact = {}
    for rel in sorted(listed):
        if rel not in present:
            report.missing.append(rel)
            continue
        path = repo_file(repo, rel)
        if not path.is_file():
            report.altered.append(rel)
            continue
        sha = file_sha256(path)
        if sha != listed[rel]["sha256"]:
            report.altered.append(rel)
        elif path.stat().st_size != listed[rel]["bytes"]:
            report.content.append(f"{rel}: {path.stat().st_size} bytes, the manifest says {listed[rel]['bytes']}")
        else:
            intact[rel] = sha
    report.extra = sorted(present - set(listed))
    return intact


def verify_repo(repo: str | Path, ignore_hidden: bool = False, cache: bool = False) -> VerifyReport:
    """Re-hash every file, recompute every shard's content from its decoded rows, the dataset
    digest from those and the card from the manifest; report what differs from the manifest.
    ``cache``: reuse / record shard facts by file SHA-256 (:mod:`~aegisbench.builders.verify_cache`)."""
    from aegisbench.builders.verify_content import check_card, check_content

    t0 = time.perf_counter()
    repo = Path(repo)
    manifest = load_manifest(repo)
    report = VerifyReport(manifest=manifest)
    intact = _check_files(repo, manifest, report, ignore_hidden)
    if dataset_digest(manifest["benchmark_version"], manifest["configs"]) != manifest["dataset_digest"]:
        report.digest_mismatch = True
    decoded, recomputed = check_content(repo, manifest, intact, report, cache)
    if recomputed is not None and recomputed != manifest["dataset_digest"]:
        report.content.append(f"{MANIFEST}: the dataset digest recomputed from the shards' rows is "
                              f"{recomputed}, the manifest says {manifest['dataset_digest']}")
    check_card(repo, manifest, intact, report, cache)
    log.debug("verified %s in %.2f s: %d shards decoded, %d problems", repo, time.perf_counter() - t0, decoded,
             len(report.lines()))
    return report


def require_verified(repo: str | Path) -> dict:
    """Load the manifest of a repo that passes verify, else raise VerificationError. Shards
    whose bytes passed the content check before are not decoded again (:mod:`verify_cache`)."""
    report = verify_repo(repo, cache=True)
    if not report.ok:
        first = report.lines()[0]
        raise VerificationError(f"dataset repo fails verify ({len(report.lines())} problem(s); "
                                f"first: {first})", where=str(repo))
    return report.manifest
