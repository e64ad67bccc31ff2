"""``verify``: a built repo checked against its manifest, trusting none of the declared hashes.

:func:`verify_repo` re-hashes every file, decodes every shard and recomputes its content hash as
the builder does (:mod:`aegisbench.dataset.shard_content`), recomputes the dataset digest from
those and re-renders the card (:func:`aegisbench.dataset.card.card_problems`).
:func:`check_content` compares every intact shard's recomputed rows, content hash and per-image
pixel hashes with its manifest entry, and each split's content hash over all its rows with the
split's entry; :func:`check_card` re-renders the card. Problems go to ``report.content`` as
``"<path>: <what differs>"``. :func:`require_verified` is what every reader calls (with the
records of :mod:`~aegisbench.dataset.verify_cache`).

>>> _images_diff({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"})
'per-image pixel hashes differ from the manifest (1 differ, 0 only in the shard, 1 only in the manifest)'
>>> VerifyReport().ok, VerifyReport(missing=["x"]).lines()
(True, ['missing: x'])
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aegisbench.dataset.builder_code import builder_source_hash
from aegisbench.dataset.manifest import CARD, MANIFEST, dataset_digest, iter_shards, load_manifest, repo_file, rows_sha256
from aegisbench.dataset.shard_content import ShardFacts, shard_facts
from aegisbench.dataset.verify_cache import cached_facts, card_verified, store_card, store_facts
from aegisbench.errors import VerificationError
from aegisbench.hashing import bytes_sha256, file_sha256

log = logging.getLogger(__name__)

MAX_THREADS = 8  # shards decoded at once
CHANGED = "the file changed while it was verified"


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


def _bytes_of(repo: Path, rel: str, sha: str) -> bytes | None:
    """The file's bytes if they still hash to ``sha`` (what is decoded is what was hashed)."""
    data = repo_file(repo, rel).read_bytes()
    return data if bytes_sha256(data) == sha else None


def _images_diff(got: dict[str, str], want: dict[str, str]) -> str:
    differ = sum(1 for k in got.keys() & want.keys() if got[k] != want[k])
    return (f"per-image pixel hashes differ from the manifest ({differ} differ, {len(got.keys() - want.keys())} "
            f"only in the shard, {len(want.keys() - got.keys())} only in the manifest)")


def _entry_diff(facts: ShardFacts, shard: dict) -> list[str]:
    bad = []
    if facts.rows != shard["rows"]:
        bad.append(f"{facts.rows} rows, the manifest says {shard['rows']}")
    if facts.content_sha256 != shard["content_sha256"]:
        bad.append("the content hash recomputed from its rows is not the manifest's content_sha256")
    if facts.images != shard["images"]:
        bad.append(_images_diff(facts.images, shard["images"]))
    return bad


def _facts(repo: Path, todo: list[tuple[str, dict, str]], cache: bool) -> list[tuple[ShardFacts, bool]]:
    """Facts of every ``(config, shard, file SHA-256)`` (from the cache when allowed, else
    decoded on a few threads: decoding and hashing release the GIL) and whether decoded."""
    def one(item: tuple[str, dict, str]) -> tuple[ShardFacts, bool]:
        config, shard, sha = item
        facts = cached_facts(sha, config) if cache else None
        if facts is not None:
            return facts, False
        data = _bytes_of(repo, shard["path"], sha)
        if data is None:
            return ShardFacts(0, "", {}, (CHANGED,)), True
        return shard_facts(data, config, shard["path"]), True

    workers = min(len(todo), os.cpu_count() or 1, MAX_THREADS)
    if workers <= 1:
        return [one(t) for t in todo]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, todo))


def _compare(manifest: dict, config: str, shard: dict, sha: str, facts: ShardFacts, fresh: bool,
             report: VerifyReport, cache: bool) -> None:
    """Report where one shard's recomputed facts differ from its entry; record a match."""
    rel = shard["path"]
    listed = manifest["files"][rel]
    bad = []
    if (shard["sha256"], shard["bytes"]) != (listed["sha256"], listed["bytes"]):
        bad.append("the shard entry's sha256 / bytes are not those of its files entry")
    bad += [*facts.problems, *(_entry_diff(facts, shard) if facts.readable else [])]
    report.content += [f"{rel}: {b}" for b in bad]
    if cache and fresh and not bad:
        store_facts(sha, config, facts)


def check_content(repo: Path, manifest: dict, intact: dict[str, str], report: VerifyReport,
                  cache: bool) -> tuple[int, str | None]:
    """Check every intact shard (``intact``: path -> SHA-256 of its verified bytes) and every
    split whose shards are all intact (its content hash over all its rows); returns the number
    decoded and the digest recomputed from the rows (None when a shard is missing or altered:
    that is reported already)."""
    todo = [(config, shard, intact[shard["path"]]) for config, _, _, shard in iter_shards(manifest)
            if shard["path"] in intact]
    results = iter(_facts(repo, todo, cache))  # in manifest order, as the loop below walks it
    recomputed: dict = {}
    decoded = 0
    for config, cfg in manifest["configs"].items():
        splits = recomputed.setdefault(config, {"splits": {}})["splits"]
        for split, info in cfg["splits"].items():
            total = sum(s["rows"] for s in info["shards"])
            if total != info["rows"]:
                report.content.append(f"{config}/{split}: rows {info['rows']}, its shards hold {total}")
            hashes = []
            for shard in info["shards"]:
                if shard["path"] in intact:
                    facts, fresh = next(results)
                    decoded += fresh
                    _compare(manifest, config, shard, intact[shard["path"]], facts, fresh, report, cache)
                    hashes.append(facts.row_hashes)
            if len(hashes) == len(info["shards"]):
                splits[split] = {"content_sha256": rows_sha256("".join(hashes))}
                if splits[split]["content_sha256"] != info["content_sha256"]:
                    report.content.append(f"{config}/{split}: the content hash recomputed from its rows is not "
                                          "the manifest's split content_sha256")
    complete = len(todo) == sum(1 for _ in iter_shards(manifest))
    return decoded, (dataset_digest(manifest["benchmark_version"], recomputed) if complete else None)


def check_card(repo: Path, manifest: dict, intact: dict[str, str], report: VerifyReport, cache: bool) -> None:
    """The card must be the one this builder renders from the manifest (exactly, when the
    manifest's ``builder_source_hash`` is this code's; else its declared configs and digest)."""
    from aegisbench.dataset.card import card_problems  # the card needs ``datasets``: only when a card is checked

    if CARD not in manifest["files"]:
        report.content.append(f"{CARD}: the dataset card is not listed in the manifest")
        return
    sha = intact.get(CARD)
    if sha is None or (cache and card_verified(sha, manifest)):
        return  # missing / altered (reported), or this card passed against this manifest before
    data = _bytes_of(repo, CARD, sha)
    try:
        text = data.decode("utf-8") if data is not None else None
    except UnicodeDecodeError:
        text = None
    if text is None:
        report.content.append(f"{CARD}: {CHANGED if data is None else 'the card is not UTF-8 text'}")
        return
    exact = manifest.get("builder_source_hash") == builder_source_hash()
    bad = card_problems(text, manifest, exact=exact)
    report.content += [f"{CARD}: {b}" for b in bad]
    if cache and not bad:  # structural passes too: an edited builder_source_hash forces that check anyway
        store_card(sha, manifest)


def verify_repo(repo: str | Path, ignore_hidden: bool = False, cache: bool = False) -> VerifyReport:
    """Re-hash every file, recompute every shard's content from its decoded rows, the dataset
    digest from those and the card from the manifest; report what differs from the manifest.
    ``cache``: reuse / record shard facts by file SHA-256 (:mod:`~aegisbench.dataset.verify_cache`)."""
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
