"""Staged folders: a command builds its output folder in a staging sibling and publishes it
in one step (:func:`staged_dir`: the folder swapped whole; :func:`staged_files`: files moved
into an existing folder), under the output's lock (:func:`aegisbench.atomic.output_lock`);
a failed or killed run leaves the published folder as it was. The build's staging is
resumable (:func:`resumable_dir`).

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with staged_dir(root / "out") as tmp:
...     _ = (tmp / "a.txt").write_text("a")
>>> sorted(p.name for p in root.iterdir()), (root / "out" / "a.txt").read_text()
(['out'], 'a')
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from aegisbench.atomic import (
    WRITE_ERRNOS,
    clean_leftovers,
    fsync_dir,
    output_lock,
    replace_dir,
    staging_path,
)


def _renamed_into(exc: OSError, staging: Path, final: Path) -> None:
    """Make an out-of-room error raised while building ``staging`` name the path under
    ``final`` it was writing (the staging folder is gone when the message is read): the file
    it names, moved from ``staging`` to ``final``, else ``final`` itself."""
    if exc.errno not in WRITE_ERRNOS:
        return
    name = os.fsdecode(exc.filename) if exc.filename is not None else None
    if name is None:
        exc.filename = str(final)
        return
    try:
        rel = Path(name).relative_to(staging)
    except ValueError:
        return
    exc.filename = str(final / rel) if rel.parts else str(final)


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
    succeeds and removed when it fails (``final`` is then left untouched). Holds the
    output's lock throughout and first clears what killed writers left. The one
    staged-write helper; :func:`resumable_dir` is its resumable variant.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> with staged_dir(root / "site") as tmp:
    ...     _ = (tmp / "index.html").write_text("ok")
    >>> (root / "site" / "index.html").read_text(), sorted(p.name for p in root.iterdir())
    ('ok', ['site'])
    """
    with _staged(final, replace_dir) as staging:
        yield staging


@contextlib.contextmanager
def staged_files(final: str | Path) -> Iterator[Path]:
    """Write files in a fresh staging sibling of the folder ``final``, moved into ``final``
    only once the block succeeds: a new ``final`` by one rename, an existing one file by file
    (renames, no writing; the files of ``final`` the block did not write are kept). When the
    block fails (a full disk) the staging folder is removed and ``final`` is as it was, never
    half-written. Holds the output's lock throughout, like :func:`staged_dir`.

    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> (root / "gt").mkdir(); _ = (root / "gt" / "mine.txt").write_text("kept")
    >>> with staged_files(root / "gt") as tmp:
    ...     _ = (tmp / "a.json").write_text("{}")
    >>> sorted(p.name for p in (root / "gt").iterdir()), sorted(p.name for p in root.iterdir())
    (['a.json', 'mine.txt'], ['gt'])
    """
    with _staged(final, _move_files) as staging:
        yield staging


def _move_files(staging: Path, final: Path) -> None:
    """``staging`` published as ``final``: one rename if ``final`` is new, else its files
    renamed into ``final`` one by one (the other files of ``final`` kept)."""
    if not os.path.lexists(final):
        replace_dir(staging, final)
        return
    for path in sorted(p for p in staging.rglob("*") if p.is_file()):
        dest = final / path.relative_to(staging)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, dest)
    fsync_dir(final)


@contextlib.contextmanager
def _staged(final: str | Path, publish) -> Iterator[Path]:
    """A fresh staging sibling of ``final`` under the output's lock (what killed writers left
    cleared first), published with ``publish(staging, final)`` when the block succeeds and
    removed either way; an out-of-room error names the path under ``final``."""
    final = Path(final)
    with output_lock(final):
        clean_leftovers(final)
        staging = staging_path(final, f"staging-{os.getpid()}")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir()
        try:
            yield staging
            publish(staging, final)
        except OSError as exc:
            _renamed_into(exc, staging, final)
            raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
