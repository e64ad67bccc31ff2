"""The project's private configuration: what must never be in git, in DVC or in a submission.

It is the folder ``private/`` of the project (for the command line, the current folder's, as the
pipeline's stages run there, unless ``AEGISBENCH_PRIVATE`` names another), git-ignored, readable
by its owner only:

* ``config.yaml`` (mode 0600): ``attestation_key``, 64 hex digits drawn at random the first
  time a run is attested (:func:`attestation_key`), and ``seeds``, the secret of each private
  synthetic source (:func:`private_seed`);
* ``attestations/<submission id>.json``: what :mod:`aegisbench.attestation` records of the
  runs this project made itself.

>>> import tempfile, os; os.environ["AEGISBENCH_PRIVATE"] = tempfile.mkdtemp()
>>> len(attestation_key(create=True)) == 32 and attestation_key() == attestation_key()
True
>>> oct(os.stat(private_dir() / "config.yaml").st_mode & 0o777)
'0o600'
>>> del os.environ["AEGISBENCH_PRIVATE"]
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
from pathlib import Path

import yaml

from aegisbench.errors import BadInput
from aegisbench.readers import read_yaml

PRIVATE_ENV = "AEGISBENCH_PRIVATE"
CONFIG = "config.yaml"
_KEY = re.compile(r"[0-9a-f]{64}")


def private_dir(root: str | Path | None = None) -> Path:
    """``<root>/private`` for a given project ``root``; else ``$AEGISBENCH_PRIVATE``, else
    ``private`` in the current folder (where the pipeline's stages run)."""
    if root is not None:
        return Path(root) / "private"
    return Path(os.environ.get(PRIVATE_ENV) or "private")


def load_config(root: str | Path | None = None) -> dict:
    """The private ``config.yaml`` (empty when there is none); BadInput when it is readable by
    others or malformed."""
    path = private_dir(root) / CONFIG
    if not path.exists():
        return {}
    if path.stat().st_mode & 0o077:
        raise BadInput(f"readable by others (mode {path.stat().st_mode & 0o777:o}): chmod 600 it", where=str(path))
    raw = read_yaml(path, "private config")
    if not isinstance(raw, dict):
        raise BadInput("must be a mapping", where=str(path))
    return raw


def _write_config(root, raw: dict) -> None:
    folder = private_dir(root)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder / f".{CONFIG}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(yaml.safe_dump(raw, sort_keys=True))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / CONFIG)
    finally:
        if tmp.exists():
            tmp.unlink()


def attestation_key(root: str | Path | None = None, create: bool = False) -> bytes | None:
    """The project's attestation key (32 bytes), drawn and saved on first use when ``create``;
    None when there is none and ``create`` is off."""
    raw = load_config(root)
    key = raw.get("attestation_key")
    if key is None:
        if not create:
            return None
        folder = private_dir(root)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(folder / ".config.lock", "a") as lock:  # two first runs side by side draw one key
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            raw = load_config(root)
            key = raw.get("attestation_key")
            if key is None:
                key = secrets.token_hex(32)
                _write_config(root, {**raw, "attestation_key": key})
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise BadInput("attestation_key must be 64 lowercase hex digits", where=str(private_dir(root) / CONFIG))
    return bytes.fromhex(key)


def private_seed(name: str, root: str | Path | None = None, create: bool = False) -> str | None:
    """The secret of the private source ``name`` (64 hex digits), drawn and saved on first use
    when ``create``; it keys every draw of that source, so its data (and labels) cannot be
    regenerated from the public code and ``params.yaml``."""
    raw = load_config(root)
    seeds = raw.get("seeds") or {}
    if name not in seeds:
        if not create:
            return None
        folder = private_dir(root)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(folder / ".config.lock", "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            raw = load_config(root)
            seeds = dict(raw.get("seeds") or {})
            if name not in seeds:
                seeds[name] = secrets.token_hex(32)
                _write_config(root, {**raw, "seeds": seeds})
    if not isinstance(seeds[name], str) or not _KEY.fullmatch(seeds[name]):
        raise BadInput(f"seeds.{name} must be 64 lowercase hex digits", where=str(private_dir(root) / CONFIG))
    return seeds[name]
