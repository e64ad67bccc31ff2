"""Load and validate a submission folder before anything is scored.

A submission is a folder (its name is the submission id) with ``submission.yaml``
and predictions in exactly one of three forms:

* ``predictions.parquet``: the contract table (``config, split, image_id, x1, y1,
  x2, y2, score[, label]``);
* ``predictions/<config>.json``: one COCO results list per config, ``image_id`` being
  the integer ids of ``aegisbench export-coco`` (valid for one dataset digest);
* ``predictions/<config>/<split>/<image_id>.txt``: Ultralytics ``save_txt`` +
  ``save_conf`` lines ``cls cx cy w h conf`` (normalized).

A ``label`` column, where given, holds the track's label (``person`` on sar, ``smoke``
on smoke) or null on every row: the tracks are single-class, so any other label (a
model's own class names) is refused. Optionally the WARP files of the smoke track,
``warp_patch.parquet`` (:mod:`~aegisbench.evaluation.warp_eval`) and ``warp_noise.parquet``
(:mod:`~aegisbench.evaluation.warp_noise_eval`).
Every ``(config, split)`` of the track must have predictions, including the clean
``<source>_val`` splits; a model that found nothing in a split says so with
``no_detections: [config/split, ...]`` (or a bare config) in ``submission.yaml``.
The required fields are text of at most 200 characters (``description`` 2,000, and the only
one that may span lines) with no control or bidirectional-override character: they reach the
page, the Markdown and the logs. Optional model metadata (``paper``, ``code``, ``architecture``, ``parameters``,
``training_data``, ``date``; :mod:`aegisbench.evaluation.metadata`) is checked here and
carried into the provenance: a malformed URL or date is a problem like any other.
Nothing is ever unpickled: YAML is read with ``safe_load``, Parquet with pyarrow
(no pandas metadata), JSON with :mod:`json`. A threshold-like key anywhere in
``submission.yaml`` or a threshold column is refused: the evaluator freezes the threshold
itself. The folder and what it holds are confined first (:mod:`aegisbench.evaluation.intake`:
a real folder named by a valid id, regular files only), and every read stays within the
declared limits of :mod:`aegisbench.readers`.

>>> limits = ValidationLimits(max_dets_per_image=300)
>>> limits.frame_tolerance_px
2.0
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from aegisbench.errors import BadInput
from aegisbench.dataset.index import DatasetIndex, coco_categories
from aegisbench.evaluation.formats import (YOLO_FIELDS, ClassRule, check_labels, parse_coco, parse_parquet,
                                           parse_yolo_file, read_coco_table)
from aegisbench.evaluation.metadata import (METADATA_FIELDS, check_classes, check_metadata, check_required,
                                            check_weights_sha256)
from aegisbench.evaluation.intake import submission_files, submission_id, threshold_key_paths
from aegisbench.evaluation.rows import Frames, Problems, RawRows, check_rows, shown
from aegisbench.hashing import file_sha256
from aegisbench.predictions import PredictionTable, read_parquet_predictions, read_yolo_txt
from aegisbench.schema import Declared, param
from aegisbench.readers import (MAX_COCO_FILE_BYTES, MAX_PREDICTION_ROWS, MAX_YOLO_FILE_BYTES, load_yaml,
                                read_regular_bytes)
from aegisbench.vocab import (REQUIRED_FIELDS, SMOKE, TRACK_LABELS, TRACKS, WARP_GRID, WARP_NOISE, WARP_NOISE_FILE,
                              WARP_PATCH)

log = logging.getLogger(__name__)

META_FILE = "submission.yaml"
PARQUET_FILE = "predictions.parquet"
PRED_DIR = "predictions"
WARP_PATCH_FILE = "warp_patch.parquet"
META_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class ValidationLimits(Declared):
    """Declared limits: file size, detections per image, how far a box may leave the frame."""

    max_file_bytes: int = param(2 * 1024**3, lo=1, unit="bytes", doc="largest submission file")
    max_dets_per_image: int = param(1000, lo=1, unit="detections", doc="most detections per image")
    frame_tolerance_px: float = param(2.0, lo=0.0, unit="px", doc="how far a box may leave the frame")


class SubmissionInvalid(BadInput):
    """A submission with problems; ``problems`` lists them (sorted), ``total`` counts all."""

    def __init__(self, problems: Problems):
        self.problems = problems.sorted()
        self.total = problems.total
        first = self.problems[0]
        more = f" (and {self.total - 1} more problem(s))" if self.total > 1 else ""
        super().__init__(str(first) + more)

    def lines(self, limit: int = 50) -> list[str]:
        out = [str(p) for p in self.problems[:limit]]
        if self.total > len(out):
            out.append(f"... and {self.total - len(out)} more problem(s)")
        return out


@dataclass(frozen=True)
class SubmissionMeta:
    name: str
    team: str
    track: str
    model: str
    contact: str
    license: str
    description: str
    dataset_version: str
    dataset_digest: str
    no_detections: tuple[str, ...] = ()
    classes: dict | None = None  # class id -> name of the YOLO / COCO forms (None: the default ids)
    extra: dict = field(default_factory=dict, compare=False)
    # the optional model metadata (paper, code, architecture, parameters, training_data, date),
    # checked by aegisbench.evaluation.metadata; and the weights hash `detect` recorded
    metadata: dict = field(default_factory=dict, compare=False)
    weights_sha256: str | None = None


@dataclass(frozen=True, eq=False)
class ValidatedSubmission:
    folder: Path
    id: str
    meta: SubmissionMeta
    form: str  # "parquet", "coco", "yolo" (detection) or "forecasts" (fire-spread)
    predictions: object  # the track's predictions: a PredictionTable, or fire-spread Forecasts
    files: dict[str, str]  # relative path -> sha256 of every file in the folder
    warp_patch: object = None  # aegisbench.evaluation.warp_eval.PatchPredictions or None
    warp_noise: object = None  # aegisbench.evaluation.warp_noise_eval.NoisePredictions or None


# ------------------------------------------------------------------ meta


def read_meta(folder: Path, index: DatasetIndex, problems: Problems) -> SubmissionMeta | None:
    """Check ``submission.yaml``; None when it is unusable (problems recorded)."""
    path = folder / META_FILE
    where = str(path)
    try:  # kind, size and presence are checked on the open file (no check-then-open gap)
        raw = load_yaml(read_regular_bytes(path, "submission.yaml", META_MAX_BYTES, follow=False)
                        .decode("utf-8"), where)
    except UnicodeDecodeError as exc:
        problems.add(where, None, None, f"malformed YAML: {exc}")
        return None
    except BadInput as exc:
        problems.add(where, None, None, exc.message)
        return None
    if not isinstance(raw, dict):
        problems.add(where, None, None, "must be a mapping of fields")
        return None
    for key in threshold_key_paths(raw):
        problems.add(where, None, key, "thresholds cannot be set by a submission: the evaluator freezes one "
                     "threshold per source on the clean _val predictions (maximum F1) and applies it to every "
                     "condition; remove this field")
    vals, bad = check_required(raw)
    for key, why in bad:
        problems.add(where, None, key, why)
    track = vals.get("track")
    if track is not None and track not in TRACKS:
        problems.add(where, None, "track", f"unknown track {shown(track)} (expected one of {list(TRACKS)})")
        return None
    if "dataset_digest" in vals and vals["dataset_digest"] != index.digest:
        problems.add(where, None, "dataset_digest", f"{shown(vals['dataset_digest'])} does not match the dataset's "
                     f"manifest digest {index.digest!r}: the predictions were made on another dataset build")
    if "dataset_version" in vals and vals["dataset_version"] != index.version:
        problems.add(where, None, "dataset_version",
                     f"{shown(vals['dataset_version'])} does not match the dataset version {index.version!r}")
    nd = raw.get("no_detections") or []
    if isinstance(nd, str) or not isinstance(nd, list) or not all(isinstance(x, str) for x in nd):
        problems.add(where, None, "no_detections", "must be a list of 'config' or 'config/split' strings")
        nd = []
    metadata, bad = check_metadata(raw)
    for key, why in bad:
        problems.add(where, None, key, why)
    classes, why = check_classes(raw.get("class_ids"))
    if why:
        problems.add(where, None, "class_ids", why)
    detector = raw.get("detector")
    weights = None
    try:
        weights = check_weights_sha256(detector.get("weights_sha256") if isinstance(detector, dict) else None)
    except ValueError as exc:
        problems.add(where, None, "detector.weights_sha256", str(exc))
    if track is None:
        return None
    extra = {k: v for k, v in raw.items() if k not in REQUIRED_FIELDS and k not in ("no_detections", "class_ids")
             and k not in METADATA_FIELDS}
    return SubmissionMeta(**{k: vals.get(k, "") for k in REQUIRED_FIELDS}, no_detections=tuple(nd), classes=classes,
                          extra=extra, metadata=metadata, weights_sha256=weights)


def declared_empty(meta: SubmissionMeta, keys: list[tuple[str, str]], where: str, problems: Problems
                   ) -> set[tuple[str, str]]:
    """The (config, split) pairs declared under ``no_detections``."""
    out = set()
    for i, item in enumerate(meta.no_detections):
        config, _, split = item.partition("/")
        hit = {(c, s) for c, s in keys if c == config and (not split or s == split)}
        if not hit:
            problems.add(where, None, "no_detections", f"entry {i} {shown(item)} names no config/split of track "
                         f"{meta.track!r}")
        out |= hit
    return out


# ------------------------------------------------------------------ forms


def _frames(index: DatasetIndex, track: str) -> Frames:
    sizes, split_track = {}, {}
    for config in index.configs():
        for split, info in index.manifest["configs"][config]["splits"].items():
            split_track[(config, split)] = index.track_of(info["source"]) or "?"
    for key in index.keys(track):
        g = index.gt(*key)
        sizes[key] = {i: (int(w), int(h)) for i, w, h in zip(g.image_ids, g.width, g.height)}
    return Frames(sizes, set(index.configs()), split_track, track)


def detect_form(folder: Path, problems: Problems) -> str | None:
    """Which prediction form the folder uses ("parquet", "coco", "yolo")."""
    forms = []
    if (folder / PARQUET_FILE).is_file():
        forms.append("parquet")
    pdir = folder / PRED_DIR
    if pdir.is_dir():
        if any(p.suffix == ".json" for p in pdir.iterdir() if p.is_file()):
            forms.append("coco")
        if any(p.is_dir() for p in pdir.iterdir()):
            forms.append("yolo")
    if len(forms) == 1:
        return forms[0]
    if not forms:
        problems.add(str(folder), None, None, f"no predictions: expected {PARQUET_FILE}, "
                     f"{PRED_DIR}/<config>.json (COCO) or {PRED_DIR}/<config>/<split>/<image_id>.txt (YOLO)")
    else:
        problems.add(str(folder), None, None, f"predictions given in several forms {forms}; use exactly one")
    return None


def _size_ok(path: Path, limits: ValidationLimits, problems: Problems, cap: int | None = None) -> bool:
    size, limit = path.stat().st_size, min(limits.max_file_bytes, cap or limits.max_file_bytes)
    if size > limit:
        problems.add(str(path), None, None, f"file is {size} bytes, larger than the limit of {limit} bytes")
        return False
    return True


def _collect_rows(folder: Path, form: str, index: DatasetIndex, frames: Frames, limits: ValidationLimits,
                  problems: Problems, classes: dict | None = None) -> list[RawRows]:
    if form == "parquet":
        path = folder / PARQUET_FILE
        if not _size_ok(path, limits, problems):
            return []
        n_images = sum(len(sizes) for sizes in frames.sizes.values())
        max_rows = min(MAX_PREDICTION_ROWS, n_images * limits.max_dets_per_image)
        why = f" ({n_images} images of the track x {limits.max_dets_per_image} detections per image)"
        rows = parse_parquet(path, problems, max_rows, why)
        check_labels(path, frames.track, problems, max_rows)
        return [rows]
    pdir = folder / PRED_DIR
    if form == "coco":
        out = []
        for path in sorted(p for p in pdir.iterdir() if p.is_file()):
            if path.suffix != ".json":
                problems.add(str(path), None, None, "unexpected file: COCO results are predictions/<config>.json")
                continue
            config = path.stem
            ids = {cid: (s, i) for cid, s, i in index.coco_images(config)} if config in frames.configs else {}
            if not ids:
                problems.add(str(path), None, None, f"no config {config!r} with detection splits in the dataset")
                continue
            if _size_ok(path, limits, problems, MAX_COCO_FILE_BYTES):
                rule = ClassRule.of(frames.track, classes, coco_categories(index, config))
                out.append(parse_coco(path, config, ids, problems, rule))
        return out
    parts, rule = [], ClassRule.of(frames.track, classes, {TRACK_LABELS[frames.track]: 0})
    for cdir in sorted(p for p in pdir.iterdir()):
        if not cdir.is_dir():
            problems.add(str(cdir), None, None, "unexpected file: YOLO predictions are "
                         "predictions/<config>/<split>/<image_id>.txt")
            continue
        for sdir in sorted(cdir.iterdir()):
            key = (cdir.name, sdir.name)
            if not sdir.is_dir() or key not in frames.sizes:
                why = ("is not a folder" if not sdir.is_dir() else f"config {cdir.name!r} has no split "
                       f"{sdir.name!r} of track {frames.track!r}")
                problems.add(str(sdir), None, None, why)
                continue
            sizes = frames.sizes[key]
            for path in sorted(sdir.iterdir()):
                if path.suffix != ".txt" or path.stem not in sizes:
                    problems.add(str(path), None, None, f"not <image_id>.txt of an image in {key[0]}/{key[1]}")
                elif _size_ok(path, limits, problems, MAX_YOLO_FILE_BYTES):
                    parts.append(parse_yolo_file(path, key[0], key[1], sizes[path.stem], problems, rule))
    return [RawRows.concat(parts, "line", YOLO_FIELDS)] if parts else []


def _load_predictions(folder: Path, form: str, index: DatasetIndex, frames: Frames) -> PredictionTable:
    """Read the validated files with the library readers."""
    if form == "parquet":
        return read_parquet_predictions(folder / PARQUET_FILE)
    merged = {}
    pdir = folder / PRED_DIR
    if form == "coco":
        with tempfile.TemporaryDirectory(prefix="aegisbench-coco-") as tmp:
            for path in sorted(pdir.glob("*.json")):
                merged.update(read_coco_table(path, path.stem, index, Path(tmp)))
    else:
        for key, sizes in sorted(frames.sizes.items()):
            sdir = pdir / key[0] / key[1]
            if sdir.is_dir():
                merged.update(read_yolo_txt(sdir, sizes, *key))
    return PredictionTable(merged)


def _check_files(folder: Path, form: str, index: DatasetIndex, frames: Frames, limits: ValidationLimits,
                 problems: Problems, classes: dict | None = None) -> set[tuple[str, str]]:
    """Row checks of every prediction file; the (config, split) pairs they cover (rows
    with bad values still show that the split was predicted: no double report)."""
    covered: set[tuple[str, str]] = set()
    for raw in _collect_rows(folder, form, index, frames, limits, problems, classes):
        check_rows(raw, frames, problems, tolerance_px=limits.frame_tolerance_px, max_dets=limits.max_dets_per_image)
        covered |= raw.pairs()
    return covered


def read_detection_predictions(folder: Path, meta: SubmissionMeta, index: DatasetIndex, limits: ValidationLimits,
                               warp_grid: int, problems: Problems) -> tuple[str | None, PredictionTable | None, dict]:
    """The detection tracks' ``Track.read``: every prediction file of the folder checked
    (problems recorded), then read with the library readers."""
    from aegisbench.evaluation import warp_eval
    from aegisbench.evaluation.warp_noise_eval import read_noise_predictions
    keys = index.keys(meta.track)
    if not keys:
        problems.add(str(index.repo), None, None, f"the dataset has no split of track {meta.track!r}")
        return None, None, {}
    frames = _frames(index, meta.track)
    empty = declared_empty(meta, keys, str(folder / META_FILE), problems)
    form = detect_form(folder, problems)
    before = problems.file_level
    covered = _check_files(folder, form, index, frames, limits, problems, meta.classes) if form else set()
    if form and problems.file_level == before:  # coverage is only meaningful when every file was read
        _check_coverage(folder, form, keys, covered, empty, problems)
    warp = {WARP_PATCH: None, WARP_NOISE: None}
    for name, file in ((WARP_PATCH, WARP_PATCH_FILE), (WARP_NOISE, WARP_NOISE_FILE)):
        path, declared, where = folder / file, meta.extra.get(name), str(folder / META_FILE)
        if path.is_file() and meta.track != SMOKE:
            problems.add(str(path), None, None, "the WARP tests are scored on the smoke track only")
        elif path.is_file() and _size_ok(path, limits, problems):
            warp[name] = (warp_eval.read_patch_predictions(path, index, limits, problems, warp_grid, declared, where)
                          if name == WARP_PATCH else read_noise_predictions(path, index, limits, problems, declared,
                                                                             where))
    if problems:
        return form, None, {}
    try:
        table = _load_predictions(folder, form, index, frames)
    except BadInput as exc:  # a reader refusing what the checks let through
        problems.add(exc.where or str(folder), None, None, exc.message)
        return form, None, {}
    log.info("submission %s: %d boxes over %d images (%s form)", folder.name, table.n_boxes(), len(table), form)
    return form, table, warp


def _check_coverage(folder: Path, form: str, keys, covered: set, empty: set, problems: Problems) -> None:
    where = str(folder / (PARQUET_FILE if form == "parquet" else PRED_DIR))
    for config, split in keys:
        if (config, split) in covered and (config, split) in empty:
            problems.add(str(folder / META_FILE), None, "no_detections",
                         f"{config}/{split} is declared empty but has predictions")
        elif (config, split) not in covered and (config, split) not in empty:
            problems.add(where, None, "config", f"no predictions for config {config!r} split {split!r} "
                         "(every config of the track is required, including the clean _val splits; declare "
                         "a split where the model found nothing under no_detections in submission.yaml)")


def validate_submission(folder: str | Path, index: DatasetIndex, limits: ValidationLimits = ValidationLimits(),
                        warp_grid: int = WARP_GRID) -> ValidatedSubmission:
    """Check everything (the shared ``submission.yaml`` checks, then the track's own
    ``read``); raise :class:`SubmissionInvalid` listing every problem, else return the
    loaded submission."""
    from aegisbench.evaluation.tracks import get_track
    folder = Path(folder)
    sid = submission_id(folder)  # a real folder with a valid id, reached through no link
    problems = Problems()
    entries = submission_files(folder, problems, limits.max_file_bytes)  # regular files, sizes bounded: none read yet
    if problems:
        raise SubmissionInvalid(problems)
    meta = read_meta(folder, index, problems)
    if meta is None:
        raise SubmissionInvalid(problems)
    files = {p.relative_to(folder).as_posix(): file_sha256(p) for p in entries}
    form, predictions, extras = get_track(meta.track).read(folder, meta, index, limits, warp_grid, problems)
    if problems:
        raise SubmissionInvalid(problems)
    return ValidatedSubmission(folder, sid, meta, form, predictions, files,
                               extras.get(WARP_PATCH), extras.get(WARP_NOISE))
