"""``aegisbench publish``: upload a verified dataset repo to the Hugging Face Hub as a
pinnable release.

Only the files the manifest lists (card, shards) plus ``manifest.json`` itself are
uploaded, and only after the repo passes verify; anything else in the folder stays
local. ``dry_run`` returns exactly that list without touching the network. The uploaded
card is re-rendered with the Hub id and the release tag (its code sample reads
``load_dataset("ORG/NAME", "low_light_s3", revision="v<benchmark_version>")``) and the
uploaded manifest lists that card: the Hub copy passes verify on its own, and the local
repo is left as it is (the dataset digest covers the shards, not the card). The commit
is tagged ``v<benchmark_version>``; a tag that already exists is refused before anything
is uploaded (a release never moves), and so is a client without credentials.

>>> check_repo_id("aegis-org/aegisbench")
'aegis-org/aegisbench'
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from aegisbench.dataset.card import card_inputs, render_card
from aegisbench.dataset.manifest import CARD, MANIFEST, load_manifest
from aegisbench.dataset.verify import verify_repo
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
    """The exact upload list of a dataset repo that passes verify (else VerificationError); a
    private label repo is never uploaded (BadInput)."""
    from aegisbench.dataset.labels import is_label_repo
    dataset = Path(dataset)
    if is_label_repo(dataset):
        raise BadInput("refusing to publish a private label repo: it holds the withheld test labels, which only "
                       "the scoring side may hold", where=str(dataset))
    report = verify_repo(dataset, ignore_hidden=True)
    if not report.ok:
        lines = report.lines()
        raise VerificationError(f"refusing to publish: dataset repo fails verify ({len(lines)} problem(s); "
                                f"first: {lines[0]})", where=str(dataset))
    check_attribution(dataset)
    manifest = load_manifest(dataset)
    items = [UploadItem(rel, int(info["bytes"]) if "bytes" in info else (dataset / rel).stat().st_size,
                        info["sha256"]) for rel, info in manifest["files"].items()]
    mpath = dataset / MANIFEST
    items.append(UploadItem(MANIFEST, mpath.stat().st_size, file_sha256(mpath)))
    return sorted(items, key=lambda i: i.path)


def check_attribution(dataset: Path) -> None:
    """Refuse a repo whose card does not say how each source may be used and cited: a licence
    that is ``unknown`` or not an SPDX id, or no BibTeX citation (BadInput naming the source)."""
    from aegisbench.attribution import check_citation, spdx_license
    inputs = card_inputs((dataset / CARD).read_text(encoding="utf-8"))
    if inputs is None:
        raise VerificationError("the card has no inputs comment: rebuild the repo with this version", where=str(dataset))
    for source in inputs[1]:
        where = f"{dataset / CARD}: source {source.get('name')!r}"
        spdx_license(source.get("license"), where=f"{where} license", allow_unknown=False)
        if not check_citation(source.get("citation"), where=f"{where} citation"):
            raise BadInput("has no citation: give the source's BibTeX (params.yaml sources.<name>.citation or build "
                           "--citation) and rebuild; nothing was uploaded", where=f"{where} citation")


def release_tag(manifest: dict) -> str:
    """The Hub tag of a release: ``v<benchmark_version>``."""
    return f"v{manifest['benchmark_version']}"


def hub_files(dataset: str | Path, repo_id: str) -> tuple[dict[str, bytes], dict]:
    """The card and manifest as they go to the Hub (card with the Hub id and release tag)
    and the manifest they belong to; the local files are not touched."""
    dataset = Path(dataset)
    manifest = load_manifest(dataset)
    inputs = card_inputs((dataset / CARD).read_text(encoding="utf-8"))
    if inputs is None:
        raise VerificationError("the card has no inputs comment: rebuild the repo with this version", where=str(dataset))
    descriptions, sources, sizes, _ = inputs
    card = render_card(manifest, descriptions, sources, sizes, {"repo_id": repo_id, "revision": release_tag(manifest)})
    data = card.encode("utf-8")
    hub = json.loads(json.dumps(manifest))
    hub["files"][CARD] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    return {CARD: data, MANIFEST: (json.dumps(hub, indent=1, sort_keys=True) + "\n").encode("utf-8")}, hub


def _authenticated(api) -> None:
    """Refuse a client without working credentials before anything is sent."""
    try:
        api.whoami()
    except Exception as exc:  # huggingface_hub: LocalTokenNotFoundError (no token) or an HTTP 401
        raise BadInput(f"no usable Hugging Face credentials ({type(exc).__name__}): run `hf auth login` or set "
                       "HF_TOKEN (and be online); nothing was uploaded", where="publish") from None


def _tags(api, repo_id: str) -> set[str]:
    refs = api.list_repo_refs(repo_id, repo_type="dataset")
    return {t.name for t in getattr(refs, "tags", None) or []}


def publish(repo_id: str, dataset: str | Path, dry_run: bool = False, private: bool = False,
            api=None) -> list[UploadItem]:
    """Verify, then create the Hub dataset repo, upload the plan in one commit and tag it
    ``v<benchmark_version>`` (unless ``dry_run``); returns the files as uploaded."""
    from huggingface_hub import CommitOperationAdd

    repo_id = check_repo_id(repo_id)
    plan = publish_plan(dataset)
    if dry_run:
        return plan
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    _authenticated(api)
    dataset = Path(dataset)
    files, manifest = hub_files(dataset, repo_id)
    tag = release_tag(manifest)
    api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private)
    if tag in _tags(api, repo_id):
        raise BadInput(f"datasets/{repo_id} already has the release tag {tag}: a release never moves; bump "
                       "benchmark_version in params.yaml for new data", where="--repo-id")
    ops = [CommitOperationAdd(path_in_repo=i.path, path_or_fileobj=files[i.path] if i.path in files
                              else str(dataset / i.path)) for i in plan]
    commit = api.create_commit(repo_id=repo_id, repo_type="dataset", operations=ops,
                               commit_message=f"AegisBench {manifest['benchmark_version']} "
                                              f"(dataset digest {manifest['dataset_digest'][:12]})")
    api.create_tag(repo_id, tag=tag, revision=commit.oid, repo_type="dataset",
                   tag_message=f"AegisBench {manifest['benchmark_version']}, dataset digest {manifest['dataset_digest']}")
    log.info("published %d files to datasets/%s, tagged %s", len(plan), repo_id, tag)
    return [UploadItem(i.path, len(files[i.path]), hashlib.sha256(files[i.path]).hexdigest()) if i.path in files
            else i for i in plan]
