"""The reference detectors with more training seeds (issue 36 item 3), scored exactly as their
rows, so the leaderboard can show per condition the metric across training seeds beside the
bootstrap interval of the row's own seed.

``params.yaml: reference.seeds`` (:class:`SeedParams`, 1 by default) counts the trainings:
``reference_detector.seed`` (the row's, trained by ``train-reference``) and the next
``seeds - 1``. ``aegisbench train-seeds`` (:func:`train_seeds`) trains those extra seeds with
the same recipe; ``aegisbench reference-seeds`` (:func:`reference_seeds`) detects each with the
arguments of the pipeline's own ``aegisbench detect`` line (dvc.yaml stage ``--detect-stage``,
only ``--weights``, ``--out`` and ``--name`` replaced) and evaluates it with those of the
``evaluate`` stage, so its numbers differ from the row's by the seed alone, then writes
``seeds.parquet`` (:mod:`aegisbench.leaderboard.seeds`: every seed's whole-condition rows, the
row's own read from its results folder) and ``seeds.json`` (seeds, clean recall of each). Two
stages, so a change of the evaluation reruns no training. Every folder is published whole.

>>> SeedParams.from_dict({"seeds": 3}).seeds, SeedParams.from_dict(None).seeds
(3, 1)
>>> interpolate("evaluate submissions/${item} --n ${evaluation.n_resamples}", {"evaluation": {"n_resamples": 9}}, "r")
'evaluate submissions/r --n 9'
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from aegisbench.errors import BadInput
from aegisbench.leaderboard.seeds import COLUMNS, SEEDS_FILE, check_seed_table
from aegisbench.schema import Declared, param

log = logging.getLogger(__name__)

WHERE = "params.yaml: reference"


@dataclass(frozen=True)
class SeedParams(Declared, where=WHERE):
    """The ``reference`` section of ``params.yaml``."""

    seeds: int = param(1, lo=1, hi=10, unit="seeds",
                       doc="training seeds per reference detector: reference_detector.seed and the next seeds - 1 "
                       "(each extra seed adds one training, detection and evaluation; docs/PERFORMANCE.md)")

    @classmethod
    def from_dict(cls, raw: dict | None) -> "SeedParams":
        return cls(**cls.mapping_of(raw))


def interpolate(text: str, params: dict, item: str | None = None) -> str:
    """``text`` with DVC's ``${a.b}`` taken from ``params`` and ``${item}`` from ``item``."""
    from aegisbench.pipeline.project import param_at

    def value(m: re.Match) -> str:
        key = m.group(1)
        return item if key == "item" and item is not None else str(param_at(params, key))
    return re.sub(r"\$\{([\w.]+)\}", value, text)


def stage_argv(dvc_yaml: dict, stage: str, command: str, params: dict, item: str | None = None) -> list[str]:
    """The arguments after ``aegisbench`` of the ``aegisbench <command>`` line of dvc.yaml's
    ``stage`` (a foreach stage's ``do``), interpolated. BadInput when there is none."""
    spec = (dvc_yaml.get("stages") or {}).get(stage)
    if not isinstance(spec, dict):
        raise BadInput(f"no stage {stage!r}", where="dvc.yaml")
    cmd = (spec.get("do") or {}).get("cmd") if "foreach" in spec else spec.get("cmd")
    for line in [cmd] if isinstance(cmd, str) else list(cmd or []):
        argv = shlex.split(interpolate(str(line), params, item))
        if argv[:2] == ["aegisbench", command]:
            return argv[1:]
    raise BadInput(f"stage {stage!r} has no `aegisbench {command}` line", where="dvc.yaml")


def replace_option(argv: list[str], flag: str, value: str | None) -> list[str]:
    """``argv`` with ``flag``'s value replaced (``value`` None: a switch ``flag`` removed);
    BadInput when a valued ``flag`` is not there."""
    out, i, found = [], 0, False
    while i < len(argv):
        if argv[i] == flag:
            found = True
            if value is not None:
                out += [flag, value]
                i += 1
        else:
            out.append(argv[i])
        i += 1
    if value is not None and not found:
        raise BadInput(f"the stage's command has no {flag}", where="dvc.yaml")
    return out


def seed_rows(metrics: str | Path, submission: str, seed: int, primary: bool) -> pl.DataFrame:
    """The whole-condition rows (no stratum) of a results folder's ``metrics.parquet`` as seed-table rows."""
    df = pl.read_parquet(metrics)
    if "stratum" in df.columns:
        df = df.filter(pl.col("stratum").is_null())
    df = df.with_columns(pl.lit(submission).alias("submission"), pl.lit(seed, pl.Int64).alias("seed"),
                         pl.lit(primary).alias("primary"))
    return df.select([pl.col(c).cast(t) for c, t in COLUMNS.items()])


def _aegisbench(argv: list[str], what: str) -> None:
    cmd = [sys.executable, "-m", "aegisbench.cli", *argv]
    log.info("%s: aegisbench %s", what, " ".join(argv[:2]))
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise BadInput(f"{what} failed (exit {done.returncode}); see its error above", where="reference-seeds")


MODELS_FILE = "seeds.json"


def planned_seeds(params, source: str) -> list[int]:
    """``reference_detector.seed`` of ``source``'s recipe and the next ``reference.seeds - 1``."""
    from aegisbench.detectors.reference import ReferenceParams

    n = SeedParams.from_dict(params.raw.get("reference")).seeds
    first = ReferenceParams.from_dict(params.raw.get("reference_detector"), source).seed
    return list(range(first, first + n))


def train_seeds(params_path: str, source: str, out: str | Path, jobs: int = 1) -> dict:
    """Train ``source``'s reference recipe with every planned seed but the row's own (trained by
    ``train-reference``) into ``out/seed_<s>/`` (weights.pt, train.json, one child process each,
    ``jobs`` at a time) and write ``out/seeds.json``; published whole. With ``reference.seeds: 1``
    the folder holds only seeds.json."""
    from aegisbench.detectors.train_jobs import TrainJob, run_jobs
    from aegisbench.params import Params
    from aegisbench.staging import staged_dir

    params = Params.load(params_path)
    seeds = planned_seeds(params, source)
    start = time.monotonic()
    with staged_dir(out) as work:
        jobs_ = [TrainJob(source, str(work / f"seed_{s}"), score=False, seed=s) for s in seeds[1:]]
        if jobs_:
            run_jobs(params_path, jobs_, jobs, ["--no-progress"])
        report = {"source": source, "primary": seeds[0], "seeds": seeds,
                  "trained": {f"{s}": f"seed_{s}" for s in seeds[1:]}}
        (work / MODELS_FILE).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return {**report, "seconds": round(time.monotonic() - start, 1)}  # not in the file: same bytes every run


@dataclass(frozen=True)
class SeedScoring:
    """The two command lines every extra seed is scored with (the row's, from dvc.yaml)."""

    submission: str
    detect: list[str]
    evaluate: list[str]

    def run(self, seed: int, weights: Path, scratch: Path) -> pl.DataFrame:
        """Detect and evaluate ``weights`` (seed ``seed``) under ``scratch``; its seed-table rows."""
        sub_id = f"{self.submission}_seed{seed}"
        sub, results = scratch / "submissions" / sub_id, scratch / "results"
        detect = replace_option(self.detect, "--weights", str(weights))
        detect = replace_option(replace_option(detect, "--out", str(sub)), "--name", sub_id)
        _aegisbench(replace_option(detect, "--verified", None), f"seed {seed}: detection")
        evaluate = [self.evaluate[0], str(sub), *replace_option(self.evaluate[2:], "--results", str(results))]
        _aegisbench(evaluate, f"seed {seed}: evaluation")
        return seed_rows(results / sub_id / "metrics.parquet", self.submission, seed, primary=False)


def reference_seeds(params_path: str, models: str | Path, submission: str, results: str | Path, out: str | Path,
                    detect_stage: str, evaluate_stage: str = "evaluate", dvc_yaml: str | Path = "dvc.yaml",
                    jobs: int = 1) -> dict:
    """Write ``out`` (see the module) for reference ``submission`` from the seed models of
    ``models`` (:func:`train_seeds`); its report (seeds, clean recall of each, seconds)."""
    from aegisbench.params import Params
    from aegisbench.readers import read_yaml
    from aegisbench.staging import staged_dir

    params = Params.load(params_path)
    trained = _trained(Path(models))
    primary_metrics = Path(results) / submission / "metrics.parquet"
    if not primary_metrics.is_file():
        raise BadInput("no results of the reference row (run its evaluate stage first)", where=str(primary_metrics))
    spec = read_yaml(dvc_yaml, "dvc.yaml")
    scoring = SeedScoring(submission, stage_argv(spec, detect_stage, "detect", params.raw),
                          stage_argv(spec, evaluate_stage, "evaluate", params.raw, submission))
    start = time.monotonic()
    with staged_dir(out) as work:
        tables = [seed_rows(primary_metrics, submission, trained["primary"], primary=True)]
        extra = [(int(s), Path(models) / d / "weights.pt") for s, d in sorted(trained["trained"].items(),
                                                                             key=lambda kv: int(kv[0]))]
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(extra)))) as pool:
            tables += list(pool.map(lambda sw: scoring.run(sw[0], sw[1], work / "scratch"), extra))
        long = check_seed_table(pl.concat(tables), submission, str(Path(out) / SEEDS_FILE))
        shutil.rmtree(work / "scratch", ignore_errors=True)
        long.sort(["seed", "source", "config", "metric"]).write_parquet(work / SEEDS_FILE, compression="zstd")
        clean = long.filter((pl.col("config") == "clean") & (pl.col("metric") == "recall"))
        report = {"submission": submission, "seeds": sorted(long["seed"].unique().to_list()),
                  "primary": trained["primary"],
                  "clean_recall": {f"{r['seed']}": r["value"] for r in clean.iter_rows(named=True)}}
        (work / "seeds.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return {**report, "seconds": round(time.monotonic() - start, 1)}  # not in the file: same bytes every run


def _trained(models: Path) -> dict:
    """The seeds.json :func:`train_seeds` wrote in ``models``, every listed model present."""
    path = models / MODELS_FILE
    try:
        info = json.loads(path.read_text())
        primary, trained = int(info["primary"]), dict(info["trained"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BadInput(f"not a seed-models folder of `aegisbench train-seeds` ({type(exc).__name__})",
                       where=str(path)) from None
    for s, d in trained.items():
        if d != f"seed_{s}":
            raise BadInput(f"seed {s}: folder {str(d)[:80]!r}, expected seed_{s}", where=str(path))
        if not (models / d / "weights.pt").is_file():
            raise BadInput(f"seed {s}: no weights.pt", where=str(models / str(d)))
    return {"primary": primary, "trained": trained}
