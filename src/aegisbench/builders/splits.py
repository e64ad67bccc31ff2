"""Group-aware split assignment and perceptual-hash de-duplication.

Two leakage guards from the PyroNear2025 practice (seed 001):

* **Event-disjoint splits.** :func:`assign_split` maps a *group* (a video sequence, a
  wildfire event, a flight) to one split from the SHA-256 of ``(key, group_id)``, so
  every frame of a group lands in the same split and the assignment never depends on
  the order or number of other groups.
* **Near-duplicate exclusion.** :func:`phash` is a 64-bit DCT perceptual hash;
  :func:`near_duplicates` compares every train/val hash with every test hash (numpy
  bit operations). The policy used by :mod:`aegisbench.builders.adapters`: a train/val
  image within ``max_distance`` bits of any test image is *excluded* from train/val and
  reported; the test set is never touched. Exclusion is per image, not per group: one
  near-duplicate frame does not drag its (otherwise distinct) sequence out.

>>> assign_split("seq_01", (0.7, 0.15, 0.15), "heridal") in ("train", "val", "test")
True
>>> import numpy as np
>>> y, x = np.mgrid[0:48, 0:64]
>>> img = np.dstack([(100 + 60 * np.sin(x / 7) * np.cos(y / 5)).astype(np.uint8)] * 3)
>>> hamming(phash(img), phash(img + 20))  # brightened copy
0
>>> near_duplicates({"t1": 0b1011}, {"a": 0b1001, "b": 0xFFFF}, max_distance=2)
[('a', 't1', 1)]

Official split lists (``split_mode="lists"``): :func:`split_list_files` finds them and
:func:`assign_lists` maps every listed image to its split.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import cv2
import numpy as np

from aegisbench.errors import BadInput
from aegisbench.hashing import key_digest

SPLIT_NAMES = ("train", "val", "test")
VOC_LISTS = Path("ImageSets") / "Main"  # the default list folder: <split>.txt inside it
HASH_BITS = 64
_MASK64 = (1 << 64) - 1
_POP8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def validate_fractions(fractions: Sequence[float]) -> tuple[float, float, float]:
    """Return ``fractions`` as a float triple; ValueError unless >= 0 and summing to 1."""
    try:
        fr = tuple(float(f) for f in fractions)
    except (TypeError, ValueError):
        raise TypeError(f"fractions must be three numbers, got {fractions!r}") from None
    if len(fr) != 3:
        raise ValueError(f"fractions must be (train, val, test), got {len(fr)} values")
    if any(not np.isfinite(f) or f < 0 for f in fr):
        raise ValueError(f"fractions must be finite and >= 0, got {fr}")
    if abs(sum(fr) - 1.0) > 1e-6:
        raise ValueError(f"fractions must sum to 1, got {sum(fr)!r}")
    return fr  # type: ignore[return-value]


def split_unit(group_id: str, key: str) -> float:
    """Uniform number in [0, 1) from the first 8 bytes of SHA-256(key, group_id)."""
    return int.from_bytes(key_digest(key, group_id)[:8], "big") / 2.0**64


def assign_split(group_id: str, fractions: Sequence[float], key: str) -> str:
    """The split ('train', 'val' or 'test') of a whole group, deterministic by SHA-256.

    ``key`` salts the hash (use the source name), so two sources with the same
    sequence names are split independently.

    >>> assign_split("g", (1, 0, 0), "k"), assign_split("g", (0, 0, 1), "k")
    ('train', 'test')
    """
    if not isinstance(group_id, str) or not isinstance(key, str):
        raise TypeError("group_id and key must be str")
    f_train, f_val, _ = validate_fractions(fractions)
    u = split_unit(group_id, key)
    if u < f_train:
        return "train"
    if u < f_train + f_val:
        return "val"
    return "test"


def phash(image: np.ndarray) -> int:
    """64-bit DCT perceptual hash of an RGB (or gray) uint8 image.

    Grayscale -> 32x32 (``cv2.INTER_AREA``) -> 2-D DCT-II -> top-left 8x8 block of
    low frequencies. The 63 AC coefficients are thresholded at their median; bit
    ``63 - i`` holds coefficient ``i`` (row-major) and the DC bit (the MSB) is always 0,
    because the DC term only measures mean brightness.

    >>> phash(np.zeros((10, 10, 3), np.uint8))
    0
    """
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or min(img.shape[:2]) < 1:
        raise TypeError("phash expects a uint8 image of shape (H, W) or (H, W, 3)")
    gray = img if img.ndim == 2 else cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY)
    small = cv2.resize(gray.astype(np.float32), (32, 32), interpolation=cv2.INTER_AREA)
    low = cv2.dct(small)[:8, :8].ravel()
    bits = low > np.median(low[1:])
    bits[0] = False
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def _check_hash(h: int) -> int:
    if not isinstance(h, (int, np.integer)) or not 0 <= int(h) <= _MASK64:
        raise ValueError(f"hash must be an integer in [0, 2**64), got {h!r}")
    return int(h)


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit hashes.

    >>> hamming(0b1010, 0b0110)
    2
    """
    return (_check_hash(a) ^ _check_hash(b)).bit_count()


def _popcount(x: np.ndarray) -> np.ndarray:
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(x)
    return _POP8[x[..., None].view(np.uint8)].sum(axis=-1, dtype=np.uint8)


def hash_array(hashes: Sequence[int]) -> np.ndarray:
    """Hashes as a uint64 array (validated)."""
    return np.array([_check_hash(h) for h in hashes], dtype=np.uint64)


def nearest(test: np.ndarray, other: np.ndarray, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """For each ``other`` hash: index of its nearest ``test`` hash and the distance.

    Both arguments are uint64 arrays; ties go to the lowest test index. Work is done
    in blocks of ``block`` rows so memory stays at ``block * len(test)`` bytes.
    """
    if test.size == 0:
        raise ValueError("no test hashes to compare against")
    idx = np.empty(other.size, dtype=np.int64)
    dist = np.empty(other.size, dtype=np.int64)
    for start in range(0, other.size, block):
        d = _popcount(other[start:start + block, None] ^ test[None, :])
        idx[start:start + block] = d.argmin(axis=1)
        dist[start:start + block] = d.min(axis=1)
    return idx, dist


def near_duplicates(test_hashes: Mapping[str, int], other_hashes: Mapping[str, int],
                    max_distance: int) -> list[tuple[str, str, int]]:
    """``(other_id, test_id, distance)`` for every other image within ``max_distance``.

    Each other image is reported once, against its nearest test image (ties: the test
    id that sorts first). The list is sorted by ``other_id``.
    """
    if not isinstance(max_distance, int) or not 0 <= max_distance <= HASH_BITS:
        raise ValueError(f"max_distance must be an int in [0, 64], got {max_distance!r}")
    if not test_hashes or not other_hashes:
        return []
    test_ids = sorted(test_hashes)
    other_ids = sorted(other_hashes)
    idx, dist = nearest(hash_array([test_hashes[t] for t in test_ids]),
                        hash_array([other_hashes[o] for o in other_ids]))
    return [(o, test_ids[int(i)], int(d))
            for o, i, d in zip(other_ids, idx, dist) if d <= max_distance]


# ---------------------------------------------------------------- groups and frames
def group_frames(images: Sequence[tuple[str, str]], pattern: str | None) -> dict[str, tuple[str, int]]:
    """``image id -> (group id, frame index)`` for ``(image id, file)`` pairs.

    ``pattern`` (the ``group_pattern`` option) is searched in the image id: its first group
    is the group id, an optional all-digit second group the frame index (without one, frames
    are ranked within their group by image id). Without a pattern every image is its own
    group, frame -1. An image id it does not match is a BadInput naming the option.

    >>> group_frames([("seqA_0003", "a"), ("seqA_0001", "b")], r"^(seq[A-Z])_")
    {'seqA_0003': ('seqA', 1), 'seqA_0001': ('seqA', 0)}
    """
    if pattern is None:
        return {iid: (iid, -1) for iid, _ in images}
    rx = re.compile(pattern)
    matches = {iid: rx.search(iid) for iid, _ in images}
    hits = sum(1 for m in matches.values() if m is not None and m.group(1))
    out: dict[str, tuple[str, int]] = {}
    unranked = defaultdict(list)
    for iid, where in images:
        m = matches[iid]
        if m is None or not m.group(1):
            raise BadInput(f"group_pattern {pattern!r} does not match image id {iid!r} "
                           f"(it matches {hits} of {len(images)} image ids)", where=where)
        frame = m.group(2) if rx.groups >= 2 else None
        if frame is not None and not (frame.isascii() and frame.isdigit()):
            raise BadInput(f"group_pattern {pattern!r}: frame number {frame!r} is not an integer",
                           where=where)
        out[iid] = (m.group(1), int(frame) if frame is not None else -1)
        if frame is None:
            unranked[m.group(1)].append(iid)
    for group, ids in unranked.items():
        out.update({iid: (group, i) for i, iid in enumerate(sorted(ids))})
    return out


def pattern_meta(pattern: str | None, image_id: str, meta: Sequence[tuple[str, str]], where: str,
                 ann_where: str) -> tuple[tuple[str, str], ...]:
    """Per-image meta, sorted: the annotation's fields ``meta`` plus the named groups of
    ``pattern`` (the ``meta_pattern`` option) searched in ``image_id``; a group that took
    no part in the match gives no value. BadInput if it does not match (naming ``where``)
    or a group has the name of an annotation field (naming ``ann_where``).

    >>> pattern_meta(r"^(?P<time>[01])_(?P<altitude>\\d+)_", "1_60_30_0_01609", (), "f", "f")
    (('altitude', '60'), ('time', '1'))
    """
    out = dict(meta)
    if pattern is None:
        return tuple(sorted(out.items()))
    rx = re.compile(pattern)
    clash = sorted(set(rx.groupindex) & set(out))
    if clash:
        raise BadInput(f"meta_pattern group {clash[0]!r} is also a field of image {image_id!r} "
                       "in the annotation; rename the group", where=ann_where)
    m = rx.search(image_id)
    if m is None:
        raise BadInput(f"meta_pattern {pattern!r} does not match image id {image_id!r}", where=where)
    out.update({k: v for k, v in m.groupdict().items() if v})
    return tuple(sorted(out.items()))


# ---------------------------------------------------------------- official split lists
def validate_split_lists(lists, split_mode: str) -> dict[str, str] | None:
    """The ``split_lists`` option as ``{split: file}`` (ValueError/TypeError if malformed)."""
    if lists is None:
        return None
    if split_mode != "lists":
        raise ValueError(f"split_lists is for split_mode 'lists', not {split_mode!r}")
    if not isinstance(lists, Mapping) or not lists:
        raise TypeError("split_lists must be a non-empty mapping split -> list file")
    bad = sorted(set(map(str, lists)) - set(SPLIT_NAMES))
    if bad or not all(isinstance(v, (str, Path)) and str(v) for v in lists.values()):
        raise ValueError(f"split_lists must map {SPLIT_NAMES} to list files, got {dict(lists)!r}")
    return {str(k): str(v) for k, v in lists.items()}


def list_names(root: Path, images: Sequence[tuple[str, Path]]) -> dict[str, set[str]]:
    """Every name a split list may use for an ``(image id, file)``: the id, the file stem,
    the file name and the path relative to ``root`` with and without extension."""
    names: dict[str, set[str]] = defaultdict(set)
    for iid, path in images:
        keys = {iid, path.stem, path.name}
        if path.is_relative_to(root):
            rel = path.relative_to(root).as_posix()
            keys |= {rel, rel.rsplit(".", 1)[0]}
        for k in keys:
            names[k].add(iid)
    return names


def split_list_files(root: Path, split_lists: Mapping[str, str] | None) -> dict[str, Path]:
    """``split -> list file``: ``split_lists`` (paths relative to ``root``), or the VOC lists
    ``ImageSets/Main/{train,val,test}.txt`` that exist. BadInput if a file is missing."""
    if split_lists is None:
        found = {s: root / VOC_LISTS / f"{s}.txt" for s in SPLIT_NAMES}
        found = {s: f for s, f in found.items() if f.is_file()}
        if not found:
            raise BadInput("split_mode 'lists' needs split lists: none of train.txt, val.txt, "
                           "test.txt is here; name them with split_lists (--split-lists)",
                           where=str(root / VOC_LISTS))
        return found
    out = {}
    for split, rel in split_lists.items():
        f = root / rel
        if not f.is_file():
            raise BadInput(f"split list not found (split_lists {split}={rel})", where=str(f))
        out[split] = f
    return out


def _entries(f: Path) -> list[tuple[int, str]]:
    try:
        lines = f.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise BadInput(f"split list is not UTF-8 text: {exc}", where=str(f)) from None
    out = []
    for n, line in enumerate(lines, start=1):
        entry = line.strip().replace("\\", "/")
        entry = entry[2:] if entry.startswith("./") else entry
        if entry and not entry.startswith("#"):
            out.append((n, entry))
    return out


def assign_lists(files: Mapping[str, Path], names: Mapping[str, set[str]]) -> dict[str, str]:
    """``image id -> split`` from the list files; ``names`` maps every name an image may be
    listed under (id, file stem, file name, relative path) to image ids. An entry naming no
    image or several, or an image in two lists, is a BadInput naming the list file and line."""
    split_of: dict[str, tuple[str, str]] = {}
    for split, f in files.items():
        for n, entry in _entries(f):
            ids = names.get(entry, set())
            where = f"{f}: line {n}"
            if not ids:
                raise BadInput(f"{entry!r} names no image of the source", where=where)
            if len(ids) > 1:
                raise BadInput(f"{entry!r} names {len(ids)} images: {sorted(ids)[:3]}", where=where)
            iid = next(iter(ids))
            if iid in split_of and split_of[iid][0] != split:
                raise BadInput(f"{entry!r} is also listed for {split_of[iid][0]} "
                               f"({split_of[iid][1]})", where=where)
            split_of.setdefault(iid, (split, where))
    return {iid: s for iid, (s, _) in split_of.items()}
