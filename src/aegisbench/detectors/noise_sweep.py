"""WARP global sanity check (seed 000): the detector on every clean test frame of the smoke
sources at each noise level ``a``, the noise ``x' = (1 - a) x + a sigma r`` added to the
tensor the model sees (:func:`~aegisbench.detectors.interface.warp_input_noise`, sigma of
that tensor), as the seed defines it.

The repo stores none of it: each level is the results config ``warp_noise_<thousandths>``
(``warp_noise_210`` for a = 0.21) read from the ``clean`` test splits, each frame with the
stable noise key ``(benchmark_version, config, split, image_id)``, through the loader,
worker / Ray and resume machinery of ``aegisbench detect``
(:func:`~aegisbench.detectors.runner.run_parts`): a rerun, a resumed run and every
executor give the same predictions, and a level already predicted is reused (per level).
Rows go to ``warp_noise.parquet`` in the submission folder in the columns of
``predictions.parquet`` (``config, split, image_id, x1..y2, score, label``); a (level,
image) without rows had no detection. ``submission.yaml`` records ``warp_noise: {levels,
noise_at: model_input}``; :mod:`aegisbench.evaluation.warp_noise_eval` scores L(a).

>>> m = {"sources": {"s": {"track": "smoke"}, "p": {"track": "sar"}},
...      "configs": {"clean": {"splits": {"s": {}, "s_val": {}, "p": {}}}}}
>>> sweep_plan(m, (0.1, 0.21))
{'warp_noise_100': ['s'], 'warp_noise_210': ['s']}
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from aegisbench.atomic import atomic_path, atomic_write_text, clean_leftovers, output_lock
from aegisbench.dataset.verify import require_verified
from aegisbench.detectors.interface import WARP_INPUT, Detector
from aegisbench.detectors.ray_runner import worker_spec
from aegisbench.detectors.runner import RunOptions, resume_parts, run_key, run_parts
from aegisbench.detectors.warp_runner import submission_meta
from aegisbench.errors import BadInput
from aegisbench.executor import Executor
from aegisbench.predictions import PREDICTION_SCHEMA
from aegisbench.progress import progress as progress_bar
from aegisbench.vocab import CLEAN, SMOKE, WARP_NOISE_FILE, warp_noise_config

log = logging.getLogger(__name__)


def sweep_plan(manifest: dict, levels) -> dict[str, list[str]]:
    """``config -> [split, ...]``: each level's config over the clean test split of every
    smoke source (a source's test split is named like the source)."""
    clean = manifest["configs"].get(CLEAN, {}).get("splits", {})
    splits = sorted(s for s, info in manifest.get("sources", {}).items() if info.get("track") == SMOKE and s in clean)
    return {warp_noise_config(a): list(splits) for a in levels} if splits else {}


def run_noise_sweep(detector: Detector, repo: str | Path, submission: str | Path, levels,
                    run: RunOptions = RunOptions(), *, manifest: dict | None = None,
                    executor: Executor | None = None, device: str | None = None, half: bool | None = None) -> dict:
    """Write ``warp_noise.parquet`` (every level of ``levels``, strictly increasing values in
    [0, 1], over every clean smoke test frame) into an existing smoke submission folder; the
    executor as in :func:`~aegisbench.detectors.runner.run_detect`. Returns a report."""
    repo, sub = Path(repo), Path(submission)
    with output_lock(sub):  # one writer of the submission at a time (detect and the patch test take it too)
        clean_leftovers(sub)
        return _sweep(detector, repo, sub, tuple(levels), run, manifest, executor or Executor(), device, half)


def _sweep(detector: Detector, repo: Path, sub: Path, levels: tuple, run: RunOptions, manifest: dict | None,
           executor: Executor, device: str | None, half: bool | None) -> dict:
    manifest = manifest or require_verified(repo)
    if not getattr(detector, "input_noise", False):
        raise BadInput(f"detector {detector.name!r} cannot add noise at its model input (seed 000's protocol)",
                       where="--detector")
    meta_path = sub / "submission.yaml"
    meta, _ = submission_meta(meta_path, manifest, detector)
    plan = sweep_plan(manifest, levels)
    if not plan:
        raise BadInput("the dataset has no clean test split of a smoke source to sweep WARP noise over",
                       where=str(repo))
    names = {warp_noise_config(a): float(a) for a in levels}
    remote = executor.kind == "ray" or executor.workers > 1
    spec = worker_spec(detector, executor, device, half) if remote else None
    key = run_key(detector, manifest, SMOKE, spec.options if spec else None, WARP_INPUT)
    staging, parts, todo = resume_parts(sub, plan, key, "warp-noise-partial")
    frames = sum(manifest["configs"][CLEAN]["splits"][s]["rows"] for s in next(iter(plan.values())))
    bar = progress_bar(len(todo) * frames, "warp noise", unit="img", enabled=run.progress)
    (n, windows, _), wall = run_parts(detector, repo, manifest, plan, todo, names, run, (spec, executor), parts,
                                      key, bar)
    tables = [pq.read_table(parts / f"{c}.parquet", schema=PREDICTION_SCHEMA) for c in plan]
    with atomic_path(sub / WARP_NOISE_FILE) as tmp:
        pq.write_table(pa.concat_tables(tables), tmp)
    meta["warp_noise"] = {"levels": [names[c] for c in plan], "noise_at": WARP_INPUT}
    atomic_write_text(meta_path, yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))
    shutil.rmtree(staging)
    report = {"levels": len(plan), "levels_run": len(todo), "frames_per_level": frames, "frames": n,
              "seconds": round(wall, 3), "images_per_s": round(n / wall, 3) if wall > 0 and n else 0.0}
    log.info("WARP noise: %d levels x %d frames (%d run) in %.1f s (%.2f images/s)", len(plan), frames, n, wall,
             report["images_per_s"])
    return report
