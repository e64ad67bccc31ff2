"""Attestations: the runs this project made itself, which no copied file can claim.

``detect --verified`` (and ``warp-detect``, ``firespread-baselines`` and the pipeline's reference
stages) record, after writing a submission folder, that this project ran that model (weights
SHA-256) on that dataset (digest) and wrote exactly that folder (its id and the SHA-256 of every
file in it, as the validator records them). The record is HMAC-SHA256 over those fields with the
project's private key (:func:`aegisbench.private.attestation_key`) and lives in
``private/attestations/<id>.json``: never in git, in DVC or in the submission, so copying a
submission copies no attestation, and none can be written without the key.

The leaderboard calls a row ``verified`` only when its results' provenance matches a valid
attestation (same id, same files, same dataset, same weights); every other row is
``self-reported``, with the reason when an attestation exists but does not hold; rows imported from
a paper are ``published``.

>>> import tempfile, os, pathlib
>>> os.environ["AEGISBENCH_PRIVATE"] = tempfile.mkdtemp()
>>> sub = pathlib.Path(tempfile.mkdtemp()) / "my_run"; sub.mkdir(); _ = (sub / "a.txt").write_text("x")
>>> _ = attest(sub, dataset_digest="d" * 64, weights_sha256="e" * 64, by="test")
>>> prov = {"submission": "my_run", "submission_files": folder_files(sub), "dataset_digest": "d" * 64,
...         "weights_sha256": "e" * 64}
>>> row_status(prov)
('verified', None)
>>> row_status({**prov, "submission_files": {"a.txt": "0" * 64}})
('self-reported', 'the attestation of my_run was made for other files than these results were scored from')
>>> del os.environ["AEGISBENCH_PRIVATE"]
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.hashing import canonical_json, file_sha256, json_sha256
from aegisbench.private import attestation_key, private_dir

FIELDS = ("submission", "content_sha256", "dataset_digest", "weights_sha256", "by")
STATUSES = ("verified", "self-reported", "published")


def folder_files(folder: str | Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every regular file under ``folder`` (what the validator
    records as the submission's files)."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): file_sha256(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def _mac(key: bytes, record: dict) -> str:
    return hmac.new(key, canonical_json({k: record[k] for k in FIELDS}).encode("utf-8"), hashlib.sha256).hexdigest()


def attestation_path(submission: str, root: str | Path | None = None) -> Path:
    return private_dir(root) / "attestations" / f"{submission}.json"


def attest(folder: str | Path, *, dataset_digest: str, weights_sha256: str | None, by: str,
           root: str | Path | None = None) -> Path:
    """Record that this project wrote ``folder`` (see the module doc); returns the record's path."""
    folder = Path(folder)
    return attest_files(folder.name, folder_files(folder), dataset_digest=dataset_digest,
                        weights_sha256=weights_sha256, by=by, root=root)


def attest_files(submission: str, files: dict[str, str], *, dataset_digest: str, weights_sha256: str | None,
                 by: str, root: str | Path | None = None) -> Path:
    """Record that this project wrote submission ``submission`` with exactly ``files``
    (relative path -> SHA-256); returns the record's path."""
    record = {"submission": submission, "content_sha256": json_sha256(files),
              "dataset_digest": dataset_digest, "weights_sha256": weights_sha256, "by": by}
    record["hmac"] = _mac(attestation_key(root, create=True), record)
    path = attestation_path(submission, root)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    os.chmod(path, 0o600)
    return path


def holds(folder: str | Path, root: str | Path | None = None) -> bool:
    """Whether ``folder`` is, file for file, what its attestation records (False: none, or other files)."""
    folder = Path(folder)
    record = _load(folder.name, root)
    key = attestation_key(root)
    return bool(record and key and hmac.compare_digest(_mac(key, record), str(record.get("hmac")))
                and record["content_sha256"] == json_sha256(folder_files(folder)))


def _load(submission: str, root) -> dict | None:
    path = attestation_path(submission, root)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"unreadable attestation ({exc})", where=str(path)) from None
    if not isinstance(record, dict) or any(k not in record for k in (*FIELDS, "hmac")):
        raise BadInput(f"an attestation needs the fields {list(FIELDS) + ['hmac']}", where=str(path))
    return record


def row_status(prov: dict, root: str | Path | None = None) -> tuple[str, str | None]:
    """``(status, reason)`` of a results provenance: ``published`` (imported numbers),
    ``verified`` (a valid attestation matches it) or ``self-reported`` (with the reason when an
    attestation exists but does not hold)."""
    if prov.get("status") == "published":
        return "published", None
    sid = prov.get("submission")
    try:
        record = _load(sid, root) if isinstance(sid, str) else None
    except BadInput as exc:
        return "self-reported", str(exc)
    if record is None:
        return "self-reported", None
    key = attestation_key(root)
    if key is None or not hmac.compare_digest(_mac(key, record), str(record.get("hmac"))):
        return "self-reported", f"the attestation of {sid} does not verify with this project's private key"
    files = prov.get("submission_files")
    if not isinstance(files, dict) or record["content_sha256"] != json_sha256(files):
        return "self-reported", f"the attestation of {sid} was made for other files than these results were scored from"
    if record["dataset_digest"] != prov.get("dataset_digest"):
        return "self-reported", f"the attestation of {sid} was made on another dataset"
    if record["weights_sha256"] != prov.get("weights_sha256"):
        return "self-reported", f"the attestation of {sid} names other weights than submission.yaml"
    return "verified", None
