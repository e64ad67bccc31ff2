"""Annotation readers for COCO JSON and VisDrone-DET (conventions: :mod:`.adapters_formats`).

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> read_coco(root, make_mapper({"person": "person"}))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
aegisbench.errors.BadInput: ...: no COCO instances JSON (with 'images') found
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from aegisbench.builders.adapters_formats import (ClassMapper, ParseResult, _mirror, _number, _orphans, _raw,
                                                  list_images, locate, make_mapper, split_of_name)
from aegisbench.errors import BadInput

log = logging.getLogger(__name__)
__all__ = ["VISDRONE_CATEGORIES", "make_mapper", "read_coco", "read_visdrone"]

# VisDrone-DET object categories (id -> name), from the dataset's toolkit documentation.
VISDRONE_CATEGORIES = {0: "ignored_regions", 1: "pedestrian", 2: "people", 3: "bicycle",
                       4: "car", 5: "van", 6: "truck", 7: "tricycle", 8: "awning-tricycle",
                       9: "bus", 10: "motor", 11: "others"}


# ---------------------------------------------------------------- COCO JSON
def read_coco(root: Path, mapper: ClassMapper) -> ParseResult:
    res = ParseResult()
    n_files = 0
    for jf in sorted(root.rglob("*.json")):
        where = str(jf)
        try:
            data = json.loads(jf.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"malformed JSON: {exc}", where=where) from None
        if not isinstance(data, dict) or "images" not in data:
            log.debug("skipping %s: not a COCO instances file", jf)
            continue
        n_files += 1
        _parse_coco(data, jf, root, mapper, res)
    if n_files == 0:
        raise BadInput("no COCO instances JSON (with 'images') found", where=str(root))
    return res


def _field(obj, key: str, where: str, ref: str):
    if not isinstance(obj, dict) or key not in obj:
        raise BadInput(f"{ref}: missing '{key}'", where=where)
    return obj[key]


def _parse_coco(data: dict, jf: Path, root: Path, mapper: ClassMapper, res: ParseResult) -> None:
    where = str(jf)
    for key in ("annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise BadInput(f"'{key}' must be a list", where=where)
    if not isinstance(data["images"], list):
        raise BadInput("'images' must be a list", where=where)
    cats = {}
    for i, c in enumerate(data["categories"]):
        cats[_field(c, "id", where, f"category {i}")] = str(_field(c, "name", where, f"category {i}"))
    split = split_of_name(jf.stem) or locate(jf, root)[1]
    stem_dir = jf.stem.split("_")[-1]  # instances_val2017.json -> val2017/
    images: dict = {}
    for i, im in enumerate(data["images"]):
        ref = f"image {i}"
        iid, fn = _field(im, "id", where, ref), str(_field(im, "file_name", where, ref))
        w, h = (int(_number(_field(im, k, where, ref), where, f"{ref} {k}", int))
                for k in ("width", "height"))
        if iid in images:
            raise BadInput(f"{ref}: duplicate image id {iid!r}", where=where)
        cands = [jf.parent / fn, root / fn, root / "images" / fn, jf.parent.parent / "images" / fn,
                 root / stem_dir / fn]
        path = next((c for c in cands if c.is_file()), None)
        if path is None:
            raise BadInput(f"{ref} (id={iid!r}): image file {fn!r} not found", where=where)
        images[iid] = (path, (w, h), [], [])
    for k, a in enumerate(data["annotations"]):
        ref = f"annotation {k}"
        iid, cid = _field(a, "image_id", where, ref), _field(a, "category_id", where, ref)
        bbox = _field(a, "bbox", where, ref)
        if iid not in images:
            raise BadInput(f"{ref}: refers to missing image id {iid!r}", where=where)
        if cid not in cats:
            raise BadInput(f"{ref}: category id {cid!r} is not in 'categories'", where=where)
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise BadInput(f"{ref}: bbox must be [x, y, w, h]", where=where)
        x, y, w, h = (_number(v, where, f"{ref} bbox") for v in bbox)
        if mapper((cats[cid], str(cid)), where, ref) is None:
            res.dropped[cats[cid]] += 1
        elif a.get("iscrowd", 0):
            res.ignored += 1
        else:
            images[iid][2].append((x, y, x + w, y + h))
            images[iid][3].append(ref)
    for path, size, boxes, refs in images.values():
        res.images.append(_raw(locate(path, root)[0], path, split, jf, boxes, refs,
                               expected_size=size))


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
        boxes, refs = _parse_visdrone(txt, mapper, res)
        res.images.append(_raw(image_id, img, split, txt, boxes, refs))
    _orphans(root, "annotations", ".txt", claimed, "annotation file")
    return res


def _parse_visdrone(txt: Path, mapper: ClassMapper, res: ParseResult):
    where, boxes, refs = str(txt), [], []
    for n, line in enumerate(txt.read_text().splitlines(), start=1):
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
        if cat == 0 or score == 0:
            res.ignored += 1
            continue
        cands = (str(cat), VISDRONE_CATEGORIES[cat]) if cat in VISDRONE_CATEGORIES else (str(cat),)
        if mapper(cands, where, ref) is None:
            res.dropped[cands[-1]] += 1
            continue
        boxes.append((left, top, left + w, top + h))
        refs.append(ref)
    return boxes, refs
