"""The checksums manifest of a dataset repo, and ``verify``.

``manifest.json`` lists every file of the repo with its SHA-256 and size, every
shard's row count, content hash and per-image pixel SHA-256, the builder source
hash, library versions and the benchmark version. The *dataset digest* is a hash of
content only (pixels, boxes, labels, ids, version) so two machines that produce the
same pixels agree on it even if an encoder writes different bytes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from aegisbench.errors import BadInput, VerificationError
from aegisbench.hashing import file_sha256, json_sha256
from aegisbench.readers import read_json

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


def dataset_digest(version: str, configs: dict) -> str:
    """Content digest: version + the content hash of every shard, in order."""
    content = {
        cfg: {split: [s["content_sha256"] for s in info["shards"]]
              for split, info in sorted(c["splits"].items())}
        for cfg, c in sorted(configs.items())
    }
    return json_sha256({"benchmark_version": version, "configs": content})


def load_manifest(repo: str | Path) -> dict:
    path = Path(repo) / MANIFEST
    if not Path(repo).is_dir():
        raise BadInput("dataset repo folder not found", where=str(repo))
    manifest = read_json(path, "manifest.json (not an AegisBench dataset repo?)")
    if manifest.get("format") != MANIFEST_FORMAT:
        raise BadInput(f"unsupported manifest format {manifest.get('format')!r}", where=str(path))
    return manifest


@dataclass
class VerifyReport:
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    altered: list[str] = field(default_factory=list)
    digest_mismatch: bool = False

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.altered or self.digest_mismatch)

    def lines(self) -> list[str]:
        out = [f"missing: {p}" for p in self.missing]
        out += [f"extra: {p}" for p in self.extra]
        out += [f"altered: {p}" for p in self.altered]
        if self.digest_mismatch:
            out.append("altered: manifest.json (dataset digest does not match its shards)")
        return out


def verify_repo(repo: str | Path, ignore_hidden: bool = False) -> VerifyReport:
    """Re-hash every file and compare with the manifest (missing/extra/altered)."""
    repo = Path(repo)
    manifest = load_manifest(repo)
    listed: dict[str, dict] = manifest["files"]
    report = VerifyReport()
    present = {p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()}
    present.discard(MANIFEST)
    if ignore_hidden:
        present = {p for p in present if not any(part.startswith(".") for part in p.split("/"))}
    for rel in sorted(listed):
        if rel not in present:
            report.missing.append(rel)
        elif file_sha256(repo / rel) != listed[rel]["sha256"]:
            report.altered.append(rel)
    report.extra = sorted(present - set(listed))
    if dataset_digest(manifest["benchmark_version"], manifest["configs"]) != manifest["dataset_digest"]:
        report.digest_mismatch = True
    return report


def require_verified(repo: str | Path) -> dict:
    """Load the manifest of a repo that passes verify, else raise VerificationError."""
    report = verify_repo(repo)
    if not report.ok:
        first = report.lines()[0]
        raise VerificationError(f"dataset repo fails verify ({len(report.lines())} problem(s); "
                                f"first: {first})", where=str(repo))
    return load_manifest(repo)
