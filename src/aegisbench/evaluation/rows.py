"""Row-level checks of submitted boxes, collecting every problem (not just the first).

Each prediction form (contract Parquet, COCO results JSON, YOLO txt) is parsed into
:class:`RawRows` (columns plus the file and row/line each value came from);
:func:`check_rows` then reports, per row and field: unknown config / split / image,
NaN or inf, ``x2 <= x1`` / ``y2 <= y1`` (in float32, as stored), boxes outside the
frame beyond a tolerance, scores outside [0, 1], duplicate rows, and images with
more detections than the cap. Every check is vectorized (linear in the rows, plus one
sort for duplicates); user-supplied values are quoted with :func:`shown` (at most
:data:`SHOWN_CHARS`) and every problem prints as one safe line (:func:`~aegisbench.errors.printable`).

>>> shown("x" * 100)[-6:]
'xxx...'
>>> p = Problems()
>>> p.add("predictions.parquet", 3, "x1", "null or not finite")
>>> str(p.items[0])
'predictions.parquet:row 3 field x1: null or not finite'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from aegisbench.errors import printable

BOX = ("x1", "y1", "x2", "y2")
#: Longest quotation of a user-supplied value (an image id, a config name) in a message.
SHOWN_CHARS = 80


def repeat(value: object, n: int) -> np.ndarray:
    """An object array of ``n`` references to ``value`` (``np.full`` would make ``n`` copies
    of a string)."""
    out = np.empty(n, object)
    out.fill(value)
    return out


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters (``...`` marks a cut)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    return clip(repr(value), limit)


@dataclass(frozen=True, order=True)
class Problem:
    """One problem: ``file:row N field F: message`` (``line`` for YOLO text files)."""

    file: str
    row: int  # -1 = the whole file / field
    field: str
    message: str
    unit: str = "row"

    def __str__(self) -> str:
        loc = self.file
        if self.row >= 0:
            loc += f":{self.unit} {self.row}"
            if self.field:
                loc += f" field {self.field}"
        elif self.field:
            loc += f": field {self.field}"
        return printable(f"{loc}: {self.message}")


@dataclass
class Problems:
    """Collector keeping the first ``keep`` problems and the total count."""

    keep: int = 10_000
    items: list[Problem] = field(default_factory=list)
    total: int = 0
    file_level: int = 0  # problems not tied to a row (unreadable file, bad column, ...)

    def add(self, file: str, row: int | None, fld: str | None, message: str, unit: str = "row") -> None:
        self.total += 1
        self.file_level += row is None
        if len(self.items) < self.keep:
            self.items.append(Problem(str(file), -1 if row is None else int(row), fld or "", message, unit))

    def add_rows(self, files: np.ndarray, rows: np.ndarray, fld: str, message: str | Callable[[int], str],
                 unit: str = "row", which: np.ndarray | None = None) -> None:
        """Add one problem per selected row (``which``: indices into ``files``/``rows``)."""
        idx = np.arange(len(rows)) if which is None else np.asarray(which)
        for i in idx[: max(0, self.keep - len(self.items))]:
            msg = message(int(i)) if callable(message) else message
            self.items.append(Problem(str(files[i]), int(rows[i]), fld, msg, unit))
        self.total += len(idx)

    def __bool__(self) -> bool:
        return self.total > 0

    def sorted(self) -> list[Problem]:
        return sorted(self.items)


@dataclass
class RawRows:
    """Parsed but unchecked rows. ``reported`` marks rows whose parse already failed."""

    file: np.ndarray  # (n,) object
    row: np.ndarray  # (n,) int64 row (0-based) or line (1-based) label
    config: np.ndarray  # (n,) object
    split: np.ndarray
    image_id: np.ndarray
    xyxy: np.ndarray  # (n, 4) float64
    score: np.ndarray  # (n,) float64
    unit: str = "row"
    fields: dict[str, str] = field(default_factory=dict)  # our column -> name reported to the user
    reported: np.ndarray | None = None
    extra: np.ndarray | None = None  # extra grouping key (e.g. patch position) for duplicates / cap
    codes: dict = field(default_factory=dict, repr=False)  # column -> (uniques, codes), see :meth:`code`

    def __post_init__(self) -> None:
        n = len(self.row)
        if self.reported is None:
            self.reported = np.zeros(n, bool)
        for name in ("file", "config", "split", "image_id"):
            v = getattr(self, name)
            if np.ndim(v) == 0:
                setattr(self, name, repeat(v, n))

    def __len__(self) -> int:
        return len(self.row)

    def name(self, col: str) -> str:
        return self.fields.get(col, col)

    def pairs(self) -> set[tuple[str, str]]:
        """The ``(config, split)`` pairs of the rows whose parse did not fail."""
        (cu, cc), (su, sc) = self.code("config"), self.code("split")
        ok = ~self.reported
        pair = np.unique(cc[ok] * (len(su) + 1) + sc[ok])
        return {(cu[p // (len(su) + 1)], su[p % (len(su) + 1)]) for p in pair.tolist()}

    def code(self, col: str) -> tuple[np.ndarray, np.ndarray]:
        """``(uniques, codes)`` of a string column (computed once; a parser may set them)."""
        if col not in self.codes:
            self.codes[col] = _codes(getattr(self, col))
        return self.codes[col]

    @classmethod
    def concat(cls, parts: list[RawRows], unit: str, fields: dict[str, str]) -> RawRows:
        if not parts:
            e = np.zeros(0, object)
            return cls(e, np.zeros(0, np.int64), e, e, e, np.zeros((0, 4)), np.zeros(0), unit, fields)
        cat = lambda a: np.concatenate([getattr(p, a) for p in parts])  # noqa: E731
        return cls(cat("file"), cat("row"), cat("config"), cat("split"), cat("image_id"), cat("xyxy"),
                   cat("score"), unit, fields, cat("reported"))


@dataclass(frozen=True)
class Frames:
    """Per (config, split) image sizes and the track's keys, for membership checks."""

    sizes: dict[tuple[str, str], dict[str, tuple[int, int]]]  # (config, split) -> image -> (w, h)
    configs: set[str]  # every config of the dataset
    split_track: dict[tuple[str, str], str]  # (config, split) -> track of its source
    track: str


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(uniques, codes)`` of an object array of strings (code -1: null or not a string)."""
    try:
        arr = pa.array(values, type=pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        arr = pa.array([v if isinstance(v, str) else None for v in values], type=pa.string())
    enc = arr.dictionary_encode()
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.asarray(enc.dictionary.to_pylist() + [""], dtype=object), codes


def check_membership(raw: RawRows, frames: Frames, problems: Problems) -> np.ndarray:
    """Report rows naming unknown configs, splits or images; returns the (w, h) of each
    row's image (NaN for rows that are reported or unknown)."""
    n = len(raw)
    wh = np.full((n, 2), np.nan)
    ok = ~raw.reported
    codes = {}
    for col in ("config", "split", "image_id"):
        uniq, code = codes[col] = raw.code(col)
        bad = ok & ((code < 0) | (uniq[code] == ""))
        problems.add_rows(raw.file, raw.row, raw.name(col), "empty or null", raw.unit, np.flatnonzero(bad))
        ok &= ~bad
    if not ok.any():
        return wh
    (cu, cc), (su, sc), (iu, ic) = codes["config"], codes["split"], codes["image_id"]
    pair = cc * (len(su) + 1) + sc
    for p in np.unique(pair[ok]):
        sel = np.flatnonzero(ok & (pair == p))
        config, split = cu[cc[sel[0]]], su[sc[sel[0]]]
        if config not in frames.configs:
            problems.add_rows(raw.file, raw.row, raw.name("config"), f"unknown config {shown(config)}", raw.unit, sel)
            continue
        track = frames.split_track.get((config, split))
        if track is None:
            problems.add_rows(raw.file, raw.row, raw.name("split"),
                              f"config {shown(config)} has no split {shown(split)}", raw.unit, sel)
            continue
        if track != frames.track:
            problems.add_rows(raw.file, raw.row, raw.name("split"),
                              f"split {shown(split)} belongs to track {track!r}, not {frames.track!r}", raw.unit,
                              sel)
            continue
        sizes = frames.sizes[(config, split)]
        images, inverse = np.unique(ic[sel], return_inverse=True)
        table = np.array([sizes.get(iu[c], (np.nan, np.nan)) for c in images], np.float64).reshape(-1, 2)
        got = table[inverse.reshape(-1)]
        missing = np.isnan(got[:, 0])
        problems.add_rows(raw.file, raw.row, raw.name("image_id"),
                          lambda i: f"image {shown(raw.image_id[i])} is not in config {config!r} split {split!r}",
                          raw.unit, sel[missing])
        wh[sel] = got
    return wh


def check_values(raw: RawRows, wh: np.ndarray, problems: Problems, tolerance_px: float) -> np.ndarray:
    """Report non-finite values, empty boxes, out-of-frame boxes and bad scores; returns
    the mask of rows without any problem so far."""
    ok = ~raw.reported
    bad_any = np.zeros(len(raw), bool)
    with np.errstate(invalid="ignore", over="ignore"):
        b32 = raw.xyxy.astype(np.float32)
        fin = np.isfinite(b32)
        for j, col in enumerate(BOX):
            bad = ok & ~fin[:, j]
            problems.add_rows(raw.file, raw.row, raw.name(col), "null or not finite", raw.unit, np.flatnonzero(bad))
            bad_any |= bad
        s = raw.score
        bad = ok & ~np.isfinite(s)
        problems.add_rows(raw.file, raw.row, raw.name("score"), "null or not finite", raw.unit, np.flatnonzero(bad))
        bad_any |= bad
        bad = ok & np.isfinite(s) & ((s < 0) | (s > 1))
        problems.add_rows(raw.file, raw.row, raw.name("score"), lambda i: f"score {s[i]:g} outside [0, 1]",
                          raw.unit, np.flatnonzero(bad))
        bad_any |= bad
        for lo, hi, axis in ((0, 2, "x"), (1, 3, "y")):
            bad = ok & fin[:, lo] & fin[:, hi] & ~(b32[:, hi] > b32[:, lo])
            problems.add_rows(raw.file, raw.row, raw.name(BOX[hi]), f"{axis}2 must exceed {axis}1", raw.unit,
                              np.flatnonzero(bad))
            bad_any |= bad
        known = ok & np.isfinite(wh[:, 0])
        t = float(tolerance_px)
        for j, col in enumerate(BOX):
            limit = -t if j < 2 else wh[:, (j - 2)] + t
            v = raw.xyxy[:, j]
            bad = known & fin[:, j] & ((v < limit) if j < 2 else (v > limit))
            side = ("< " + f"{-t:g}") if j < 2 else "> frame " + ("width" if j == 2 else "height") + f" + {t:g}"
            problems.add_rows(raw.file, raw.row, raw.name(col),
                              lambda i, j=j, side=side:
                              f"box outside the frame ({BOX[j]}={raw.xyxy[i, j]:g} {side} px)",
                              raw.unit, np.flatnonzero(bad))
            bad_any |= bad
    return ok & ~bad_any & ~np.isnan(wh[:, 0])


def _group_codes(cols: list[np.ndarray]) -> np.ndarray:
    """One int64 code per distinct tuple of integer columns, ordered as the tuples are."""
    key = np.zeros(len(cols[0]), np.int64)
    for col in cols:
        col = np.asarray(col, np.int64)
        col = col - col.min()
        key = np.unique(key * (int(col.max()) + 1) + col, return_inverse=True)[1].reshape(-1)
    return key


def check_duplicates_and_cap(raw: RawRows, valid: np.ndarray, problems: Problems, max_dets: int) -> None:
    """Report exact duplicate rows (same image and values) and images over the cap
    (one sort of the valid rows; every message is built in constant time)."""
    idx = np.flatnonzero(valid)
    if not len(idx):
        return
    extra = raw.extra[idx] if raw.extra is not None else np.zeros(len(idx), np.int64)
    group = _group_codes([raw.code(c)[1][idx] for c in ("config", "split", "image_id")] + [np.asarray(extra)])
    values = [raw.xyxy[idx, j] for j in range(4)] + [raw.score[idx]]
    order = np.lexsort((*values[::-1], group))  # stable: equal rows keep file order
    g = group[order]
    same_group = g[1:] == g[:-1]
    same_row = same_group.copy()
    for col in values:
        v = col[order]
        same_row &= v[1:] == v[:-1]
    first = np.maximum.accumulate(np.where(np.r_[True, ~same_row], np.arange(len(order)), 0))
    dup = np.flatnonzero(np.r_[False, same_row])
    rows, files = raw.row[idx][order], raw.file[idx][order]
    problems.add_rows(files, rows, ",".join(dict.fromkeys(raw.name(c) for c in (*BOX, "score"))),
                      lambda k: f"duplicate of {raw.unit} {rows[first[k]]}", raw.unit, dup)
    starts = np.flatnonzero(np.r_[True, ~same_group])
    sizes = np.diff(np.r_[starts, len(order)])
    for start, size in zip(starts[sizes > max_dets], sizes[sizes > max_dets]):
        k = idx[np.sort(order[start:start + size])[max_dets]]
        problems.add(raw.file[k], raw.row[k], raw.name("image_id"),
                     f"image {shown(raw.image_id[k])} has {size} detections, more than the cap of {max_dets}",
                     raw.unit)


def check_rows(raw: RawRows, frames: Frames, problems: Problems, *, tolerance_px: float, max_dets: int,
               membership: bool = True, wh: np.ndarray | None = None) -> np.ndarray:
    """All row checks; returns the mask of valid rows (membership known and values sound)."""
    if membership:
        wh = check_membership(raw, frames, problems)
    valid = check_values(raw, wh, problems, tolerance_px)
    check_duplicates_and_cap(raw, valid, problems, max_dets)
    return valid
