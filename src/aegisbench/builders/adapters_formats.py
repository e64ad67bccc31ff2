"""Annotation readers for the four source formats (used by :mod:`.adapters`).

Each reader (VOC and YOLO here, COCO and VisDrone in :mod:`.adapters_coco`) walks a dataset
folder, parses *every* annotation eagerly (text only, so a malformed file fails before any
image is decoded) and returns :class:`RawImage` items with their boxes and ignore regions;
pixels are decoded later, one image at a time. Coordinate conventions:

* **VOC** ``<bndbox>`` holds pixel indices. ``coordinate_base=1`` (VOC's own convention):
  ``x1 = xmin - 1, y1 = ymin - 1, x2 = xmax, y2 = ymax`` (continuous 0-based edges;
  ``xmin == xmax`` is a one-pixel-wide box); ``0``: the values are taken as edges.
  ``"auto"`` picks 0 for the whole set if any xmin/ymin is 0 (no 1-based index), else 1.
  Objects marked ``<difficult>1</difficult>`` become ignore regions.
* **YOLO** lines ``cls cx cy w h`` are fractions of the frame; kept normalised here
  and scaled by the decoded size.
* **COCO** ``bbox`` is ``[x, y, w, h]`` in 0-based continuous pixels; ``iscrowd=1``
  regions of a kept class become ignore regions.
* **VisDrone-DET** lines ``left,top,width,height,score,category,truncation,occlusion``
  in pixels; category 0 (ignored region) and score-0 rows of a kept class become
  ignore regions.

Any class mapped to ``"ignore"`` in ``class_map`` becomes an ignore region too.

>>> split_of_name("VisDrone2019-DET-test-dev"), split_of_name("trainImages"), split_of_name("x")
('test', 'train', None)
"""

from __future__ import annotations

import logging
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from aegisbench.builders.source_kinds import SOURCE_FORMATS
from aegisbench.errors import BadInput, printable
from aegisbench.readers import MAX_TEXT_BYTES, read_regular_bytes, read_text, read_yaml

log = logging.getLogger(__name__)

IGNORE = "ignore"  # the class_map value that turns a class into ignore regions
IMAGE_EXTS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})
_SPLIT_ALIASES = {"train": "train", "training": "train", "trainimages": "train",
                  "val": "val", "valid": "val", "validation": "val", "valimages": "val",
                  "test": "test", "testing": "test", "testimages": "test"}
_LAYOUT_DIRS = frozenset({"images", "jpegimages", "img", "imgs", "labels", "annotations"})
_ANN_DIRS = ("Annotations", "annotations", "labels", "Labels", "xml")
_YAML_NAMES = ("data.yaml", "data.yml", "dataset.yaml")


def _no_boxes() -> np.ndarray:
    return np.zeros((0, 4), np.float64)


@dataclass(frozen=True)
class RawImage:
    """One image before decoding: where it is, its kept boxes and ignore regions (xyxy)."""

    image_id: str
    image_path: Path
    folder_split: str | None
    ann_path: Path | None
    boxes: np.ndarray  # float64 (n, 4); pixels, or fractions of the frame if normalized
    refs: tuple[str, ...]  # "object 2" / "line 5" per box, for error messages
    normalized: bool = False
    expected_size: tuple[int, int] | None = None  # (width, height) declared by the annotation
    ignore: np.ndarray = field(default_factory=_no_boxes)  # float64 (k, 4), like boxes
    ignore_refs: tuple[str, ...] = ()
    meta: tuple[tuple[str, str], ...] = ()  # fields of the annotation (COCO image fields)


@dataclass
class ParseResult:
    images: list[RawImage] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # original class -> boxes mapped to None
    coordinate_base: int = 0  # the base the boxes were read with (VOC: 0 or 1; others 0)


ClassMapper = Callable[[tuple[str, ...], str, str], "str | None"]


def make_mapper(class_map: Mapping[str, str | None]) -> ClassMapper:
    """``mapper(candidates, where, ref)``: the target label, ``"ignore"`` or None of the
    first candidate key found in ``class_map``; BadInput if none is."""
    def mapper(candidates: tuple[str, ...], where: str, ref: str) -> str | None:
        for key in candidates:
            if key in class_map:
                return class_map[key]
        raise BadInput(f"{ref}: unknown class {' / '.join(map(repr, candidates))} "
                       f"(not in class_map, which has {sorted(class_map)})", where=where)
    return mapper


def validate_class_map(class_map, target_label: str) -> dict[str, str | None]:
    """``class_map`` with string keys and values ``target_label``, None or ``"ignore"``
    (``"none"`` read as None); TypeError/ValueError otherwise."""
    if not isinstance(class_map, Mapping) or not class_map:
        raise TypeError("class_map must be a non-empty mapping")
    cmap = {}
    for k, v in class_map.items():
        if isinstance(k, bool) or not isinstance(k, (str, int)):
            raise TypeError(f"class_map key {k!r} must be a class name or id")
        if isinstance(v, str) and v.lower() in ("none", IGNORE):
            v = None if v.lower() == "none" else IGNORE
        if v is not None and v not in (target_label, IGNORE):
            raise ValueError(f"class_map[{k!r}] = {v!r}: values must be "
                             f"{target_label!r}, 'none' or 'ignore'")
        cmap[str(k)] = v
    return cmap


def validate_coordinate_base(base, format: str) -> str | int:
    """``"auto"``, 0 or 1 (``"0"``/``"1"`` accepted); 1 only for VOC."""
    value = int(base) if isinstance(base, str) and base.strip() in ("0", "1") else base
    if isinstance(value, bool) or value not in ("auto", 0, 1):
        raise ValueError(f"coordinate_base must be 'auto', 0 or 1, got {base!r}")
    if value == 1 and format != "voc":
        raise ValueError(f"coordinate_base 1 is for VOC only: {format} boxes are 0-based "
                         "by definition (use auto or 0)")
    return value


def split_of_name(name: str) -> str | None:
    """'train' / 'val' / 'test' if a folder or file name says so, else None."""
    found = set()
    for tok in re.split(r"[^a-z0-9]+", name.lower()):
        alias = _SPLIT_ALIASES.get(tok) or _SPLIT_ALIASES.get(tok.rstrip("0123456789"))
        if alias:
            found.add(alias)
    return found.pop() if len(found) == 1 else None


def locate(path: Path, root: Path) -> tuple[str, str | None]:
    """``(image_id, split)`` of a file under ``root``.

    The split is named by the outermost folder whose name says train/val/test (e.g.
    ``images/train``, ``VisDrone2019-DET-val``, ``trainImages``); the image id is the
    relative path without extension, without that folder and without layout folders
    (``images``, ``JPEGImages``, ``labels``, ``annotations``).

    >>> locate(Path("r/images/train/seq1/a.jpg"), Path("r"))
    ('seq1/a', 'train')
    """
    parts = path.relative_to(root).with_suffix("").parts
    split, split_at = None, -1
    for i, part in enumerate(parts[:-1]):
        if (s := split_of_name(part)) is not None:
            split, split_at = s, i
            break
    keep = [p for i, p in enumerate(parts[:-1]) if i != split_at and p.lower() not in _LAYOUT_DIRS]
    return "/".join(keep + [parts[-1]]), split


def list_images(root: Path) -> list[Path]:
    """Image files under ``root`` (recursive, hidden folders skipped), sorted."""
    return sorted(p for p in root.rglob("*") if p.suffix.lower() in IMAGE_EXTS and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def _mirror(img: Path, root: Path, layout: str, suffix: str) -> Path:
    """``.../images/<rel>.jpg`` -> ``.../<layout>/<rel><suffix>``; beside the image if no images/."""
    parts = list(img.relative_to(root).parts)
    low = [p.lower() for p in parts[:-1]]
    if "images" in low:
        parts[len(low) - 1 - low[::-1].index("images")] = layout
        return (root.joinpath(*parts)).with_suffix(suffix)
    return img.with_suffix(suffix)


def _orphans(root: Path, dir_name: str, suffix: str, claimed: set[Path], what: str) -> None:
    for p in sorted(root.rglob(f"*{suffix}")):
        rel = [q.lower() for q in p.relative_to(root).parts[:-1]]
        if dir_name in rel and p not in claimed and p.name != "classes.txt":
            raise BadInput(f"{what} has no matching image file", where=str(p))


def _number(text: str | None, where: str, ref: str, kind: type = float) -> float:
    try:
        val = kind(str(text).strip())
    except (TypeError, ValueError):
        raise BadInput(f"{ref}: {printable(repr(text), 80)} is not a {'number' if kind is float else 'integer'}",
                       where=where) from None
    if not math.isfinite(val):
        raise BadInput(f"{ref}: {printable(repr(text), 80)} is not finite", where=where)
    return val


def check_area(boxes: np.ndarray, refs: tuple[str, ...], where: str) -> None:
    for (x1, y1, x2, y2), ref in zip(boxes.tolist(), refs):
        if not (x2 > x1 and y2 > y1):
            raise BadInput(f"{ref}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) has zero or "
                           "negative area", where=where)


def _raw(image_id, img, split, ann, boxes, refs, ignore=(), ignore_refs=(), **kw) -> RawImage:
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    ign = np.asarray(ignore, dtype=np.float64).reshape(-1, 4)
    check_area(arr, tuple(refs), str(ann or img))
    check_area(ign, tuple(ignore_refs), str(ann or img))
    return RawImage(image_id, img, split, ann, arr, tuple(refs), ignore=ign,
                    ignore_refs=tuple(ignore_refs), **kw)


def ignore_ref(ref: str, why: str = "ignore region") -> str:
    return f"{ref} ({why})"


# ---------------------------------------------------------------- Pascal VOC (HERIDAL, HIT-UAV)
@dataclass(frozen=True)
class _VocFile:
    """One VOC annotation as written (coordinates not yet shifted by the base)."""

    boxes: list
    refs: list
    ignore: list
    ignore_refs: list
    size: tuple[int, int] | None
    zero_hint: str | None  # why the file looks 0-based ("object 2: xmin 0"), or None


def _voc_xml(img: Path) -> Path | None:
    cands = [img.with_suffix(".xml")] + [d / f"{img.stem}.xml" for base in
                                          (img.parent, img.parent.parent) for d in
                                          (base / n for n in _ANN_DIRS)]
    return next((c for c in cands if c.is_file()), None)


def read_voc(root: Path, mapper: ClassMapper, coordinate_base: str | int = "auto") -> ParseResult:
    res = ParseResult()
    found: list[tuple[str, Path, str | None, Path | None, _VocFile | None]] = []
    claimed: set[Path] = set()
    for img in list_images(root):
        xml = _voc_xml(img)
        image_id, split = locate(img, root)
        if xml is not None:
            claimed.add(xml)
        found.append((image_id, img, split, xml,
                      None if xml is None else _parse_voc(xml, mapper, res.dropped)))
    for xml in sorted(root.rglob("*.xml")):
        if xml not in claimed:
            raise BadInput("annotation has no matching image file", where=str(xml))
    hint = next(((xml, f.zero_hint) for *_, xml, f in found if f is not None and f.zero_hint), None)
    base = coordinate_base if coordinate_base != "auto" else (0 if hint else 1)
    if coordinate_base == "auto":
        log.info("VOC coordinate base %d (auto%s)", base,
                 f": {hint[0]} {hint[1]}" if hint else ": no xmin/ymin is 0")
    res.coordinate_base = int(base)
    for image_id, img, split, xml, f in found:
        if f is None:
            res.images.append(_raw(image_id, img, split, None, [], []))
            continue
        if base == 1:
            _check_one_based(f, xml)
        shift = [(x0 - base, y0 - base, x1, y1) for x0, y0, x1, y1 in f.boxes]
        ign = [(x0 - base, y0 - base, x1, y1) for x0, y0, x1, y1 in f.ignore]
        res.images.append(_raw(image_id, img, split, xml, shift, f.refs, ign, f.ignore_refs,
                               expected_size=f.size))
    return res


def _check_one_based(f: _VocFile, xml: Path) -> None:
    for (x0, y0, _, _), ref in zip(f.boxes + f.ignore, f.refs + f.ignore_refs):
        if min(x0, y0) < 0.5:
            key, val = ("xmin", x0) if x0 < 0.5 else ("ymin", y0)
            raise BadInput(f"{ref}: {key} {val:g} is not a 1-based VOC pixel index "
                           "(coordinate_base 1); the file is 0-based: use --coordinate-base 0 "
                           "(params: coordinate_base: 0)", where=str(xml))


def _voc_size(ann: ET.Element, where: str) -> tuple[int, int] | None:
    if (sz := ann.find("size")) is None:
        return None
    w = _number(sz.findtext("width"), where, "<size><width>", int)
    h = _number(sz.findtext("height"), where, "<size><height>", int)
    return (int(w), int(h)) if w > 0 and h > 0 else None  # 0x0: size not recorded


def _parse_voc(xml: Path, mapper: ClassMapper, dropped: Counter) -> _VocFile:
    where = str(xml)
    try:
        ann = ET.fromstring(read_regular_bytes(xml, "VOC annotation", MAX_TEXT_BYTES))
    except ET.ParseError as exc:
        raise BadInput(f"malformed XML: {exc}", where=where) from None
    if ann.tag != "annotation":
        raise BadInput(f"root element is <{ann.tag}>, expected <annotation>", where=where)
    size, hint = _voc_size(ann, where), None
    boxes, refs, ignore, ignore_refs = [], [], [], []
    for i, obj in enumerate(ann.findall("object")):
        ref = f"object {i}"
        name = (obj.findtext("name") or "").strip()
        if not name:
            raise BadInput(f"{ref}: missing <name>", where=where)
        bnd = obj.find("bndbox")
        if bnd is None:
            raise BadInput(f"{ref}: missing <bndbox>", where=where)
        box = tuple(_number(bnd.findtext(k), where, f"{ref} <{k}>")
                    for k in ("xmin", "ymin", "xmax", "ymax"))
        difficult = _number((obj.findtext("difficult") or "").strip() or "0", where,
                            f"{ref} <difficult>", int) != 0
        hint = hint or (f"{ref}: {h}" if (h := _zero_hint(box)) else None)
        label = mapper((name,), where, ref)
        if label is None:
            dropped[name] += 1
        elif label == IGNORE or difficult:
            ignore.append(box)
            ignore_refs.append(f"{ref} ({name}, {'difficult' if difficult else 'ignore region'})")
        else:
            boxes.append(box)
            refs.append(f"{ref} ({name})")
    return _VocFile(boxes, refs, ignore, ignore_refs, size, hint)


def _zero_hint(box: tuple) -> str | None:
    """Why a VOC box proves 0-based coordinates (a 0 is no 1-based pixel index), or None.

    ``xmax == width`` proves nothing: it is the last pixel in 1-based indices and the right
    edge in 0-based edges, so it does not decide the base.
    """
    x0, y0 = box[:2]
    return "xmin 0" if x0 == 0 else "ymin 0" if y0 == 0 else None


# ---------------------------------------------------------------- YOLO (SARD, PyroNear)
def yolo_names(root: Path) -> dict[int, str] | None:
    """Class names from ``data.yaml`` (list or dict form), or None without one."""
    path = next((root / n for n in _YAML_NAMES if (root / n).is_file()), None)
    if path is None:
        return None
    data = read_yaml(path, "data.yaml")
    names = data.get("names") if isinstance(data, dict) else None
    if isinstance(names, list):
        out = dict(enumerate(map(str, names)))
    elif isinstance(names, dict):
        try:
            out = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError):
            raise BadInput("names keys must be class ids (integers)", where=str(path)) from None
    else:
        raise BadInput("needs 'names' as a list or an {id: name} mapping", where=str(path))
    if "nc" in data and data["nc"] != len(out):
        raise BadInput(f"nc={data['nc']!r} but {len(out)} names", where=str(path))
    return out


def read_yolo(root: Path, mapper: ClassMapper) -> ParseResult:
    res = ParseResult()
    names = yolo_names(root)
    claimed: set[Path] = set()
    for img in list_images(root):
        txt = _mirror(img, root, "labels", ".txt")
        image_id, split = locate(img, root)
        if not txt.is_file():  # no label file: a negative image
            res.images.append(_raw(image_id, img, split, None, [], [], normalized=True))
            continue
        claimed.add(txt)
        parsed = _parse_yolo(txt, names, mapper, res.dropped)
        res.images.append(_raw(image_id, img, split, txt, *parsed, normalized=True))
    _orphans(root, "labels", ".txt", claimed, "label file")
    return res


def _parse_yolo(txt: Path, names, mapper: ClassMapper, dropped: Counter):
    where, boxes, refs, ignore, ignore_refs = str(txt), [], [], [], []
    for n, line in enumerate(read_text(txt, "YOLO label file").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        ref = f"line {n}"
        if len(fields) != 5:
            raise BadInput(f"{ref}: expected 5 fields 'class cx cy w h', got {len(fields)}",
                           where=where)
        cls = int(_number(fields[0], where, f"{ref} class", int))
        cx, cy, w, h = (_number(f, where, ref) for f in fields[1:])
        if names is not None and cls not in names:
            raise BadInput(f"{ref}: class id {cls} is not in data.yaml names "
                           f"{sorted(names)}", where=where)
        key = names[cls] if names is not None else str(cls)
        label = mapper((key, str(cls)) if names is not None else (key,), where, ref)
        box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
        if label is None:
            dropped[key] += 1
        elif label == IGNORE:
            ignore.append(box)
            ignore_refs.append(ignore_ref(ref))
        else:
            boxes.append(box)
            refs.append(ref)
    return boxes, refs, ignore, ignore_refs


SOURCE_FORMATS.add("voc", lambda path, mapper, spec: read_voc(path, mapper, spec.coordinate_base))
SOURCE_FORMATS.add("yolo", lambda path, mapper, spec: read_yolo(path, mapper))
