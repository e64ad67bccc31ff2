"""Reading user-supplied files within declared limits: every problem is a BadInput that
names the file.

* YAML is read with ``safe_load`` (no object construction) after an event scan that
  refuses nesting deeper than :data:`MAX_NESTING` and more than :data:`MAX_YAML_NODES`
  nodes once aliases are expanded (the "billion laughs"), before anything is built;
* JSON deeper than :data:`MAX_NESTING` (or than Python's recursion limit) is refused;
* :func:`regular_file` refuses a link, FIFO, socket or device where a file is expected
  (a FIFO would block a read forever, ``/dev/zero`` never ends);
* :func:`image_header_size` reads the width and height from a PNG, JPEG, BMP, TIFF or WebP
  header, so :func:`check_image_bytes` refuses a decompression bomb (more than
  :data:`MAX_IMAGE_PIXELS`) before it is decoded.

>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.yaml"
>>> _ = p.write_text("a: 1")
>>> read_yaml(p, "params file")
{'a': 1}
>>> load_json("[" * 65 + "]" * 65, "x.json")
Traceback (most recent call last):
...
aegisbench.errors.BadInput: x.json: nested deeper than 64 levels
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zlib
from pathlib import Path
from typing import Any

import yaml

from aegisbench.errors import BadInput

# ------------------------------------------------------------------ declared limits

#: Deepest nesting of lists / mappings accepted in a user's JSON or YAML file.
MAX_NESTING = 64
#: Most nodes of a YAML document once its aliases are expanded.
MAX_YAML_NODES = 1_000_000
#: Largest YAML or JSON file read whole by :func:`read_yaml` / :func:`read_json`.
MAX_TEXT_BYTES = 256 * 1024**2
#: Largest annotation file of a source folder (a COCO instances JSON of a large set is ~0.5 GB).
MAX_ANNOTATION_BYTES = 1024**3
#: Largest image file decoded, and most pixels (width x height) of a decoded image.
MAX_IMAGE_BYTES = 512 * 1024**2
MAX_IMAGE_PIXELS = 100_000_000
#: A submission: longest id (its folder name), most files and folders, deepest folder.
MAX_ID_CHARS = 64
MAX_SUBMISSION_ENTRIES = 1_000_000
MAX_SUBMISSION_DEPTH = 8
#: Most bytes of all the files of one submission folder together.
MAX_SUBMISSION_BYTES = 8 * 1024**3
#: Most rows of one Parquet predictions file, largest YOLO txt and COCO results file (the
#: size limit of ``ValidationLimits.max_file_bytes`` applies to every file as well).
MAX_PREDICTION_ROWS = 20_000_000
#: Most decoded bytes a row of a submitted Parquet file holds on average (from the footer).
MAX_ROW_BYTES = 4096
MAX_YOLO_FILE_BYTES = 64 * 1024**2
MAX_COCO_FILE_BYTES = 256 * 1024**2
#: Largest file of a results folder the leaderboard reads (metrics, provenance, strata,
#: attachments), from its size before reading, and most rows of a results table, from the
#: Parquet footer before any row is read (an evaluation writes a few thousand; a folder
#: past either is skipped with its reason).
MAX_RESULT_FILE_BYTES = 64 * 1024**2
MAX_RESULT_ROWS = 1_000_000

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words (``a regular file``, ``a FIFO``, ...)."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode)
                else "not a regular file")


def regular_file(path: str | Path, what: str = "file", follow: bool = True) -> os.stat_result:
    """The stat of ``path``; BadInput when it is missing or not a regular file (with
    ``follow=False`` a symbolic link is refused too)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise BadInput(f"{what} not found", where=str(path)) from None
    except OSError as exc:
        raise BadInput(f"cannot read {what}: {exc.strerror}", where=str(path)) from None
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{what} is {file_kind(st.st_mode)}, not a regular file", where=str(path))
    return st


def read_regular_bytes(path: str | Path, what: str, limit: int, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, checked on the open
    descriptor: a file swapped for a FIFO, device or (``follow=False``) link between a
    caller's ``lstat`` and this read is refused, never blocked on or read without end.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "a.txt"; _ = f.write_text("hi")
    >>> read_regular_bytes(f, "note", 10)
    b'hi'
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise BadInput(f"{what} not found", where=str(path)) from None
    except OSError as exc:
        kind = "a symbolic link" if not follow and os.path.islink(path) else None
        raise BadInput(f"{what} is {kind}, not a regular file" if kind
                       else f"cannot read {what}: {exc.strerror}", where=str(path)) from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{what} is {file_kind(st.st_mode)}, not a regular file", where=str(path))
        if st.st_size > limit:
            raise BadInput(f"{what} is {st.st_size} bytes, larger than the limit of {limit}", where=str(path))
        data = read_upto(fh, st.st_size, limit)  # memory: the file's size, not the limit
    if len(data) > limit:  # grew while being read
        raise BadInput(f"{what} is larger than the limit of {limit} bytes", where=str(path))
    return data


def read_upto(fh, size: int, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``fh``: its stated ``size`` (+1) first, then 1 MiB at a
    time while it grows (never a ``limit``-sized buffer for a small file)."""
    chunks, total, want = [], 0, min(size, limit) + 1
    while total <= limit:
        chunk = fh.read(min(want, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        want = 1 << 20
    return b"".join(chunks)


def read_text(path: str | Path, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``limit`` bytes; BadInput naming the file
    (and the byte) when it is larger, not a regular file or not UTF-8."""
    data = read_regular_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text ({exc.reason} at byte {exc.start})", where=str(path)) from None


# ------------------------------------------------------------------ YAML / JSON


def _too_deep(where: str) -> BadInput:
    return BadInput(f"nested deeper than {MAX_NESTING} levels", where=where)


def _scan_yaml(text: str, where: str) -> None:
    """Refuse a YAML document nested deeper than :data:`MAX_NESTING`, larger than
    :data:`MAX_YAML_NODES` nodes with its aliases expanded, or with a key given twice in one
    mapping (which ``safe_load`` would silently resolve to the last value); the parser is
    iterative."""
    stack: list[list] = []  # open collections: [anchor, nodes, depth below, keys seen (mappings) or None, key next]
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes, depth)
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if stack and stack[-1][3] is not None and isinstance(ev, (yaml.NodeEvent, yaml.CollectionStartEvent)):
            top = stack[-1]
            if top[4] and isinstance(ev, yaml.ScalarEvent):
                if ev.value in top[3]:
                    raise BadInput(f"line {ev.start_mark.line + 1}: key {ev.value[:80]!r} given twice in one mapping",
                                   where=where)
                top[3].add(ev.value)
            top[4] = not top[4]
        if isinstance(ev, yaml.CollectionStartEvent):
            stack.append([ev.anchor, 1, 1, set() if isinstance(ev, yaml.MappingStartEvent) else None, True])
            if len(stack) > MAX_NESTING:
                raise _too_deep(where)
            continue
        if isinstance(ev, yaml.CollectionEndEvent):
            anchor, nodes, depth = stack.pop()[:3]
        elif isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in anchors and any(open_[0] == ev.anchor for open_ in stack):
                raise BadInput(f"alias *{ev.anchor} refers to a node that contains it (a recursive structure)",
                               where=where)
            anchor, (nodes, depth) = None, anchors.get(ev.anchor, (1, 0))
        elif isinstance(ev, yaml.ScalarEvent):
            anchor, nodes, depth = ev.anchor, 1, 0
        else:
            continue
        if anchor:
            anchors[anchor] = (nodes, depth)
        if len(stack) + depth > MAX_NESTING:
            raise _too_deep(where)
        if stack:
            stack[-1][1] += nodes
            stack[-1][2] = max(stack[-1][2], depth + 1)
            nodes = stack[-1][1]
        if nodes > MAX_YAML_NODES:
            raise BadInput(f"more than {MAX_YAML_NODES} nodes once its aliases are expanded", where=where)


def load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` within the declared limits; BadInput naming ``where``."""
    try:
        _scan_yaml(text, where)
        return yaml.safe_load(text)
    except BadInput:
        raise
    except (yaml.YAMLError, ValueError, RecursionError) as exc:  # ValueError: e.g. a too long integer
        raise BadInput(f"malformed YAML: {exc}", where=where) from None


def check_nesting(obj: Any, where: str, limit: int = MAX_NESTING) -> None:
    """BadInput when lists / dicts in ``obj`` nest deeper than ``limit`` (iterative)."""
    todo = [(obj, 1)]
    while todo:
        o, d = todo.pop()
        children = o.values() if isinstance(o, dict) else o if isinstance(o, list) else None
        if children is None:
            continue
        if d > limit:
            raise _too_deep(where)
        todo.extend((c, d + 1) for c in children)


def load_json(text: str | bytes, where: str, nesting: bool = True) -> Any:
    """``json.loads(text)``; BadInput naming ``where`` when malformed or (``nesting``)
    nested deeper than :data:`MAX_NESTING` (always when deeper than the recursion limit)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"malformed JSON ({exc})", where=where) from None
    except RecursionError:
        raise _too_deep(where) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise BadInput(f"malformed JSON ({exc})", where=where) from None
    if nesting:
        check_nesting(obj, where)
    return obj


def read_yaml(path: str | Path, what: str = "YAML file") -> Any:
    path = Path(path)
    return load_yaml(read_text(path, what), str(path))


def read_json(path: str | Path, what: str = "JSON file", limit: int = MAX_TEXT_BYTES) -> Any:
    path = Path(path)
    return load_json(read_text(path, what, limit), str(path))


# ------------------------------------------------------------------ image headers


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD9)):  # stand-alone markers
            i += 2
            continue
        seg = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
            if i + 9 > len(data):
                return None
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        if marker in (0xD9, 0xDA) or seg < 2:  # end of image / start of scan before any frame
            return None
        i += 2 + seg
    return None


def _tiff_size(data: bytes) -> tuple[int, int] | None:
    e = "<" if data[:2] == b"II" else ">"
    try:
        (ifd,) = struct.unpack(e + "I", data[4:8])
        (n,) = struct.unpack(e + "H", data[ifd:ifd + 2])
        tags = {}
        for k in range(min(n, 4096)):
            tag, typ, _, value = struct.unpack(e + "HHI4s", data[ifd + 2 + 12 * k:ifd + 14 + 12 * k])
            if tag in (256, 257):
                tags[tag] = struct.unpack(e + ("H" if typ == 3 else "I"), value[:2 if typ == 3 else 4])[0]
    except struct.error:
        return None
    return (tags[256], tags[257]) if len(tags) == 2 else None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    return None


def image_header_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` from the header of PNG, JPEG, BMP, TIFF or WebP bytes; None
    when the format is none of these or the header is cut short.

    >>> import numpy as np, cv2
    >>> image_header_size(cv2.imencode(".png", np.zeros((7, 13, 3), np.uint8))[1].tobytes())
    (13, 7)
    """
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    if data[:2] == b"BM" and len(data) >= 26:
        if struct.unpack("<I", data[14:18])[0] == 12:  # OS/2 core header
            return struct.unpack("<HH", data[18:22])
        w, h = struct.unpack("<ii", data[18:26])
        return abs(w), abs(h)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return _tiff_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    return None


def check_image_bytes(data: bytes, where: str) -> tuple[int, int]:
    """The header's ``(width, height)``; BadInput naming ``where`` when the file is larger
    than :data:`MAX_IMAGE_BYTES`, its header cannot be read, or it declares more than
    :data:`MAX_IMAGE_PIXELS` pixels (a decompression bomb), all before any decoding."""
    if len(data) > MAX_IMAGE_BYTES:
        raise BadInput(f"image file is {len(data)} bytes, larger than the limit of {MAX_IMAGE_BYTES}", where=where)
    size = image_header_size(data)
    if size is None:
        raise BadInput("cannot decode image (not a PNG, JPEG, BMP, TIFF or WebP file with a readable header)",
                       where=where)
    w, h = size
    if w * h > MAX_IMAGE_PIXELS:
        raise BadInput(f"image header declares {w}x{h} = {w * h} pixels, more than the limit of "
                       f"{MAX_IMAGE_PIXELS} (refused before decoding)", where=where)
    return w, h


_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _png_expected_bytes(w: int, h: int, depth: int, channels: int, interlaced: bool) -> int:
    def rows(pw: int, ph: int) -> int:
        return ph * (1 + (pw * channels * depth + 7) // 8) if pw and ph else 0
    if not interlaced:
        return rows(w, h)
    return sum(rows(max(0, -(-(w - x0) // dx)), max(0, -(-(h - y0) // dy))) for x0, y0, dx, dy in _ADAM7)


def check_png_payload(data: bytes, where: str) -> None:
    """BadInput when a PNG's compressed pixels do not make exactly the image its header
    declares: more data than ``width x height`` (a decoder keeps the header's size and only
    warns) or less (a truncated file). Inflated in 1 MiB steps, never held whole.

    >>> import numpy as np, cv2
    >>> check_png_payload(cv2.imencode(".png", np.zeros((7, 13, 3), np.uint8))[1].tobytes(), "x.png")
    """
    w, h = struct.unpack(">II", data[16:24])
    depth, colour, interlace = data[24], data[25], data[28]
    if colour not in _PNG_CHANNELS or len(data) < 33:
        return  # the decoder refuses what it cannot read
    expected = _png_expected_bytes(w, h, depth, _PNG_CHANNELS[colour], bool(interlace))
    inflate, got, i = zlib.decompressobj(), 0, 8
    try:
        while i + 8 <= len(data) and got <= expected:
            length, kind = struct.unpack(">I4s", data[i:i + 8])
            if kind == b"IDAT":
                pending = data[i + 8:i + 8 + length]
                while pending and got <= expected:
                    got += len(inflate.decompress(pending, min(1 << 20, expected + 1 - got)))
                    pending = inflate.unconsumed_tail
            elif kind == b"IEND":
                break
            i += 12 + length
    except zlib.error as exc:
        raise BadInput(f"corrupt PNG pixel data ({exc})", where=where) from None
    if got > expected:
        raise BadInput(f"PNG pixel data holds more than the {w}x{h} image its header declares", where=where)
    if got < expected:
        raise BadInput(f"PNG pixel data ends before the {w}x{h} image its header declares (truncated)", where=where)


def read_image_bytes(path: str | Path) -> bytes:
    """The bytes of an image file after :func:`check_image_bytes` (a regular file, size
    checked before reading)."""
    data = read_regular_bytes(path, "image file", MAX_IMAGE_BYTES)
    check_image_bytes(data, str(path))
    return data
