"""Source adapters: a VOC / YOLO / COCO / VisDrone folder -> canonical :class:`SourceRecord` s.

One :class:`SourceSpec` describes a source folder; :func:`stream_source` yields its
records one image at a time (test split first, then val, then train) and
:func:`load_source` collects them with a :class:`LoadReport`. On the way:

* every annotation is parsed before any image is decoded, and each class goes through
  the explicit ``class_map`` to the track's single ``target_label``, to an ignore region
  (``"ignore"``; also VisDrone category 0, COCO crowd, VOC difficult) or is dropped;
* images are decoded once with OpenCV (EXIF orientation ignored, so pixels match the
  annotation frame) and stored as lossless PNG; ``sha256`` is of the decoded pixels;
* boxes become float32 xyxy in full-frame pixels; a box past the frame by more than
  0.5 px or with zero area is a :class:`BadInput` naming the annotation file and the
  object/line, never silently clipped (overshoot within 0.5 px is clipped to the edge);
* splits are whole groups by SHA-256 (``split_mode="hash"``,
  :func:`~aegisbench.builders.splits.assign_split`), the dataset's own folders
  (``"folders"``) or its official split lists (``"lists"``; unlisted images left out);
* ``meta_pattern``'s named groups (and COCO image fields) become per-image ``meta``;
* a train/val image whose pHash is within ``phash_max_distance`` bits of a test image is
  reported with its test image; ``near_duplicates="exclude"`` (the default of hash splits)
  also leaves it out of train/val, ``"report"`` (the default of a source's own folders or
  official lists, which are used as they are) keeps it. The test split is never changed.

>>> import cv2, numpy as np, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> (d / "images" / "test").mkdir(parents=True); (d / "labels" / "test").mkdir(parents=True)
>>> _ = cv2.imwrite(str(d / "images/test/a.png"), np.full((40, 80, 3), 90, np.uint8))
>>> _ = (d / "labels/test/a.txt").write_text("0 0.5 0.5 0.25 0.5\\n")
>>> spec = SourceSpec("demo", "yolo", d, {"0": "person"}, "person", split_mode="folders")
>>> load = load_source(spec)
>>> [(r.image_id, r.split, r.boxes.tolist()) for r in load.records]
[('a', 'test', [[30.0, 10.0, 50.0, 30.0]])]
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from aegisbench.fields import check_int, did_you_mean
from aegisbench.builders import adapters_formats as fmt
from aegisbench.builders.adapters_diagnose import empty_source_message
from aegisbench.builders.adapters_report import NEAR_DUPLICATE_POLICIES, LoadReport, NearDuplicate, SourceLoad
from aegisbench.builders.source_table import SourceRecord
from aegisbench.dataset.images import encode_png
from aegisbench.builders.splits import (SPLIT_NAMES, VOC_LISTS, assign_lists, assign_split,
                                        group_frames, hash_array, list_names, nearest,
                                        pattern_meta, phash, split_list_files,
                                        validate_fractions, validate_split_lists)
from aegisbench.errors import BadInput, as_bad_input
from aegisbench.hashing import pixel_sha256
from aegisbench.readers import check_png_payload, read_image_bytes
from aegisbench.builders.source_kinds import SOURCE_FORMATS

log = logging.getLogger(__name__)

SPLIT_MODES = ("hash", "folders", "lists")
BOX_TOLERANCE_PX = 0.5
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_ORDER = {"test": 0, "val": 1, "train": 2}  # test first: its hashes are needed for dedup


def _regex(pattern, option: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except (re.error, TypeError) as exc:
        raise ValueError(f"{option} {pattern!r} is not a valid regex: {exc}") from None


@dataclass(frozen=True)
class SourceSpec:
    """Where a source is, how to read it and how to split it.

    ``class_map`` maps each class name (or id, as a string) of the dataset to
    ``target_label``, to None / ``"none"`` (drop) or to ``"ignore"`` (ignore region); a
    class missing from it is an error. ``group_pattern`` is searched in the image id
    (relative path without extension and without split/layout folders; the file stem for
    flat layouts); its first group is the group id, an optional second all-digit group
    the frame index. Without a pattern every image is its own group (frame index -1).
    ``meta_pattern``'s named groups become per-image meta columns. ``split_lists`` (split
    -> file relative to ``path``) is for ``split_mode="lists"``.
    """

    name: str
    format: str
    path: Path
    class_map: Mapping[str, str | None] = field(hash=False)
    target_label: str
    split_mode: str = "hash"
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15)
    group_pattern: str | None = None
    phash_max_distance: int | None = 6
    split_key: str | None = None  # salt of the split hash; defaults to ``name``
    coordinate_base: str | int = "auto"  # VOC: "auto" | 0 | 1; other formats are 0-based
    split_lists: Mapping[str, str] | None = field(default=None, hash=False)
    meta_pattern: str | None = None
    near_duplicates: str | None = None  # "exclude" | "report"; default: exclude for hash splits, report else

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"name must be snake_case, got {self.name!r}")
        for key, choices in (("format", SOURCE_FORMATS.names()), ("split_mode", SPLIT_MODES)):
            value = getattr(self, key)
            if value not in choices:
                raise ValueError(f"{key} must be one of {choices}, got {value!r}{did_you_mean(value, choices)}")
        if not isinstance(self.path, (str, Path)):
            raise TypeError("path must be a str or Path")
        object.__setattr__(self, "path", Path(self.path))
        if not isinstance(self.target_label, str) or not self.target_label or \
                self.target_label.lower() in ("none", fmt.IGNORE):
            raise ValueError(f"target_label must be a label name, got {self.target_label!r}")
        object.__setattr__(self, "class_map", fmt.validate_class_map(self.class_map, self.target_label))
        object.__setattr__(self, "fractions", validate_fractions(self.fractions))
        object.__setattr__(self, "coordinate_base",
                           fmt.validate_coordinate_base(self.coordinate_base, self.format))
        object.__setattr__(self, "split_lists", validate_split_lists(self.split_lists, self.split_mode))
        if self.group_pattern is not None and _regex(self.group_pattern, "group_pattern").groups < 1:
            raise ValueError(f"group_pattern {self.group_pattern!r} needs a capturing group "
                             "(the group id)")
        if self.meta_pattern is not None and not _regex(self.meta_pattern, "meta_pattern").groupindex:
            raise ValueError(f"meta_pattern {self.meta_pattern!r} has no named groups; name each "
                             "column, e.g. (?P<time>day|night)")
        if self.phash_max_distance is not None:
            check_int(self.phash_max_distance, "phash_max_distance", 0, 64)
        policy = self.near_duplicates or ("exclude" if self.split_mode == "hash" else "report")
        if policy not in NEAR_DUPLICATE_POLICIES:
            raise ValueError(f"near_duplicates must be one of {NEAR_DUPLICATE_POLICIES}, got {policy!r}"
                             f"{did_you_mean(policy, NEAR_DUPLICATE_POLICIES)}")
        object.__setattr__(self, "near_duplicates", policy)
        if self.split_key is not None and not isinstance(self.split_key, str):
            raise TypeError("split_key must be a string")

    @classmethod
    def from_options(cls, name: str, format: str, options: Mapping,
                     where: str | None = None) -> "SourceSpec":
        """Build from a ``params.yaml`` source entry; any problem is a BadInput naming
        ``where`` (default: the params entry)."""
        where = where or f"params.yaml: sources.{name}"
        with as_bad_input(where):
            opts = dict(options)
            if isinstance(opts.get("fractions"), str):
                opts["fractions"] = opts["fractions"].split(",")
            if "fractions" in opts:
                opts["fractions"] = tuple(opts["fractions"])
            if isinstance(opts.get("split_lists"), str):
                opts["split_lists"] = dict(kv.split("=", 1) for kv in opts["split_lists"].split(","))
            return cls(name=name, format=format, **opts)

    @property
    def key(self) -> str:
        return self.split_key if self.split_key is not None else self.name


@dataclass(frozen=True)
class _Planned:
    raw: fmt.RawImage
    split: str
    group_id: str
    frame_index: int
    meta: tuple[tuple[str, str], ...]


def _parse(spec: SourceSpec) -> fmt.ParseResult:
    if not spec.path.is_dir():
        raise BadInput("source folder not found", where=str(spec.path))
    return SOURCE_FORMATS.get(spec.format)(spec.path, fmt.make_mapper(spec.class_map), spec)


def _splits(spec: SourceSpec, images: list[fmt.RawImage], groups: dict) -> dict[str, str]:
    """``image id -> split``; in lists mode only the listed images."""
    if spec.split_mode == "hash":
        return {r.image_id: assign_split(groups[r.image_id][0], spec.fractions, spec.key)
                for r in images}
    if spec.split_mode == "lists":
        files = split_list_files(spec.path, spec.split_lists)
        return assign_lists(files, list_names(spec.path, [(r.image_id, r.image_path) for r in images]))
    out = {}
    for r in images:
        if r.folder_split is None:
            hint = ("; the folder has ImageSets/Main split lists: use split_mode 'lists'"
                    if (spec.path / VOC_LISTS).is_dir() else "")
            raise BadInput(f"image is not inside a train/val/test folder (split_mode='folders'){hint}",
                           where=str(r.image_path))
        out[r.image_id] = r.folder_split
    return out


def _plan(spec: SourceSpec, images: list[fmt.RawImage]) -> tuple[list[_Planned], tuple[str, ...], int]:
    """The planned records (sorted test, val, train), straddling groups, unlisted images."""
    seen: dict[str, Path] = {}
    for r in images:
        if r.image_id in seen:
            raise BadInput(f"image id {r.image_id!r} also used by {seen[r.image_id]}",
                           where=str(r.image_path))
        seen[r.image_id] = r.image_path
    groups = group_frames([(r.image_id, str(r.image_path)) for r in images], spec.group_pattern)
    split_of = _splits(spec, images, groups)
    plan = [_Planned(r, split_of[r.image_id], *groups[r.image_id],
                     pattern_meta(spec.meta_pattern, r.image_id, r.meta, str(r.image_path),
                                  str(r.ann_path or r.image_path)))
            for r in images if r.image_id in split_of]
    unlisted = len(images) - len(plan)
    if unlisted:
        log.info("%s: %d images are in no split list and are left out", spec.name, unlisted)
    splits_of = defaultdict(set)
    for p in plan:
        splits_of[p.group_id].add(p.split)
    straddling = tuple(sorted(g for g, s in splits_of.items() if len(s) > 1))
    if straddling:
        log.warning("%s: %d groups straddle the dataset's own splits", spec.name, len(straddling))
    present = {p.split for p in plan}
    for split, frac in zip(SPLIT_NAMES, spec.fractions):
        if spec.split_mode == "hash" and frac > 0 and split not in present:
            log.warning("%s: no group fell into %s (%d groups)", spec.name, split, len(splits_of))
    plan.sort(key=lambda p: (_ORDER[p.split], p.raw.image_id))
    return plan, straddling, unlisted


def read_image(path: Path) -> np.ndarray:
    """Decode an image file to RGB uint8 (EXIF orientation ignored); BadInput if corrupt,
    or before decoding if its header declares more pixels than the declared limit."""
    data = read_image_bytes(path)
    if data[:2] == b"\xff\xd8":  # JPEG: libjpeg decodes a truncated file with a warning only
        sos = data.rfind(b"\xff\xda")
        if sos < 0 or data.find(b"\xff\xd9", sos) < 0:
            raise BadInput("truncated JPEG (no end-of-image marker)", where=str(path))
    if data[:8] == b"\x89PNG\r\n\x1a\n":  # libpng decodes the header's size of other data with a warning only
        check_png_payload(data, str(path))
    img = cv2.imdecode(np.frombuffer(data, np.uint8),
                       cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION) if data else None
    if img is None:
        raise BadInput("cannot decode image (corrupt or unsupported file)", where=str(path))
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def pixel_boxes(raw: fmt.RawImage, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Boxes and ignore regions of ``raw`` in pixels (float32), checked against a
    ``width`` x ``height`` frame (overshoot within 0.5 px clipped)."""
    where = str(raw.ann_path or raw.image_path)
    if raw.expected_size is not None and raw.expected_size != (width, height):
        raise BadInput(f"annotation says {raw.expected_size[0]}x{raw.expected_size[1]} but "
                       f"{raw.image_path.name} is {width}x{height}", where=where)
    return tuple(_to_pixels(b, refs, raw.normalized, width, height, where)
                 for b, refs in ((raw.boxes, raw.refs), (raw.ignore, raw.ignore_refs)))


def _to_pixels(b: np.ndarray, refs, normalized: bool, width: int, height: int, where: str):
    b = b * np.array([width, height, width, height]) if normalized else b
    t = BOX_TOLERANCE_PX
    for (x1, y1, x2, y2), ref in zip(b.tolist(), refs):
        if x1 < -t or y1 < -t or x2 > width + t or y2 > height + t:
            raise BadInput(f"{ref}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) lies outside the "
                           f"{width}x{height} image (tolerance {t} px)", where=where)
    b = np.clip(b, 0, [width, height, width, height]).astype(np.float32).reshape(-1, 4)
    fmt.check_area(b, refs, where)
    return b


class SourceStream:
    """Single-pass iterator of a source's records; ``report`` once it is exhausted. Annotations
    are parsed (class-mapped, area-checked) when the stream is made, so annotation errors surface
    before any image is decoded; with ``require_boxes`` a source without a box is refused."""

    def __init__(self, spec: SourceSpec, require_boxes: bool = True):
        self.spec = spec
        parsed = _parse(spec)
        self._dropped, self._base = dict(parsed.dropped), parsed.coordinate_base
        for r in parsed.images:  # sizes declared by VOC/COCO: check geometry early
            if r.expected_size is not None:
                pixel_boxes(r, *r.expected_size)
        self._plan, self._straddling, self._unlisted = _plan(spec, parsed.images)
        if require_boxes and self._plan and not any(len(p.raw.boxes) for p in self._plan):
            raise BadInput(empty_source_message(spec, parsed), where=str(spec.path))
        self._report: LoadReport | None = None
        self._started = False

    def __len__(self) -> int:
        """Images planned (before near-duplicate exclusion)."""
        return len(self._plan)

    def __iter__(self) -> Iterator[SourceRecord]:
        if self._started:
            raise RuntimeError("a SourceStream can be iterated only once")
        self._started = True
        return self._run()

    def _run(self) -> Iterator[SourceRecord]:
        spec, dmax = self.spec, self.spec.phash_max_distance
        counts, boxes, negs, n_ignore, columns = Counter(), Counter(), Counter(), 0, set()
        test_ids: list[str] = []
        test_hashes: list[int] = []
        test_arr = None
        found: list[NearDuplicate] = []
        for p in self._plan:
            img = read_image(p.raw.image_path)
            h, w = img.shape[:2]
            b, ig = pixel_boxes(p.raw, w, h)
            if dmax is not None:
                ph = phash(img)
                if p.split == "test":
                    test_ids.append(p.raw.image_id)
                    test_hashes.append(ph)
                elif test_ids:
                    if test_arr is None:
                        test_arr = hash_array(test_hashes)
                    idx, dist = nearest(test_arr, hash_array([ph]))
                    if dist[0] <= dmax:
                        found.append(NearDuplicate(p.raw.image_id, p.split, test_ids[int(idx[0])], int(dist[0])))
                        if spec.near_duplicates == "exclude":
                            continue
            counts[p.split] += 1
            boxes[p.split] += len(b)
            negs[p.split] += len(b) == 0
            n_ignore += len(ig)
            columns.update(k for k, _ in p.meta)
            yield SourceRecord(image_id=p.raw.image_id, split=p.split, source=spec.name,
                               png=encode_png(img), width=int(w), height=int(h), boxes=b,
                               labels=(spec.target_label,) * len(b), sha256=pixel_sha256(img),
                               group_id=p.group_id, frame_index=p.frame_index, ignore=ig,
                               meta=p.meta)
        excluded = found if spec.near_duplicates == "exclude" else []
        if found:
            log.warning("%s: %d train/val images nearly duplicate a test image (pHash within %d bits): %s; the "
                        "pairs are in the source's report", spec.name, len(found), dmax,
                        "excluded from train/val" if excluded else f"kept ({spec.split_mode} splits are used as "
                        "they are; near_duplicates: exclude / --near-duplicates exclude removes them)")
        self._report = LoadReport(
            source=spec.name, split_counts={s: counts[s] for s in SPLIT_NAMES},
            box_counts={s: boxes[s] for s in SPLIT_NAMES},
            negative_counts={s: negs[s] for s in SPLIT_NAMES},
            dropped_annotations=dict(sorted(self._dropped.items())),
            ignored_regions=n_ignore,
            excluded=tuple(sorted(excluded, key=lambda e: e.image_id)),
            near_duplicates=tuple(sorted(found, key=lambda e: e.image_id)), near_duplicate_policy=spec.near_duplicates,
            straddling_groups=self._straddling, coordinate_base=self._base,
            unlisted=self._unlisted, meta_columns=tuple(sorted(columns)))

    @property
    def report(self) -> LoadReport:
        if self._report is None:
            raise RuntimeError("report is available once the stream has been consumed")
        return self._report


def stream_source(spec: SourceSpec) -> SourceStream:
    """Records one image at a time (bounded memory): ``for rec in stream: ...`` then ``.report``."""
    return SourceStream(spec)


def load_source(spec: SourceSpec, require_boxes: bool = False) -> SourceLoad:
    """All records of a source in memory plus the report (fixture-sized sources; unlike the
    build's :func:`stream_source`, a source without boxes is read unless ``require_boxes``)."""
    stream = SourceStream(spec, require_boxes)
    records = tuple(stream)
    return SourceLoad(records=records, report=stream.report)
