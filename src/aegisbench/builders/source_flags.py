"""The command-line options of a local dataset folder (``--source-dir`` and its flags), shared by
``build`` and ``sources``: each flag is the kebab-case of a source option of ``params.yaml``
(``--split-mode`` is ``split_mode``), plus the source's attribution (``--license``,
``--citation``, ``--homepage``, ``--description``) and ``--tracks``. :func:`source_entry` turns
them into the params entry of the source, checked, with BadInput naming the flag.
"""

from __future__ import annotations

import argparse
import logging

from aegisbench.errors import BadInput
from aegisbench.fields import check_choice, choices_metavar, deprecated_alias
from aegisbench.params import SourceParams
from aegisbench.builders.source_kinds import SOURCE_FORMATS
from aegisbench.vocab import DETECTION_TRACKS, MODALITIES, TRACK_LABELS, TRACKS

log = logging.getLogger(__name__)

def source_args(p: argparse.ArgumentParser) -> None:
    """The options of a local dataset folder, shared by ``build`` and ``sources``: each the
    kebab-case of a source option of params.yaml (``--split-mode`` is ``split_mode``), plus
    ``--tracks``. Values are checked by the library (one line naming the flag), not argparse."""
    g = p.add_argument_group("a local dataset folder (--source-dir; options as in params.yaml "
                             "sources.<name>.options)")
    g.add_argument("--source-dir", help="build from this local dataset folder instead of the params sources")
    g.add_argument("--source-format", dest="format", metavar=choices_metavar(SOURCE_FORMATS.names()),
                   help=f"format of --source-dir: {', '.join(SOURCE_FORMATS.names())}")
    g.add_argument("--source", dest="name", metavar="NAME", help="the source's name, snake_case (e.g. heridal)")
    g.add_argument("--track", default="sar", metavar=choices_metavar(DETECTION_TRACKS),
                   help="detection track of the source: sar or smoke")
    g.add_argument("--modality", metavar=choices_metavar(MODALITIES), help="the sensor: rgb (default) or thermal")
    g.add_argument("--class-map", help="CLASS=TARGET[,...]; TARGET the track's label, none (drop) or ignore "
                   "(an ignore region); every class of the data must be named")
    g.add_argument("--target-label", help="the track's one class (default: person on sar, smoke on smoke)")
    g.add_argument("--split-mode", metavar="{hash,folders,lists}",
                   help="hash (group-aware SHA-256, default), folders (the dataset's "
                   "train/val/test folders) or lists (official split lists)")
    g.add_argument("--split-lists", help="train=FILE,val=FILE,test=FILE relative to --source-dir (lists "
                   "default: ImageSets/Main/<split>.txt)")
    g.add_argument("--fractions", help="TRAIN,VAL,TEST fractions of the hash split (default 0.7,0.15,0.15)")
    g.add_argument("--group-pattern", help="regex searched in the image id: group 1 is kept in one split, an "
                   "optional group 2 is the frame number (visdrone default: the video id; none: no groups)")
    g.add_argument("--coordinate-base", metavar="{auto,0,1}",
                   help="VOC pixel coordinates: auto (default, detected), 0 or 1")
    g.add_argument("--meta-pattern", help="regex with named groups searched in the image id, each a "
                   "per-image column, e.g. '(?P<time>day|night)'")
    g.add_argument("--phash-max-distance", help="near-duplicate distance to test in bits (default 6; none: off)")
    g.add_argument("--split-key", help="salt of the hash split (default: --source)")
    g.add_argument("--near-duplicates", metavar="{exclude,report}",
                   help="a train/val image that nearly duplicates a test image: exclude it from train/val "
                   "(default of hash splits) or report it and keep the splits as they are (default of folders "
                   "and lists: the official splits stay official); the pairs are in the source's report")
    g.add_argument("--license", metavar="SPDX", help="the source's licence, an SPDX id such as CC-BY-4.0 (default "
                   "unknown: the card says so and publish refuses it)")
    g.add_argument("--citation", metavar="BIBTEX", help="the source's BibTeX: the text itself (starting with @) or a "
                   ".bib file")
    g.add_argument("--homepage", metavar="URL", help="the source's web page (http or https)")
    g.add_argument("--description", help="one paragraph on the source for the card")
    deprecated_alias(p, "--format", "--source-format")
    deprecated_alias(p, "--name", "--source")
    p.add_argument("--tracks", help="comma-separated tracks to build: sar, smoke, firespread (default: the "
                   "--source-dir source's track only; for params: all)")


#: Default ``group_pattern`` of a visdrone ``--source-dir``: the video id, the first field of a
#: VisDrone-DET image (``0000002_00005_d_0000014``) or of a VID sequence folder
#: (``uav0000086_00000_v/0000001``), so every frame and clip of one video lands in one split
#: (frames ranked by image id within it). ``--group-pattern none`` turns it off.
VISDRONE_GROUP_PATTERN = r"(?:^|/)((?:uav)?\d+)_\d+_[dv](?:_\d+)?(?:/|$)"
#: Source options given as flags (the kebab-case of each key), besides path/class_map/target_label.
FLAG_OPTIONS = ("split_mode", "split_lists", "fractions", "group_pattern", "coordinate_base", "meta_pattern",
                "phash_max_distance", "split_key", "near_duplicates")


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _pairs(text: str, flag: str) -> dict[str, str]:
    """``A=B,C=D`` as a dict; BadInput naming ``flag`` if malformed or a key repeats."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = (t.strip() for t in item.partition("="))
        if not sep or not key or not value:
            raise BadInput(f"entry {item.strip()!r} is not KEY=VALUE", where=flag)
        if key in out:
            raise BadInput(f"{key!r} is given twice", where=flag)
        out[key] = value
    return out


def tracks_of(args) -> tuple[str, ...] | None:
    if not getattr(args, "tracks", None):
        return None
    tracks = tuple(t.strip() for t in args.tracks.split(",") if t.strip())
    for t in tracks:
        check_choice(t, "track", TRACKS, error=BadInput, where="--tracks")
    return tracks


def _flag_values(args) -> dict:
    """The source options given as flags, parsed (lists, numbers, None for ``none``)."""
    given = {k: getattr(args, k) for k in FLAG_OPTIONS if getattr(args, k) is not None}
    if "split_lists" in given:
        given["split_lists"] = _pairs(given["split_lists"], "--split-lists")
    if "fractions" in given:
        try:
            given["fractions"] = [float(f) for f in given["fractions"].split(",")]
        except ValueError:
            raise BadInput(f"{args.fractions!r} is not TRAIN,VAL,TEST numbers", where="--fractions") from None
    if given.get("coordinate_base") in ("0", "1"):
        given["coordinate_base"] = int(given["coordinate_base"])
    if "phash_max_distance" in given:
        text = given["phash_max_distance"]
        if text.lower() == "none":
            given["phash_max_distance"] = None
        elif text.isascii() and text.isdigit():
            given["phash_max_distance"] = int(text)
        else:
            raise BadInput(f"{text!r} is not a number of bits or none", where="--phash-max-distance")
    if "group_pattern" in given and given["group_pattern"].lower() == "none":
        given["group_pattern"] = None
    elif "group_pattern" not in given and args.format == "visdrone":
        given["group_pattern"] = VISDRONE_GROUP_PATTERN
    return given


def source_entry(args) -> dict:
    """The params source entry of ``--source-dir`` and its flags, checked: BadInput naming the flag
    (the source's own fields by :class:`~aegisbench.params.SourceParams`, its options by the adapters)."""
    from aegisbench.builders.adapters import SourceSpec
    if not (args.format and args.name):
        raise BadInput("--source-dir needs --source-format and --source (its name)", where="command line")
    check_choice(args.format, "format", SOURCE_FORMATS.names(), error=BadInput, where="--source-format")
    given = _attribution(args)
    try:
        src = SourceParams(name=args.name, track=args.track, kind=args.format, modality=args.modality or "rgb",
                           **given)
    except BadInput as exc:
        flags = {"track": "--track", "kind": "--source-format", "modality": "--modality",
                 **{k: _flag(k) for k in ATTRIBUTION}}
        raise BadInput(exc.message, where=flags.get(str(exc.where).rpartition(".")[2], "--source")) from None
    check_choice(args.track, "track", DETECTION_TRACKS, error=BadInput, where="--track")
    target = args.target_label or TRACK_LABELS[args.track]
    class_map = {k: None if v.lower() == "none" else v
                 for k, v in _pairs(args.class_map, "--class-map").items()} if args.class_map else {target: target}
    options = {"path": args.source_dir, "class_map": class_map, "target_label": target, **_flag_values(args)}
    try:
        SourceSpec.from_options(args.name, args.format, options, where="command line")
    except BadInput as exc:  # the adapters' messages start with the option's key
        key = next((k for k in sorted(options, key=len, reverse=True) if exc.message.startswith(k)), None)
        raise BadInput(exc.message, where=_flag(key) if key else "--source-dir") from None
    entry = {"track": args.track, "kind": args.format, "options": options,
             **{k: getattr(src, k) for k in given}}  # as SourceParams wrote them (the SPDX spelling)
    if args.modality:
        entry["modality"] = args.modality
    return entry


#: the source fields given as flags (``--license``...), checked by :class:`~aegisbench.params.SourceParams`
ATTRIBUTION = ("license", "citation", "homepage", "description")


def _attribution(args) -> dict:
    """The ``--license``/``--citation``/``--homepage``/``--description`` given, as text:
    ``--citation`` is BibTeX when it starts with ``@``, else a .bib file, read here (bounded)."""
    from aegisbench.attribution import MAX_CITATION
    from aegisbench.readers import read_text
    out = {k: getattr(args, k) for k in ATTRIBUTION if getattr(args, k) is not None}
    if "license" not in out:
        log.warning("no --license: the card says the licence of %s is unknown, and publish refuses that", args.name)
    if "citation" in out and not out["citation"].lstrip().startswith("@"):
        out["citation"] = read_text(out["citation"], "--citation file", limit=MAX_CITATION * 4)
    return out
