"""What a submission folder may be and hold, checked before anything in it is opened.

* The folder is a real folder: neither it nor any folder on the path given to reach it is
  a symbolic link (the path as given, made absolute, must equal its resolved form), and
  that path is valid UTF-8. Its name is the submission id (``results/<id>/``), which must
  match :data:`SUBMISSION_ID`: 1 to 64 ASCII letters, digits, ``.``, ``_`` or ``-``, starting
  with a letter or digit.
* Everything inside is a regular file or a folder (``lstat``: no symbolic link, FIFO,
  socket or device, so nothing blocks a read or never ends), with a UTF-8 name, at most
  :data:`~aegisbench.readers.MAX_SUBMISSION_ENTRIES` entries and
  :data:`~aegisbench.readers.MAX_SUBMISSION_DEPTH` folders deep.
* No key of ``submission.yaml``, at any depth, is threshold-like
  (:func:`~aegisbench.evaluation.formats.is_threshold_key`).

>>> bool(SUBMISSION_ID.fullmatch("reference_sar")), bool(SUBMISSION_ID.fullmatch("../x"))
(True, False)
>>> threshold_key_paths({"detector": {"threshold": 0.1, "tiling": [{"conf_min": 1}]}, "team": "x"})
['detector.threshold', 'detector.tiling[0].conf_min']
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from aegisbench.errors import BadInput
from aegisbench.evaluation.formats import is_threshold_key
from aegisbench.evaluation.rows import Problems, clip
from aegisbench.readers import (MAX_ID_CHARS, MAX_SUBMISSION_BYTES, MAX_SUBMISSION_DEPTH, MAX_SUBMISSION_ENTRIES,
                                file_kind)

SUBMISSION_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_CHARS - 1}}}")


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: a byte of a non-UTF-8 name (surrogateescape)
        return False
    return True


def _first_link(path: Path) -> Path | None:
    for p in [*reversed(path.parents), path]:
        if p.is_symlink():
            return p
    return None


def submission_id(folder: str | Path) -> str:
    """The id of a submission folder (its name) once the folder itself is confined; BadInput
    naming the path otherwise."""
    where = str(folder)
    if not _is_utf8(where):
        raise BadInput("the path of the submission folder is not valid UTF-8; rename it", where=where)
    try:
        st = os.lstat(folder)
    except (FileNotFoundError, NotADirectoryError):
        raise BadInput("submission folder not found", where=where) from None
    except OSError as exc:
        raise BadInput(f"cannot read the submission folder: {exc.strerror}", where=where) from None
    if stat.S_ISLNK(st.st_mode):
        raise BadInput("the submission folder is a symbolic link; links are not followed: give the real folder",
                       where=where)
    if not stat.S_ISDIR(st.st_mode):
        raise BadInput(f"submission folder is {file_kind(st.st_mode)}, not a folder", where=where)
    absolute = Path(os.path.abspath(folder))
    if os.path.realpath(folder) != str(absolute):
        link = _first_link(absolute)
        raise BadInput(f"{link or 'a folder on the path'} is a symbolic link; a submission folder is read only "
                       "through real folders: give its real path", where=where)
    sid = absolute.name
    if not SUBMISSION_ID.fullmatch(sid):
        raise BadInput(f"submission id {clip(repr(sid))} (the folder name) must be 1 to {MAX_ID_CHARS} ASCII letters, "
                       "digits, '.', '_' or '-', starting with a letter or digit", where=where)
    return sid


def submission_files(folder: Path, problems: Problems, max_file_bytes: int = MAX_SUBMISSION_BYTES) -> list[Path]:
    """Every regular file under ``folder``, sorted; a problem for each entry that is not a
    regular file or folder, has a non-UTF-8 name, lies too deep or is larger than
    ``max_file_bytes``, and for too many entries or more than :data:`MAX_SUBMISSION_BYTES` in
    all. Sizes come from the listing: nothing is read (or hashed) before they pass."""
    files, todo, seen, total = [], [(folder, 0)], 0, 0
    while todo:
        where, depth = todo.pop()
        try:
            with os.scandir(where) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            problems.add(str(where), None, None, f"cannot list folder: {exc.strerror}")
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_SUBMISSION_ENTRIES:
                problems.add(str(folder), None, None, f"more than {MAX_SUBMISSION_ENTRIES} files and folders")
                return sorted(files)
            path = Path(entry.path)
            mode = entry.stat(follow_symlinks=False).st_mode
            if not _is_utf8(entry.name):
                problems.add(str(path), None, None, "file name is not valid UTF-8; rename it")
            elif stat.S_ISLNK(mode):
                problems.add(str(path), None, None, "symbolic links are not accepted in a submission")
            elif stat.S_ISDIR(mode) and depth + 1 >= MAX_SUBMISSION_DEPTH:
                problems.add(str(path), None, None, f"folder nested more than {MAX_SUBMISSION_DEPTH} levels deep")
            elif stat.S_ISDIR(mode):
                todo.append((path, depth + 1))
            elif stat.S_ISREG(mode):
                size = entry.stat(follow_symlinks=False).st_size
                total += size
                if size > max_file_bytes:
                    problems.add(str(path), None, None, f"file is {size} bytes, larger than the limit of "
                                 f"{max_file_bytes} bytes (refused before it is read)")
                files.append(path)
            else:
                problems.add(str(path), None, None, f"{file_kind(mode)} is not accepted in a submission (only "
                             "regular files and folders)")
    if total > MAX_SUBMISSION_BYTES:
        problems.add(str(folder), None, None, f"the folder holds {total} bytes, more than the limit of "
                     f"{MAX_SUBMISSION_BYTES} bytes (refused before any file is read)")
    return sorted(files)


def threshold_key_paths(raw: object) -> list[str]:
    """The dotted paths (``detector.threshold``, ``a[2].conf_min``) of every threshold-like
    key in a parsed ``submission.yaml``, sorted."""
    out, todo = [], [(raw, "")]
    while todo:
        obj, path = todo.pop()
        if isinstance(obj, dict):
            for key, value in obj.items():
                name = f"{path}.{key}" if path else str(key)
                if is_threshold_key(key):
                    out.append(name)
                todo.append((value, name))
        elif isinstance(obj, list):
            todo.extend((v, f"{path}[{i}]") for i, v in enumerate(obj))
    return sorted(out)
