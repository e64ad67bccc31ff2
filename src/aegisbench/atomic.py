"""Atomic writes: files through a temp sibling, folders through a staged swap, one writer per output.

* Files: written to ``.<name>.<pid>.<random>.tmp`` beside the target, fsynced, renamed over it.
* Folders (:func:`replace_dir`, :func:`staged_dir`): built complete in a hidden sibling, then
  published so that the output path always holds one complete version. On Linux the swap is
  one ``renameat2(RENAME_EXCHANGE)``: the completed folder is renamed ``.<name>.new-<pid>``
  (the output untouched), exchanged with the output in a single step, and the old version
  (now at ``.new-<pid>``) is renamed ``.<name>.trash-<pid>`` and removed. Where the file
  system cannot exchange, two renames: output -> ``.<name>.old-<pid>``, folder -> output;
  a writer or reader that finds the output absent beside an ``.old-<pid>`` copy puts that
  copy back first (:func:`recover_dir`), so absence is never read as "no data".
* One writer per output (:func:`output_lock`): ``flock`` on the sibling ``.<name>.lock``,
  refused at once with :class:`~aegisbench.errors.BadInput` naming the holder's PID,
  released when the holder exits however it exits; the lock file goes with the release.
* Leftovers of killed writers (``.old-/.new-/.trash-/.staging-<pid>`` siblings and
  ``.<name>.<pid>.*.tmp`` files whose PID is dead) are removed when the next writer of that
  output starts (:func:`clean_leftovers`; :func:`staged_dir` calls it).

``AEGISBENCH_TEST_PAUSE_PUBLISH=SECONDS`` makes :func:`replace_dir` sleep once before its
decisive step (before the exchange; between the two renames) so that tests can kill a
writer there; it is for tests only.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> atomic_write_text(d / "a.txt", "hi")
>>> (d / "a.txt").read_text()
'hi'
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

PAUSE_ENV = "AEGISBENCH_TEST_PAUSE_PUBLISH"
_SIDE = re.compile(r"(old|new|trash|staging)-(\d{1,10})")  # after ".<name>."
_TMP = re.compile(r"(\d{1,10})\.[A-Za-z0-9_]+\.tmp")  # after ".<name>."
_HELD: dict[str, list] = {}  # lock file -> [fd, depth, pid] of the locks this process holds


#: errnos of a write that ran out of room (a full disk, a quota, the process's file size limit)
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Name ``path`` on an out-of-room error raised in the block that names no file (a
    failed ``write()`` carries none), so the message says which file could not be written.

    >>> try:
    ...     with writing("out/a.json"):
    ...         raise OSError(errno.ENOSPC, "No space left on device")
    ... except OSError as exc:
    ...     exc.filename
    'out/a.json'
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno in WRITE_ERRNOS:
            exc.filename = os.fspath(path)
        raise


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o644)  # mkstemp creates 0600; published files are world-readable
    try:
        with writing(path):
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


# ------------------------------------------------------------------ folders


@functools.lru_cache(maxsize=1)
def _renameat2():
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None) if sys.platform == "linux" else None
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False when
    this system or file system cannot, OSError on any other failure."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(-100, os.fsencode(a), -100, os.fsencode(b), 2) == 0:  # AT_FDCWD, RENAME_EXCHANGE
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _pause() -> None:
    seconds = os.environ.get(PAUSE_ENV)
    if seconds:
        time.sleep(float(seconds))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(staging: Path, final: Path, exchange: bool = True) -> None:
    """Publish the completed folder ``staging`` at ``final``: ``final`` holds the old or
    the new version at every moment (``exchange=False``: the two-rename swap of file
    systems without exchange, whose gap :func:`recover_dir` repairs); the old copy is
    removed afterwards. Call it holding :func:`output_lock` of ``final``."""
    staging, final = Path(staging), Path(final)
    pid = os.getpid()
    if not os.path.lexists(final):
        os.rename(staging, final)  # first publication: one atomic rename
    else:
        new, old = staging_path(final, f"new-{pid}"), staging_path(final, f"old-{pid}")
        for side in (new, old):
            if os.path.lexists(side):
                _remove(side)
        os.rename(staging, new)  # the output untouched
        if exchange:
            _pause()
        if exchange and _exchange(new, final):
            old = new  # it now holds the old version
        else:
            os.rename(final, old)
            _pause()
            os.rename(new, final)
        trash = staging_path(final, f"trash-{pid}")
        os.rename(old, trash)
        _remove(trash)
    fsync_dir(final.parent)


def staging_path(final: str | Path, tag: str) -> Path:
    """The hidden staging sibling ``.<name>.<tag>`` of ``final``."""
    final = Path(final)
    return final.with_name(f".{final.name}.{tag}")


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie counts as dead).

    >>> pid_alive(os.getpid())
    True
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def leftovers(final: str | Path) -> list[tuple[Path, str, int]]:
    """``(path, kind, pid)`` of the siblings that writers of ``final`` leave while they
    run: ``old``/``new``/``trash``/``staging`` folders and ``tmp`` files."""
    final = Path(final)
    prefix = f".{final.name}."
    out = []
    try:
        names = sorted(os.listdir(final.parent))
    except FileNotFoundError:
        return []
    for name in names:
        if not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        side, tmp = _SIDE.fullmatch(rest), _TMP.fullmatch(rest)
        if side:
            out.append((final.parent / name, side.group(1), int(side.group(2))))
        elif tmp:
            out.append((final.parent / name, "tmp", int(tmp.group(1))))
    return out


def clean_leftovers(final: str | Path) -> list[Path]:
    """Put back the old copy of an interrupted two-rename swap when ``final`` is absent,
    then remove the leftovers of writers of ``final`` whose process is dead; returns what
    was removed. Call it holding :func:`output_lock` of ``final``."""
    final = Path(final)
    found = [(p, kind, pid) for p, kind, pid in leftovers(final) if pid != os.getpid() and not pid_alive(pid)]
    olds = sorted((p for p, kind, _ in found if kind == "old"), key=lambda p: p.stat().st_mtime_ns)
    if olds and not os.path.lexists(final):
        os.rename(olds[-1], final)
        log.warning("%s was absent after an interrupted publication: restored its last version from %s",
                    final, olds[-1].name)
    removed = []
    for path, _, _ in found:
        if os.path.lexists(path):
            _remove(path)
            removed.append(path)
    if removed:
        log.info("removed %d leftover(s) of killed writers of %s: %s", len(removed), final,
                 ", ".join(p.name for p in removed))
    return removed


def recover_dir(final: str | Path) -> bool:
    """For readers: when ``final`` is absent but the old copy of an interrupted swap is
    beside it, put it back (True). BadInput names the PID when a live writer holds
    ``final``: absence mid-publication is never read as "no data"."""
    final = Path(final)
    if os.path.lexists(final) or not any(kind == "old" for _, kind, _ in leftovers(final)):
        return False
    with output_lock(final):
        clean_leftovers(final)
    return os.path.lexists(final)


# ------------------------------------------------------------------ one writer per output


def lock_path(final: str | Path) -> Path:
    """The lock file ``.<name>.lock`` beside ``final``."""
    return staging_path(final, "lock")


def _holder(fd: int) -> str:
    for _ in range(25):  # the holder writes its PID right after locking
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text:
            return text
        time.sleep(0.02)
    return "unknown"


def _acquire(lock: Path, final: Path) -> int:
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise BadInput(f"another run (PID {holder}) is writing this output; wait for it or stop it "
                           f"(lock {lock.name})", where=str(final)) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:  # not a lock file its last holder removed while we opened it
            try:
                with writing(lock):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except BaseException:  # (a full disk): no lock file is left behind
                lock.unlink(missing_ok=True)
                os.close(fd)
                raise
            return fd
        os.close(fd)


@contextlib.contextmanager
def output_lock(final: str | Path) -> Iterator[Path]:
    """Hold the one-writer lock of ``final`` (re-entrant in a process); a second writer
    gets BadInput naming this PID. Yields the lock file's path."""
    final = Path(final).absolute()
    lock = lock_path(final)
    held = _HELD.get(str(lock))
    if held is not None and held[2] == os.getpid():
        held[1] += 1
        try:
            yield lock
        finally:
            held[1] -= 1
        return
    created = [p for p in (final.parent, *final.parent.parents) if not p.exists()]
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = _acquire(lock, final)
    except BaseException:
        _remove_created(created)
        raise
    _HELD[str(lock)] = [fd, 1, os.getpid()]
    try:
        yield lock
    finally:
        del _HELD[str(lock)]
        lock.unlink(missing_ok=True)  # while still held: a waiter that opened it retries on a new file
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        _remove_created(created)


def _remove_created(created: list[Path]) -> None:
    """Remove the folders a lock made, deepest first, where still empty (a refused or failed
    run leaves no empty folders behind)."""
    for folder in created:
        with contextlib.suppress(OSError):
            folder.rmdir()
