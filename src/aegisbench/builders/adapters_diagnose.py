"""Why a source folder yields no box of the track's class: what the chosen format
expected where, what the class map dropped, and which format the folder looks like (a VOC
folder read as YOLO builds an empty benchmark otherwise).

>>> import tempfile; from pathlib import Path; from types import SimpleNamespace
>>> root = Path(tempfile.mkdtemp()); _ = (root / "a.xml").write_text("<annotation/>")
>>> spec = SimpleNamespace(name="h", path=root, format="yolo", target_label="person")
>>> empty_source_message(spec, SimpleNamespace(images=[], dropped={}))  # doctest: +NORMALIZE_WHITESPACE
"source h: no 'person' box in any split (0 images read as yolo): no YOLO label file under labels/ holds a kept box;
 this looks like a VOC folder (1 annotation files): try --source-format voc"
"""

from __future__ import annotations

from collections import Counter

#: What each format's annotations look like, to name the format a folder seems to be in.
_LOOKS = (("voc", "VOC", lambda p: p.suffix.lower() == ".xml"),
          ("yolo", "YOLO", lambda p: p.suffix == ".txt" and "labels" in p.parts[:-1]),
          ("visdrone", "VisDrone", lambda p: p.suffix == ".txt" and "annotations" in p.parts[:-1]),
          ("coco", "COCO", lambda p: p.suffix.lower() == ".json"))
_EXPECTED = {"voc": "no VOC .xml annotation holds a kept box", "yolo": "no YOLO label file under labels/ holds a "
             "kept box", "coco": "no COCO annotation holds a kept box", "visdrone": "no VisDrone annotation under "
             "annotations/ holds a kept box"}


def empty_source_message(spec, parsed, scan: int = 100_000) -> str:
    """Why a source yields no box of the track's class: what the format expected, what the
    class map dropped, and which format the folder looks like (its first ``scan`` files)."""
    counts = Counter()
    for k, p in enumerate(spec.path.rglob("*")):
        if k >= scan:
            break
        rel = p.relative_to(spec.path)
        counts.update(name for name, _, test in _LOOKS if test(rel))
    msg = (f"source {spec.name}: no {spec.target_label!r} box in any split ({len(parsed.images)} images read as "
           f"{spec.format}): {_EXPECTED[spec.format]}")
    if parsed.dropped:
        msg += f"; the class map dropped {sum(parsed.dropped.values())} box(es) of {sorted(parsed.dropped)[:8]}"
    other = [(n, label) for n, label, _ in _LOOKS if n != spec.format and counts[n]]
    if other and not counts[spec.format]:
        name, label = max(other, key=lambda o: counts[o[0]])
        msg += f"; this looks like a {label} folder ({counts[name]} annotation files): try --source-format {name}"
    return msg
