"""Annotation readers for the four source formats (used by :mod:`.adapters`).

Each reader (VOC and YOLO here, COCO and VisDrone in :mod:`.adapters_coco`) walks a dataset folder, parses *every* annotation eagerly (text only, so
a malformed file fails before any image is decoded) and returns :class:`RawImage`
items; pixels are decoded later, one image at a time. Coordinate conventions:

* **VOC** ``<bndbox>`` holds 1-based, inclusive pixel indices; with
  ``one_based=True`` (default) ``x1 = xmin - 1, y1 = ymin - 1, x2 = xmax, y2 = ymax``
  (continuous 0-based edges; ``xmin == xmax`` is a one-pixel-wide box). Objects
  marked ``difficult`` are kept.
* **YOLO** lines ``cls cx cy w h`` are fractions of the frame; kept normalised here
  and scaled by the decoded size.
* **COCO** ``bbox`` is ``[x, y, w, h]`` in 0-based continuous pixels; ``iscrowd=1``
  regions of a kept class are not individual targets and are counted as ignored.
* **VisDrone-DET** lines ``left,top,width,height,score,category,truncation,occlusion``
  in pixels; category 0 (ignored region) and score 0 (ignored in evaluation) are
  counted as ignored, whatever the class.

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
import yaml

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

IMAGE_EXTS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})
_SPLIT_ALIASES = {"train": "train", "training": "train", "trainimages": "train",
                  "val": "val", "valid": "val", "validation": "val", "valimages": "val",
                  "test": "test", "testing": "test", "testimages": "test"}
_LAYOUT_DIRS = frozenset({"images", "jpegimages", "img", "imgs", "labels", "annotations"})
_ANN_DIRS = ("Annotations", "annotations", "labels", "Labels", "xml")
_YAML_NAMES = ("data.yaml", "data.yml", "dataset.yaml")


@dataclass(frozen=True)
class RawImage:
    """One image before decoding: where it is and its kept boxes (xyxy)."""

    image_id: str
    image_path: Path
    folder_split: str | None
    ann_path: Path | None
    boxes: np.ndarray  # float64 (n, 4); pixels, or fractions of the frame if normalized
    refs: tuple[str, ...]  # "object 2" / "line 5" per box, for error messages
    normalized: bool = False
    expected_size: tuple[int, int] | None = None  # (width, height) declared by the annotation


@dataclass
class ParseResult:
    images: list[RawImage] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)  # original class -> boxes mapped to None
    ignored: int = 0  # VisDrone ignored regions / score 0, COCO crowd regions


ClassMapper = Callable[[tuple[str, ...], str, str], "str | None"]


def make_mapper(class_map: Mapping[str, str | None]) -> ClassMapper:
    """``mapper(candidates, where, ref)``: the target label (or None) of the first
    candidate key found in ``class_map``; BadInput if none is."""
    def mapper(candidates: tuple[str, ...], where: str, ref: str) -> str | None:
        for key in candidates:
            if key in class_map:
                return class_map[key]
        raise BadInput(f"{ref}: unknown class {' / '.join(map(repr, candidates))} "
                       f"(not in class_map, which has {sorted(class_map)})", where=where)
    return mapper


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
        raise BadInput(f"{ref}: {text!r} is not a {'number' if kind is float else 'integer'}",
                       where=where) from None
    if not math.isfinite(val):
        raise BadInput(f"{ref}: {text!r} is not finite", where=where)
    return val


def check_area(boxes: np.ndarray, refs: tuple[str, ...], where: str) -> None:
    for (x1, y1, x2, y2), ref in zip(boxes.tolist(), refs):
        if not (x2 > x1 and y2 > y1):
            raise BadInput(f"{ref}: box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) has zero or "
                           "negative area", where=where)


def _raw(image_id, img, split, ann, boxes, refs, **kw) -> RawImage:
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    check_area(arr, tuple(refs), str(ann or img))
    return RawImage(image_id, img, split, ann, arr, tuple(refs), **kw)


# ---------------------------------------------------------------- Pascal VOC (HERIDAL)
def _voc_split_lists(root: Path) -> dict[str, str] | None:
    main = root / "ImageSets" / "Main"
    if not main.is_dir():
        return None
    out: dict[str, str] = {}
    for split in ("train", "val", "test"):
        f = main / f"{split}.txt"
        if f.exists():
            for line in f.read_text().split():
                out[line.strip()] = split
    return out or None


def read_voc(root: Path, mapper: ClassMapper, one_based: bool = True) -> ParseResult:
    res = ParseResult()
    lists = _voc_split_lists(root)
    claimed: set[Path] = set()
    for img in list_images(root):
        cands = [img.with_suffix(".xml")] + [d / f"{img.stem}.xml" for base in
                                              (img.parent, img.parent.parent) for d in
                                              (base / n for n in _ANN_DIRS)]
        xml = next((c for c in cands if c.is_file()), None)
        image_id, dir_split = locate(img, root)
        split = dir_split if lists is None else lists.get(img.stem)
        if xml is None:
            res.images.append(_raw(image_id, img, split, None, [], []))
            continue
        claimed.add(xml)
        boxes, refs, size = _parse_voc(xml, mapper, res.dropped, one_based)
        res.images.append(_raw(image_id, img, split, xml, boxes, refs, expected_size=size))
    for xml in sorted(root.rglob("*.xml")):
        if xml not in claimed:
            raise BadInput("annotation has no matching image file", where=str(xml))
    if lists is not None:
        missing = set(lists) - {r.image_path.stem for r in res.images}
        if missing:
            raise BadInput(f"lists images that do not exist: {sorted(missing)[:5]}",
                           where=str(root / "ImageSets" / "Main"))
    return res


def _parse_voc(xml: Path, mapper: ClassMapper, dropped: Counter, one_based: bool):
    where = str(xml)
    try:
        ann = ET.parse(xml).getroot()
    except ET.ParseError as exc:
        raise BadInput(f"malformed XML: {exc}", where=where) from None
    if ann.tag != "annotation":
        raise BadInput(f"root element is <{ann.tag}>, expected <annotation>", where=where)
    size = None
    if (sz := ann.find("size")) is not None:
        w = _number(sz.findtext("width"), where, "<size><width>", int)
        h = _number(sz.findtext("height"), where, "<size><height>", int)
        size = (int(w), int(h)) if w > 0 and h > 0 else None  # 0x0: size not recorded
    boxes, refs = [], []
    for i, obj in enumerate(ann.findall("object")):
        ref = f"object {i}"
        name = (obj.findtext("name") or "").strip()
        if not name:
            raise BadInput(f"{ref}: missing <name>", where=where)
        bnd = obj.find("bndbox")
        if bnd is None:
            raise BadInput(f"{ref}: missing <bndbox>", where=where)
        x0, y0, x1, y1 = (_number(bnd.findtext(k), where, f"{ref} <{k}>")
                          for k in ("xmin", "ymin", "xmax", "ymax"))
        if mapper((name,), where, ref) is None:
            dropped[name] += 1
            continue
        off = 1.0 if one_based else 0.0
        boxes.append((x0 - off, y0 - off, x1, y1))
        refs.append(ref)
    return boxes, refs, size


# ---------------------------------------------------------------- YOLO (SARD, PyroNear)
def yolo_names(root: Path) -> dict[int, str] | None:
    """Class names from ``data.yaml`` (list or dict form), or None without one."""
    path = next((root / n for n in _YAML_NAMES if (root / n).is_file()), None)
    if path is None:
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise BadInput(f"malformed YAML: {exc}", where=str(path)) from None
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
        boxes, refs = _parse_yolo(txt, names, mapper, res.dropped)
        res.images.append(_raw(image_id, img, split, txt, boxes, refs, normalized=True))
    _orphans(root, "labels", ".txt", claimed, "label file")
    return res


def _parse_yolo(txt: Path, names, mapper: ClassMapper, dropped: Counter):
    where, boxes, refs = str(txt), [], []
    for n, line in enumerate(txt.read_text().splitlines(), start=1):
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
        if mapper((key, str(cls)) if names is not None else (key,), where, ref) is None:
            dropped[key] += 1
            continue
        boxes.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        refs.append(ref)
    return boxes, refs
