"""Annotation readers for COCO JSON and VisDrone-DET (conventions: :mod:`.adapters_formats`).

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> read_coco(root, make_mapper({"person": "person"}))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
aegisbench.errors.BadInput: ...: no COCO instances JSON (with 'images') found; no JSON files found
"""

from __future__ import annotations

import os
import logging
from pathlib import Path

from aegisbench.builders.adapters_formats import (IGNORE, ClassMapper, ParseResult, _mirror, _number,
                                                  _orphans, _raw, ignore_ref, list_images, locate,
                                                  make_mapper, split_of_name)
from aegisbench.builders.source_kinds import SOURCE_FORMATS
from aegisbench.errors import BadInput, printable
from aegisbench.readers import MAX_ANNOTATION_BYTES, read_json, read_text

log = logging.getLogger(__name__)
__all__ = ["COCO_IMAGE_FIELDS", "VISDRONE_CATEGORIES", "image_meta", "make_mapper", "read_coco",
           "read_visdrone"]

# VisDrone-DET object categories (id -> name), from the dataset's toolkit documentation.
VISDRONE_CATEGORIES = {0: "ignored_regions", 1: "pedestrian", 2: "people", 3: "bicycle",
                       4: "car", 5: "van", 6: "truck", 7: "tricycle", 8: "awning-tricycle",
                       9: "bus", 10: "motor", 11: "others"}
#: COCO image fields that are not per-image metadata (every other scalar field is).
COCO_IMAGE_FIELDS = frozenset({"id", "file_name", "width", "height", "license", "coco_url",
                               "flickr_url", "date_captured"})


# ---------------------------------------------------------------- COCO JSON
def read_coco(root: Path, mapper: ClassMapper) -> ParseResult:
    res = ParseResult()
    n_files, skipped = 0, []
    for jf in sorted(root.rglob("*.json")):
        data = read_json(jf, "COCO annotations", MAX_ANNOTATION_BYTES)
        if not isinstance(data, dict) or "images" not in data:
            log.debug("skipping %s: not a COCO instances file", jf)
            keys = ", ".join(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__
            skipped.append(f"{jf.relative_to(root)} ({keys})")
            continue
        n_files += 1
        _parse_coco(data, jf, root, mapper, res)
    if n_files == 0:
        found = f"; JSON files found: {'; '.join(skipped[:5])}" if skipped else "; no JSON files found"
        raise BadInput(f"no COCO instances JSON (with 'images') found{found}", where=str(root))
    return res


def _field(obj, key: str, where: str, ref: str):
    if not isinstance(obj, dict):
        raise BadInput(f"{ref}: expected an object, got {type(obj).__name__}", where=where)
    if key not in obj:
        raise BadInput(f"{ref}: missing '{key}' (found keys: {', '.join(sorted(map(str, obj)))})",
                       where=where)
    return obj[key]


def image_meta(im: dict) -> tuple[tuple[str, str], ...]:
    """The fields of a COCO image entry that become per-image meta columns (stringified).

    >>> image_meta({"id": 1, "file_name": "a.jpg", "width": 4, "height": 3, "time": "night",
    ...             "altitude": 60, "gps": [1, 2], "tag": None})
    (('altitude', '60'), ('time', 'night'))
    """
    return tuple(sorted((str(k), str(v)) for k, v in im.items() if k not in COCO_IMAGE_FIELDS
                        and isinstance(v, (str, int, float, bool))))


def _parse_coco(data: dict, jf: Path, root: Path, mapper: ClassMapper, res: ParseResult) -> None:
    where = str(jf)
    for key in ("images", "annotations", "categories"):
        if key not in data:
            raise BadInput(f"no '{key}' (found keys: {', '.join(sorted(map(str, data)))})",
                           where=where)
        if not isinstance(data[key], list):
            raise BadInput(f"'{key}' must be a list, got {type(data[key]).__name__}", where=where)
    cats = {}
    for i, c in enumerate(data["categories"]):
        cats[_field(c, "id", where, f"category {i}")] = str(_field(c, "name", where, f"category {i}"))
    images = _coco_images(data["images"], jf, root)
    for k, a in enumerate(data["annotations"]):
        _coco_annotation(a, f"annotation {k}", where, images, cats, mapper, res)
    split = split_of_name(jf.stem) or locate(jf, root)[1]
    for path, size, meta, boxes, refs, ign, ign_refs in images.values():
        res.images.append(_raw(locate(path, root)[0], path, split, jf, boxes, refs, ign, ign_refs,
                               expected_size=size, meta=meta))


def _inside(path: Path, root: Path) -> bool:
    """``path`` resolves (links followed) to a place inside ``root``."""
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


def _coco_images(entries: list, jf: Path, root: Path) -> dict:
    where = str(jf)
    stem_dir = jf.stem.split("_")[-1]  # instances_val2017.json -> val2017/
    images: dict = {}
    for i, im in enumerate(entries):
        ref = f"image {i}"
        iid, fn = _field(im, "id", where, ref), str(_field(im, "file_name", where, ref))
        w, h = (int(_number(_field(im, k, where, ref), where, f"{ref} {k}", int))
                for k in ("width", "height"))
        if iid in images:
            raise BadInput(f"{ref}: duplicate image id {iid!r}", where=where)
        if Path(fn).is_absolute() or ".." in Path(fn).parts or "\x00" in fn:
            raise BadInput(f"{ref}: file_name {printable(repr(fn), 80)} must be a relative path inside --source-dir "
                           "(no '..', not absolute)", where=where)
        cands = [jf.parent / fn, root / fn, root / "images" / fn, jf.parent.parent / "images" / fn,
                 root / stem_dir / fn]
        path = next((c for c in cands if c.is_file() and _inside(c, root)), None)
        if path is None:
            raise BadInput(f"{ref} (id={iid!r}): image file {fn!r} not found", where=where)
        images[iid] = (path, (w, h), image_meta(im), [], [], [], [])
    return images


def _coco_annotation(a, ref: str, where: str, images: dict, cats: dict, mapper: ClassMapper,
                     res: ParseResult) -> None:
    iid, cid = _field(a, "image_id", where, ref), _field(a, "category_id", where, ref)
    bbox = _field(a, "bbox", where, ref)
    if iid not in images:
        raise BadInput(f"{ref}: refers to missing image id {iid!r}", where=where)
    if cid not in cats:
        raise BadInput(f"{ref}: category id {cid!r} is not in 'categories' "
                       f"(which has ids {sorted(cats, key=str)})", where=where)
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise BadInput(f"{ref}: bbox must be [x, y, w, h], got {bbox!r}", where=where)
    x, y, w, h = (_number(v, where, f"{ref} bbox") for v in bbox)
    label = mapper((cats[cid], str(cid)), where, ref)
    entry = images[iid]
    if label is None:
        res.dropped[cats[cid]] += 1
    elif label == IGNORE or a.get("iscrowd", 0):
        entry[5].append((x, y, x + w, y + h))
        entry[6].append(ignore_ref(ref, "iscrowd" if a.get("iscrowd", 0) else "ignore region"))
    else:
        entry[3].append((x, y, x + w, y + h))
        entry[4].append(ref)


# ---------------------------------------------------------------- VisDrone-DET
def read_visdrone(root: Path, mapper: ClassMapper) -> ParseResult:
    res = ParseResult()
    claimed: set[Path] = set()
    for img in list_images(root):
        txt = _mirror(img, root, "annotations", ".txt")
        image_id, split = locate(img, root)
        if not txt.is_file():
            res.images.append(_raw(image_id, img, split, None, [], []))
            continue
        claimed.add(txt)
        res.images.append(_raw(image_id, img, split, txt, *_parse_visdrone(txt, mapper, res)))
    _orphans(root, "annotations", ".txt", claimed, "annotation file")
    return res


def _parse_visdrone(txt: Path, mapper: ClassMapper, res: ParseResult):
    where, boxes, refs, ignore, ignore_refs = str(txt), [], [], [], []
    for n, line in enumerate(read_text(txt, "VisDrone annotation").splitlines(), start=1):
        if not line.strip():
            continue
        ref = f"line {n}"
        fields = line.strip().split(",")
        if len(fields) == 9 and fields[-1].strip() == "":
            fields = fields[:8]  # tolerate a trailing comma
        if len(fields) != 8:
            raise BadInput(f"{ref}: expected 8 comma-separated fields, got {len(fields)}",
                           where=where)
        left, top, w, h = (_number(f, where, ref) for f in fields[:4])
        score, cat = (int(_number(f, where, ref, int)) for f in fields[4:6])
        for f in fields[6:]:
            _number(f, where, ref, int)
        box = (left, top, left + w, top + h)
        if cat == 0:  # an ignored region, whatever the class map says
            ignore.append(box)
            ignore_refs.append(ignore_ref(ref, "category 0"))
            continue
        cands = (str(cat), VISDRONE_CATEGORIES[cat]) if cat in VISDRONE_CATEGORIES else (str(cat),)
        label = mapper(cands, where, ref)
        if label is None:
            res.dropped[cands[-1]] += 1
        elif label == IGNORE or score == 0:
            ignore.append(box)
            ignore_refs.append(ignore_ref(ref, "score 0" if score == 0 else "ignore region"))
        else:
            boxes.append(box)
            refs.append(ref)
    return boxes, refs, ignore, ignore_refs


SOURCE_FORMATS.add("coco", lambda path, mapper, spec: read_coco(path, mapper))
SOURCE_FORMATS.add("visdrone", lambda path, mapper, spec: read_visdrone(path, mapper))
