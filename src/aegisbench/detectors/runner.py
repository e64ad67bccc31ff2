"""``aegisbench detect``: run a wrapped detector over a dataset repo and write a submission.

Every ``(config, split)`` of the track is predicted - the clean ``<source>_val``
splits (the evaluator freezes the threshold there) and every config's test splits.
Work happens in a hidden staging folder next to the output (``.<id>.detect-partial``):
each finished config is written as an atomic Parquet part plus a JSON marker holding
the run key (detector, weights hash, options, dataset digest), so an interrupted run
resumes per config and never mixes parts of different runs. At the end the parts are
joined into ``predictions.parquet``, ``submission.yaml`` is written (with the dataset
manifest digest) and the completed folder is swapped into place.

Only the model classes of the detector's class map (``options.classes``; when unset,
:meth:`~aegisbench.detectors.interface.Detector.map_classes` picks them or refuses the
model) are written, labelled with the track's label; the map is recorded under
``classes`` in ``submission.yaml`` and is part of the run key.

The WARP global-noise sweep (seed 000; :mod:`aegisbench.detectors.noise_sweep`) runs
through the same loader, worker and resume machinery (:func:`local_batches`,
:func:`worker_batches`, :func:`predict_parts`, :func:`resume_parts`) on levels the repo
does not store: clean frames, the noise added to the tensor the model sees.

>>> SubmissionInfo(name="ref", model="yolo").license
'MIT'
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from aegisbench import isa
from aegisbench.atomic import atomic_path, atomic_write_text, clean_leftovers, output_lock, replace_dir, staging_path
from aegisbench.staging import resumable_dir
from aegisbench.dataset.verify import require_verified
from aegisbench.detectors.interface import Detector
from aegisbench.detectors.loader import FrameLoader, input_noise, input_shards
from aegisbench.detectors.ray_runner import plan_jobs, worker_results, worker_spec
from aegisbench.errors import BadInput
from aegisbench.fields import check_int
from aegisbench.executor import Executor
from aegisbench.hashing import file_sha256, json_sha256
from aegisbench.predictions import PREDICTION_SCHEMA, write_parquet_predictions
from aegisbench.progress import progress as progress_bar
from aegisbench.vocab import CLEAN, DETECTION_TRACKS, TRACK_LABELS

log = logging.getLogger(__name__)

TRACKS = DETECTION_TRACKS  # detect runs on the detection tracks


@dataclass(frozen=True)
class SubmissionInfo:
    """The descriptive fields of ``submission.yaml`` (the dataset fields come from the repo)."""

    name: str
    model: str
    team: str = "AegisBench"
    contact: str = "n/a"
    license: str = "MIT"
    description: str = "Predictions written by aegisbench detect."
    # model metadata (paper, code, architecture, training_data), checked by the caller; the parameter
    # count is always the loaded network's
    metadata: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name != "metadata" and (not isinstance(v, str) or not v.strip()):
                raise BadInput(f"{f.name} must be a non-empty string", where=f"--{f.name}")


@dataclass(frozen=True)
class RunOptions:
    """Loader and output settings: frames per ``predict`` call, decode threads, batches
    decoded ahead, progress bar, replacing an existing submission folder."""

    frames_per_batch: int = 8
    loader_workers: int = 2
    prefetch: int = 2
    progress: bool = True
    overwrite: bool = False

    def __post_init__(self) -> None:
        for name in ("frames_per_batch", "loader_workers", "prefetch"):
            check_int(getattr(self, name), name, lo=1, error=BadInput, where=f"--{name.replace('_', '-')}")


def track_splits(manifest: dict, track: str) -> dict[str, list[str]]:
    """``config -> [split, ...]`` of every split whose source belongs to ``track``
    (``clean`` first, then configs by name)."""
    if track not in TRACKS:
        raise BadInput(f"detect runs on the detection tracks {list(TRACKS)}, got {track!r}", where="--track")
    sources = {s for s, info in manifest.get("sources", {}).items() if info.get("track") == track}
    out: dict[str, list[str]] = {}
    for config in sorted(manifest["configs"], key=lambda c: (c != CLEAN, c)):
        splits = sorted(s for s, info in manifest["configs"][config]["splits"].items() if info["source"] in sources)
        if splits:
            out[config] = splits
    if not any(s.endswith("_val") for s in out.get(CLEAN, [])):
        raise BadInput(f"the dataset has no clean validation split of track {track!r}", where="--dataset")
    return out


def run_key(detector: Detector, manifest: dict, track: str, options=None, warp_noise: str | None = None) -> str:
    """What decides the predictions: model identity and weights bytes, options (those the
    workers run with, when given), dataset, and where WARP noise is applied (when it is)."""
    weights = Path(getattr(detector, "weights", ""))
    opts = dataclasses.asdict(options or detector.options)
    extra = {"warp_noise": warp_noise} if warp_noise else {}
    return json_sha256({"detector": detector.describe(), "options": opts, "track": track,
                        "weights_sha256": file_sha256(weights) if weights.is_file() else None,
                        "dataset_digest": manifest["dataset_digest"], **extra})


def staging_for(out: Path) -> Path:
    return staging_path(out, "detect-partial")


def check_output(out: Path, overwrite: bool) -> None:
    """Refuse to replace an existing non-empty folder unless ``overwrite``."""
    if out.exists() and not out.is_dir():
        raise BadInput("output path exists and is not a folder", where=str(out))
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise BadInput("output folder already exists and is not empty (pass --overwrite to replace it)",
                       where=str(out))


def _part_done(parts: Path, config: str, key: str) -> bool:
    marker, part = parts / f"{config}.json", parts / f"{config}.parquet"
    if not (marker.exists() and part.exists()):
        return False
    try:
        info = json.loads(marker.read_text())
    except json.JSONDecodeError:
        return False
    return info.get("run_key") == key and info.get("sha256") == file_sha256(part)


def run_detect(detector: Detector, repo: str | Path, track: str, out: str | Path, info: SubmissionInfo,
               run: RunOptions = RunOptions(), *, manifest: dict | None = None,
               executor: Executor | None = None, device: str | None = None, half: bool | None = None) -> dict:
    """Predict every split of ``track`` and write ``out`` (predictions.parquet + submission.yaml).

    Returns a report: configs run and resumed, frames, windows, wall seconds,
    images/s and tiles/s, and the model's share of the time. ``manifest`` is that of
    ``repo`` when the caller already verified it. ``executor`` (default: this process)
    may run the model on local worker processes or Ray Data actors
    (:mod:`aegisbench.detectors.ray_runner`); Ray actors run on ``device`` with FP16 as
    ``half`` (defaults: the detector's). The frames of every predict call, hence the
    predictions, are the same whichever executor runs them.
    """
    isa.require("the predictions")
    repo, out = Path(repo), Path(out)
    manifest = manifest or require_verified(repo)  # before anything is written
    plan = track_splits(manifest, track)
    with output_lock(out):  # one writer of ``out``; what killed runs left (not the resumable parts) goes first
        clean_leftovers(out)
        return _run_locked(detector, repo, track, out, info, run, manifest, plan, executor, device, half)


def _run_locked(detector: Detector, repo: Path, track: str, out: Path, info: SubmissionInfo, run: RunOptions,
                manifest: dict, plan: dict, executor: Executor | None, device: str | None, half: bool | None) -> dict:
    """:func:`run_detect` once it holds the lock of ``out``."""
    check_output(out, run.overwrite)
    if detector.options.classes is None:
        detector.map_classes(TRACK_LABELS[track])
    elif detector.options.classes.target != TRACK_LABELS[track]:
        raise BadInput(f"the class map writes {detector.options.classes.target!r}, track {track!r} is labelled "
                       f"{TRACK_LABELS[track]!r}", where="--classes")
    executor = executor or Executor()
    remote = executor.kind == "ray" or executor.workers > 1
    spec = worker_spec(detector, executor, device, half) if remote else None
    key = run_key(detector, manifest, track, spec.options if spec else None)
    staging, parts, todo = resume_parts(out, plan, key)
    sizes = {(c, s): manifest["configs"][c]["splits"][s]["rows"] for c in todo for s in plan[c]}
    bar = progress_bar(sum(sizes.values()), f"detect {track}", unit="img", enabled=run.progress)
    work, wall = run_parts(detector, repo, manifest, plan, todo, {}, run, (spec, executor), parts, key, bar)
    empty = _finalize(staging, parts, plan, manifest, track, info, detector)
    replace_dir(staging, out)
    return _report(out, plan, todo, work, wall, empty)


def run_parts(detector: Detector, repo: Path, manifest: dict, plan: dict[str, list[str]], todo: list[str],
              levels: dict[str, float], run: RunOptions, remote: tuple, parts: Path, key: str, bar
              ) -> tuple[tuple, float]:
    """Predict the ``todo`` configs of ``plan`` into ``parts`` (``levels``: ``config -> a`` of the
    configs read from clean with noise ``a`` at the model input) in this process or, with
    ``remote`` = ``(spec, executor)`` and a spec, on the workers; returns ``(work, wall)``:
    (frames, windows, model seconds) and the wall seconds."""
    spec, executor = remote
    t0, before = time.perf_counter(), dataclasses.replace(detector.stats)
    if spec is None:
        batches = local_batches(detector, repo, manifest, plan, todo, levels, run)
    else:
        jobs = plan_jobs(repo, manifest, plan, todo, run.frames_per_batch, levels)
        batches = worker_batches(detector, spec, jobs, executor)
    predict_parts(batches, plan, todo, parts, key, bar)
    bar.close()
    done = detector.stats
    work = (done.frames - before.frames, done.windows - before.windows, done.seconds - before.seconds)
    return work, time.perf_counter() - t0


def resume_parts(out: Path, plan: dict[str, list[str]], key: str, name: str = "detect-partial"
                 ) -> tuple[Path, Path, list[str]]:
    """The staging folder (``name``), its ``parts`` folder and the configs still to run (a
    config whose part and marker match ``key`` is done)."""
    staging = resumable_dir(out, name)
    parts = staging / "parts"
    parts.mkdir(exist_ok=True)
    todo = [c for c in plan if not _part_done(parts, c, key)]
    resumed = [c for c in plan if c not in todo]
    if resumed:
        log.info("resuming: %d of %d configs already done (%s)", len(resumed), len(plan), ", ".join(resumed))
    return staging, parts, todo


def local_batches(detector: Detector, repo: Path, manifest: dict, plan: dict[str, list[str]], todo: list[str],
                  levels: dict[str, float], run: RunOptions):
    """``(tag, image_ids, () -> detections)`` of each batch of the frame loader, in plan order
    (predicted in this process)."""
    shards = []
    for c in todo:
        for s in plan[c]:
            paths, keep = input_shards(repo, manifest, c, s, at_input=c in levels)
            shards += [((c, s), p, keep) for p in paths]
    loader = FrameLoader(shards, batch=run.frames_per_batch, workers=run.loader_workers, prefetch=run.prefetch)
    return ((fb.tag, fb.image_ids, _predict_call(detector, fb.images,
                                                 input_noise(manifest, levels, fb.tag, fb.image_ids)))
            for fb in loader)


def predict_parts(batches, plan: dict[str, list[str]], todo: list[str], parts: Path, key: str, bar) -> None:
    """Predict every batch and write each config's part as soon as it is complete (configs
    finish in plan order; one continuous stream of batches feeds them all)."""
    entries: dict = {}
    counts = {c: {s: {"images": 0, "boxes": 0} for s in plan[c]} for c in todo}
    open_configs = list(todo)
    for (config, split), image_ids, predict in batches:
        while open_configs[0] != config:  # earlier configs are complete: written before predicting on
            _write_part(parts, open_configs.pop(0), entries, counts, key)
        for image_id, det in zip(image_ids, predict()):
            if len(det):
                entries[(config, split, image_id)] = det
                counts[config][split]["boxes"] += len(det)
        counts[config][split]["images"] += len(image_ids)
        bar.update(len(image_ids))
    while open_configs:
        _write_part(parts, open_configs.pop(0), entries, counts, key)


def _report(out: Path, plan: dict, todo: list[str], work: tuple, wall: float, empty: list[str]) -> dict:
    """The run's report (and its log line) from ``work`` = (frames, windows, model seconds)."""
    frames, windows, model_s = work
    report = {"out": str(out), "configs": len(plan), "configs_run": len(todo), "configs_resumed": len(plan) - len(todo),
              "frames": frames, "windows": windows, "seconds": round(wall, 3),
              "images_per_s": round(frames / wall, 3) if wall > 0 and frames else 0.0,
              "tiles_per_s": round(windows / wall, 3) if wall > 0 and windows else 0.0,
              "predict_share": round(model_s / wall, 3) if wall > 0 else 0.0, "no_detections": empty}
    log.info("detect: %d images (%d tiles) in %.1f s: %.2f images/s, %.2f tiles/s", frames, windows, wall,
             report["images_per_s"], report["tiles_per_s"])
    return report


def _predict_call(detector: Detector, images: list, noise):
    """``() -> detections`` of one batch (``noise`` only passed when there is some)."""
    if noise is None:
        return functools.partial(detector.predict, images)
    return functools.partial(detector.predict, images, noise=noise)


def worker_batches(detector: Detector, spec, jobs: list, executor: Executor):
    """``(tag, image_ids, () -> detections)`` of each job run by the workers (counted in
    ``detector.stats``), in plan order."""
    for r in worker_results(spec, jobs, executor):
        detector.stats.add(r.stats)
        yield r.tag, r.image_ids, (lambda dets=r.detections: dets)


def _write_part(parts: Path, config: str, entries: dict, counts: dict, key: str) -> None:
    """Write one finished config (atomic Parquet part, then its marker) and free its rows."""
    mine = {k: entries.pop(k) for k in [k for k in entries if k[0] == config]}
    part = parts / f"{config}.parquet"
    write_parquet_predictions(mine, part)
    atomic_write_text(parts / f"{config}.json", json.dumps(
        {"run_key": key, "config": config, "splits": counts[config], "sha256": file_sha256(part)}, sort_keys=True))
    log.info("config %s: %s", config, ", ".join(f"{s} {c['images']} img / {c['boxes']} boxes"
                                               for s, c in counts[config].items()))


def _finalize(staging: Path, parts: Path, plan: dict[str, list[str]], manifest: dict, track: str,
              info: SubmissionInfo, detector: Detector) -> list[str]:
    """Join the parts into predictions.parquet and write submission.yaml; returns the
    ``config/split`` entries with no detection (declared under ``no_detections``)."""
    tables, empty = [], []
    for config, splits in plan.items():
        t = pq.read_table(parts / f"{config}.parquet", schema=PREDICTION_SCHEMA)
        tables.append(t)
        present = set(t.column("split").to_pylist())
        empty += [f"{config}/{s}" for s in splits if s not in present]
    joined = pa.concat_tables(tables) if tables else PREDICTION_SCHEMA.empty_table()
    with atomic_path(staging / "predictions.parquet") as tmp:
        pq.write_table(joined, tmp)
    meta = {"name": info.name, "team": info.team, "track": track, "model": info.model, "contact": info.contact,
            "license": info.license, "description": info.description,
            "dataset_version": manifest["benchmark_version"], "dataset_digest": manifest["dataset_digest"],
            **info.metadata}
    n_params = detector.parameters()
    if n_params:
        meta["parameters"] = n_params
    if empty:
        meta["no_detections"] = empty
    if detector.options.classes is not None:
        meta["classes"] = detector.options.classes.record()
    meta["detector"] = detector_record(detector)
    atomic_write_text(staging / "submission.yaml", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))
    shutil.rmtree(parts)
    return empty


def detector_record(detector: Detector, warp_noise: str | None = None) -> dict:
    """How the predictions were made (recorded in submission.yaml; never a threshold);
    ``warp_noise`` says where the WARP noise sweep added its noise (``model_input``)."""
    o = detector.options
    weights = Path(getattr(detector, "weights", ""))
    return {**detector.describe(),
            "weights_sha256": file_sha256(weights) if weights.is_file() else None,
            "score_floor": float(o.conf), "max_det_window": o.max_det, "max_det_frame": o.max_det_frame,
            "imgsz": o.imgsz, "model_nms_iou": o.nms_iou, "half": o.half,
            "tiling": dataclasses.asdict(o.tiling), **({"warp_noise": warp_noise} if warp_noise else {}),
            **({"class_ids": list(o.classes.ids)} if o.classes is not None else {})}
