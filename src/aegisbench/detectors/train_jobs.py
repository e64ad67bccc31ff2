"""Several reference trainings side by side: one child process per source.

Each training pins its own torch threads (``reference_detector.threads``, 1 by default),
so a training run beside another gives the weights it gives alone; on a 2-core machine
the pipeline's two trainings take the time of the longer one instead of their sum.
Every table is checked before any child starts; a failed child fails the command with
one line naming its source (its own error line is already on stderr).

>>> TrainJob("synthetic_sar", "data/models/reference_sar").argv("params.yaml")[:4]
['train-reference', '--params', 'params.yaml', '--source']
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from aegisbench.errors import BadInput, as_bad_input
from aegisbench.fields import check_int

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainJob:
    """One ``train-reference`` run: source, output folder and the command-line overrides."""

    source: str
    out: str
    source_table: str | None = None
    epochs: int | None = None
    max_images: int | None = None
    score: bool = True
    seed: int | None = None  # override reference_detector.seed (reference.seeds' extra trainings)
    score_tile: int | None = None  # tile of the scoring detection (None: detect's default)

    def argv(self, params: str) -> list[str]:
        """The ``aegisbench`` arguments that run this job alone."""
        args = ["train-reference", "--params", str(params), "--source", self.source, "--out", str(self.out)]
        for flag, value in (("--source-table", self.source_table), ("--epochs", self.epochs),
                            ("--max-images", self.max_images), ("--seed", self.seed),
                            ("--score-tile", self.score_tile)):
            if value is not None:
                args += [flag, str(value)]
        return args + ([] if self.score else ["--no-score"])


def check_score_tile(tile: int | None) -> None:
    """Refuse a ``--score-tile`` the detector's tiling would refuse, before any training."""
    if tile is not None:
        from aegisbench.detectors.tiling import TilingParams

        with as_bad_input("--score-tile"):
            TilingParams(tile=tile)


def table_of(params, job: TrainJob) -> Path:
    """The canonical source table ``job`` trains on (refused when absent)."""
    table = Path(job.source_table) if job.source_table else Path(params.sources_dir) / f"{job.source}.parquet"
    if not table.is_file():
        have = sorted(p.stem for p in table.parent.glob("*.parquet")) if not job.source_table else []
        raise BadInput(f"source table not found (tables there: {', '.join(have) or 'none'}); run `aegisbench "
                       "sources`, or `aegisbench build --source-dir DIR --source NAME` for a local folder",
                       where=str(table))
    return table


def reference_params(params, job: TrainJob):
    """The job's :class:`ReferenceParams`: the source's recipe with the job's overrides."""
    from aegisbench.detectors.reference import ReferenceParams

    ref = ReferenceParams.from_dict(params.raw.get("reference_detector"), job.source)
    overrides = {k: v for k, v in (("epochs", job.epochs), ("max_images", job.max_images), ("seed", job.seed))
                 if v is not None}
    return dataclasses.replace(ref, **overrides) if overrides else ref


def train_one(params_path: str, job: TrainJob) -> dict:
    """Train ``job`` in this process; returns the training report."""
    from aegisbench.detectors.reference import train_reference
    from aegisbench.params import Params

    params = Params.load(params_path)
    ref = reference_params(params, job)
    track = next((s.track for s in params.sources if s.name == job.source), None)
    return train_reference(table_of(params, job), job.out, ref, score=job.score, track=track,
                           score_tile=job.score_tile)


def run_jobs(params_path: str, jobs: list[TrainJob], n_jobs: int, flags: list[str] = ()) -> dict:
    """Run ``jobs`` in child processes, ``n_jobs`` at a time; ``{source: summary}``.
    ``flags``: global options (-v, --no-progress, ...) the children get.

    Every job's table and recipe is checked first, so bad input stops the command
    before any training starts."""
    from aegisbench.params import Params

    check_int(n_jobs, "jobs", lo=1, error=BadInput, where="--jobs")
    params = Params.load(params_path)
    for job in jobs:
        table_of(params, job)
        reference_params(params, job)

    def run(job: TrainJob) -> tuple[TrainJob, subprocess.CompletedProcess]:
        cmd = [sys.executable, "-m", "aegisbench.cli", *flags, *job.argv(params_path)]
        log.info("training %s -> %s in its own process", job.source, job.out)
        return job, subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=dict(os.environ))

    with ThreadPoolExecutor(max_workers=min(n_jobs, len(jobs))) as pool:
        done = list(pool.map(run, jobs))
    failed = [f"{job.source} (exit {proc.returncode})" for job, proc in done if proc.returncode != 0]
    if failed:
        raise BadInput(f"training failed: {', '.join(failed)}; see its error above", where="train-reference")
    return {job.source: json.loads(proc.stdout.strip().splitlines()[-1]) for job, proc in done}
