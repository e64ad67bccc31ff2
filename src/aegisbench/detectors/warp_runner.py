"""WARP local deception runner (seed 000): the detector on every cloud-patch variant.

For each smoke-positive image of the clean test split of every smoke source, the
corruption engine pastes one cloud sprite (key ``("warp_patch",)``: the same cloud
everywhere, as the paper used one PNG) at the centre of each slot of a ``grid`` x
``grid`` grid (625 variants by default); the variants are built in a background
thread and batched through ``Detector.predict``. Rows go to ``warp_patch.parquet``
in the submission folder, in the columns :mod:`aegisbench.evaluation.warp_eval`
reads (``split, image_id, position, row, col, x1..y2, score, label``); an
(image, position) without rows had no detection. The run is resumable per image.
``images`` subsamples images per source (seeded order; ``warp.images`` in params.yaml) for
CPU runs; the images run, the grid and the patch size are recorded under ``warp_patch`` in
``submission.yaml``. The global-noise sweep, the other half of WARP, is
:mod:`aegisbench.detectors.noise_sweep`.

>>> WarpParams().grid, WarpParams(images=2).images
(25, 2)
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from aegisbench.atomic import atomic_path, atomic_write_text, clean_leftovers, output_lock

from aegisbench.staging import resumable_dir
from aegisbench.dataset.verify import require_verified
from aegisbench.dataset.images import decode_image
from aegisbench.detectors.classes import classes_of_ids
from aegisbench.detectors.interface import Detector
from aegisbench.detectors.loader import background
from aegisbench.detectors.runner import detector_record
from aegisbench.errors import BadInput
from aegisbench.fields import check_bool, check_int
from aegisbench.hashing import json_sha256, rng_for
from aegisbench.progress import progress as progress_bar
from aegisbench.vocab import CLEAN, SMOKE, TRACK_LABELS, WARP_GRID, WARP_PATCH

log = logging.getLogger(__name__)

WARP_FILE = "warp_patch.parquet"
WARP_SCHEMA = pa.schema([("split", pa.string()), ("image_id", pa.string()), ("position", pa.int32()),
                         ("row", pa.int32()), ("col", pa.int32()), ("x1", pa.float32()), ("y1", pa.float32()),
                         ("x2", pa.float32()), ("y2", pa.float32()), ("score", pa.float32()),
                         ("label", pa.string())])
SPRITE_KEY = (WARP_PATCH,)  # the cloud of every variant: rng_for("warp", "cloud_sprite", *SPRITE_KEY)


@dataclass(frozen=True)
class WarpParams:
    """Grid side, patch side in pixels (None: the engine's rule, 25 px per 640 px),
    optional cap on images per source (None: every one), and whether smoke-free images
    run too (the evaluator scores smoke-positive images only)."""

    grid: int = WARP_GRID
    patch: int | None = None
    images: int | None = None
    include_negatives: bool = False

    def __post_init__(self) -> None:
        check_int(self.grid, "grid", lo=1, error=BadInput, where="--grid")
        for name in ("patch", "images"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, lo=1, error=BadInput, where=f"--{name}")
        check_bool(self.include_negatives, "include_negatives")


def warp_images(repo: Path, manifest: dict, params: WarpParams) -> list[tuple[str, str, Path]]:
    """``(split, image_id, shard)`` of the images to run: clean test split of each smoke
    source, positives only unless ``include_negatives``, subsampled in a seeded order."""
    sources = sorted(s for s, i in manifest.get("sources", {}).items() if i.get("track") == SMOKE)
    out = []
    for src in sources:
        info = manifest["configs"].get(CLEAN, {}).get("splits", {}).get(src)
        if info is None:
            continue
        rows = []
        for shard in info["shards"]:
            path = repo / shard["path"]
            t = pq.read_table(path, columns=["image_id", "objects"])
            n_obj = [len(o["bbox"]) for o in t.column("objects").to_pylist()]
            rows += [(src, i, path) for i, n in zip(t.column("image_id").to_pylist(), n_obj)
                     if n > 0 or params.include_negatives]
        if params.images is not None and len(rows) > params.images:
            pick = rng_for(WARP_PATCH, "subsample", src).permutation(len(rows))[:params.images]
            rows = [rows[i] for i in sorted(pick)]
        out += rows
    if not out:
        raise BadInput("the dataset has no clean test image of a smoke source to run the WARP patch test on",
                       where=str(repo))
    return out


def _read_image(path: Path, image_id: str) -> np.ndarray:
    t = pq.read_table(path, columns=["image_id", "image"], filters=[("image_id", "=", image_id)])
    data = t.column("image").combine_chunks().field("bytes").to_pylist()[0]
    return decode_image(data, f"{path.name}:{image_id}")


def _rows(split: str, image_id: str, position: int, grid: int, det) -> dict:
    n = len(det)
    return {"split": [split] * n, "image_id": [image_id] * n, "position": [position] * n,
            "row": [position // grid] * n, "col": [position % grid] * n,
            **{c: det.xyxy[:, j] for j, c in enumerate(("x1", "y1", "x2", "y2"))}, "score": det.score,
            "label": [None] * n if det.label is None else list(det.label)}


def run_warp(detector: Detector, repo: str | Path, submission: str | Path, params: WarpParams = WarpParams(),
             *, variants_per_batch: int = 25, progress: bool = True, manifest: dict | None = None) -> dict:
    """Write ``warp_patch.parquet`` into an existing smoke submission folder."""
    repo, sub = Path(repo), Path(submission)
    with output_lock(sub):  # one writer of the submission at a time (detect takes the same lock)
        clean_leftovers(sub)
        return _run_warp(detector, repo, sub, params, variants_per_batch, progress, manifest)


def _run_warp(detector: Detector, repo: Path, sub: Path, params: WarpParams, variants_per_batch: int,
              progress: bool, manifest: dict | None) -> dict:
    manifest = manifest or require_verified(repo)
    meta_path = sub / "submission.yaml"
    meta, record = submission_meta(meta_path, manifest, detector)
    images = warp_images(repo, manifest, params)
    key = json_sha256({"params": asdict(params), "digest": manifest["dataset_digest"], "detector": record})
    staging = resumable_dir(sub, "warp-partial")
    done = {p.stem for p in staging.glob("*.parquet")
            if (staging / f"{p.stem}.json").exists()
            and json.loads((staging / f"{p.stem}.json").read_text()).get("key") == key}
    todo = [(k, im) for k, im in enumerate(images) if f"{k:06d}" not in done]
    A = params.grid * params.grid
    wall = _predict_images(detector, todo, params, staging, key, variants_per_batch, progress)
    tables = [pq.read_table(staging / f"{k:06d}.parquet", schema=WARP_SCHEMA) for k in range(len(images))]
    with atomic_path(sub / WARP_FILE) as tmp:
        pq.write_table(pa.concat_tables(tables), tmp)
    meta["warp_patch"] = {"grid": params.grid, "patch_px": params.patch, "sprite_key": list(SPRITE_KEY),
                          "images": [f"{s}/{i}" for s, i, _ in images],
                          "subsampled": params.images is not None}
    atomic_write_text(meta_path, yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))
    shutil.rmtree(staging)
    n_var = len(todo) * A
    report = {"images": len(images), "images_run": len(todo), "variants": n_var, "seconds": round(wall, 3),
              "variants_per_s": round(n_var / wall, 3) if wall > 0 and n_var else 0.0}
    log.info("WARP patch: %d images x %d positions in %.1f s (%.2f variants/s)", len(todo), A, wall,
             report["variants_per_s"])
    return report


def submission_meta(meta_path: Path, manifest: dict, detector: Detector) -> tuple[dict, dict]:
    """``(submission.yaml, detector record)`` after checking that the folder is a smoke
    submission of this dataset build made by ``detector``'s weights."""
    if not meta_path.is_file():
        raise BadInput("not a submission folder (no submission.yaml); run aegisbench detect first",
                       where=str(meta_path.parent))
    meta = yaml.safe_load(meta_path.read_text(encoding="utf-8")) or {}
    if meta.get("track") != SMOKE:
        raise BadInput(f"the WARP tests are for the smoke track, submission is {meta.get('track')!r}",
                       where=str(meta_path))
    if meta.get("dataset_digest") != manifest["dataset_digest"]:
        raise BadInput("submission was made on another dataset build (dataset_digest differs)", where=str(meta_path))
    declared = (meta.get("detector") or {}).get("weights_sha256")
    if declared and declared != detector_record(detector)["weights_sha256"]:
        raise BadInput("the WARP test must run the submission's own model (its frozen threshold comes from that "
                       "model's clean validation predictions); weights differ from submission.yaml detector",
                       where="--weights")
    _submission_classes(detector, meta, str(meta_path))
    return meta, detector_record(detector)


def _submission_classes(detector: Detector, meta: dict, where: str) -> None:
    """Give ``detector`` the class map its submission was made with (``detector.class_ids``)."""
    ids = (meta.get("detector") or {}).get("class_ids")
    if ids is None:  # a submission made before class maps: the default map
        mapped = detector.options.classes or detector.map_classes(TRACK_LABELS[SMOKE])
        ids = list(mapped.ids)
    wanted = classes_of_ids(detector.names, ids, TRACK_LABELS[SMOKE], where)
    if detector.options.classes not in (None, wanted):
        raise BadInput(f"the detector's class map {list(detector.options.classes.ids)} differs from the "
                       f"submission's {list(wanted.ids)}", where=where)
    detector.options = dataclasses.replace(detector.options, classes=wanted)


def _predict_images(detector: Detector, todo: list, params: WarpParams, staging: Path, key: str,
                    variants_per_batch: int, progress: bool) -> float:
    """Predict every variant of the ``todo`` images (built in a background thread) and write
    each image's rows to ``staging`` (atomic Parquet part, then its marker); returns the
    seconds the predictions took."""
    from aegisbench.corruptions import cloud_patch_variants

    A = params.grid * params.grid

    def produce(put) -> None:
        for k, (split, image_id, path) in todo:
            image = _read_image(path, image_id)
            chunk: list = []
            for pos, _, _, variant, _ in cloud_patch_variants(image, params.grid, params.patch, key=SPRITE_KEY):
                chunk.append((pos, variant))
                if len(chunk) == variants_per_batch or pos == A - 1:
                    if not put((k, split, image_id, chunk)):
                        return
                    chunk = []

    bar = progress_bar(len(todo) * A, "warp patch", unit="variant", enabled=progress)
    t0, current, cols = time.perf_counter(), None, None
    for k, split, image_id, chunk in background(produce, depth=3):
        if current != k:
            current, cols = k, {n: [] for n in WARP_SCHEMA.names}
        dets = detector.predict([v for _, v in chunk])
        for (pos, _), det in zip(chunk, dets):
            for name, vals in _rows(split, image_id, pos, params.grid, det).items():
                cols[name].extend(vals.tolist() if isinstance(vals, np.ndarray) else vals)
        bar.update(len(chunk))
        if chunk[-1][0] == A - 1:
            table = pa.Table.from_pydict(cols, schema=WARP_SCHEMA)
            with atomic_path(staging / f"{k:06d}.parquet") as tmp:
                pq.write_table(table, tmp)
            atomic_write_text(staging / f"{k:06d}.json", json.dumps({"key": key, "image_id": image_id}))
    bar.close()
    return time.perf_counter() - t0
