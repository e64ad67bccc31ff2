"""Atomic file writes: write to a temporary sibling, fsync, then rename.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> atomic_write_text(d / "a.txt", "hi")
>>> (d / "a.txt").read_text()
'hi'
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o644)  # mkstemp creates 0600; published files are world-readable
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_with(path: str | Path, writer: Callable[[Path], None]) -> None:
    """Call ``writer(tmp_path)`` and publish the result atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)


def replace_dir(staging: Path, final: Path) -> None:
    """Swap a completed staging folder into place (old copy removed afterwards)."""
    final = Path(final)
    old = None
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
    os.replace(staging, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_path(final: str | Path, tag: str) -> Path:
    """The hidden staging sibling ``.<name>.<tag>`` of ``final``."""
    final = Path(final)
    return final.with_name(f".{final.name}.{tag}")


def drop_partial_writes(root: Path) -> None:
    """Delete the temp files of writes that never reached their rename (:func:`atomic_path`
    uses ``*.tmp`` names), so a resumed or finished folder holds none."""
    for leftover in Path(root).rglob("*.tmp"):
        leftover.unlink(missing_ok=True)


def resumable_dir(final: str | Path, tag: str) -> Path:
    """A staging sibling ``.<name>.<tag>`` that survives a failed run so the next one
    resumes in it: created if missing, half-written ``*.tmp`` files dropped. Swap it in
    with :func:`replace_dir` once complete.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> work = resumable_dir(root / "run", "partial")
    >>> work.name, resumable_dir(root / "run", "partial") == work
    ('.run.partial', True)
    """
    staging = staging_path(final, tag)
    staging.mkdir(parents=True, exist_ok=True)
    drop_partial_writes(staging)
    return staging


@contextlib.contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """Build a folder in a fresh staging sibling, swapped in whole when the block
    succeeds and removed when it fails (``final`` is then left untouched). The one
    staged-write helper; :func:`resumable_dir` is its resumable variant.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> with staged_dir(root / "site") as tmp:
    ...     _ = (tmp / "index.html").write_text("ok")
    >>> (root / "site" / "index.html").read_text(), sorted(p.name for p in root.iterdir())
    ('ok', ['site'])
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(final, f"staging-{os.getpid()}")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir()
    try:
        yield staging
        replace_dir(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
