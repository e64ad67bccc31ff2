"""``aegisbench publish``: upload a verified dataset repo to the Hugging Face Hub.

Only the files the manifest lists (card, shards) plus ``manifest.json`` itself are
uploaded, and only after the repo passes verify; anything else in the folder stays
local. ``dry_run`` returns exactly that list without touching the network.

>>> check_repo_id("aegis-org/aegisbench")
'aegis-org/aegisbench'
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from aegisbench.builders.manifest import MANIFEST, load_manifest, verify_repo
from aegisbench.errors import BadInput, VerificationError
from aegisbench.hashing import file_sha256

log = logging.getLogger(__name__)
_REPO_ID = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?/"
                      r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class UploadItem:
    """One file that goes to the Hub: path inside the repo, size and SHA-256."""

    path: str
    bytes: int
    sha256: str


def check_repo_id(repo_id: str) -> str:
    """``ORG/NAME`` as the Hub spells it, else BadInput."""
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id) or ".." in repo_id or "--" in repo_id:
        raise BadInput(f"{repo_id!r} is not a Hub repo id of the form ORG/NAME", where="--repo-id")
    return repo_id


def publish_plan(dataset: str | Path) -> list[UploadItem]:
    """The exact upload list of a dataset repo that passes verify (else VerificationError)."""
    dataset = Path(dataset)
    report = verify_repo(dataset, ignore_hidden=True)
    if not report.ok:
        lines = report.lines()
        raise VerificationError(f"refusing to publish: dataset repo fails verify ({len(lines)} problem(s); "
                                f"first: {lines[0]})", where=str(dataset))
    manifest = load_manifest(dataset)
    items = [UploadItem(rel, int(info["bytes"]) if "bytes" in info else (dataset / rel).stat().st_size,
                        info["sha256"]) for rel, info in manifest["files"].items()]
    mpath = dataset / MANIFEST
    items.append(UploadItem(MANIFEST, mpath.stat().st_size, file_sha256(mpath)))
    return sorted(items, key=lambda i: i.path)


def _literal_pattern(path: str) -> str:
    """An fnmatch pattern that matches exactly ``path``."""
    return re.sub(r"([\[\]*?])", r"[\1]", path)


def publish(repo_id: str, dataset: str | Path, dry_run: bool = False, private: bool = False,
            api=None) -> list[UploadItem]:
    """Verify, then create the Hub dataset repo and upload the plan (unless ``dry_run``)."""
    repo_id = check_repo_id(repo_id)
    plan = publish_plan(dataset)
    if dry_run:
        return plan
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    manifest = load_manifest(dataset)
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    api.upload_folder(folder_path=str(dataset), repo_id=repo_id, repo_type="dataset",
                      allow_patterns=[_literal_pattern(i.path) for i in plan],
                      commit_message=f"AegisBench {manifest['benchmark_version']} "
                                     f"(dataset digest {manifest['dataset_digest'][:12]})")
    log.info("published %d files to datasets/%s", len(plan), repo_id)
    return plan
