"""The evaluator: one entry point for every track.

``evaluate_submission`` validates a submission folder (shared ``submission.yaml``
checks, then its track's ``read``), scores it with its track's ``score`` and writes
``results/<id>/`` with the shared writer. Tracks are plug-ins
(:mod:`aegisbench.evaluation.tracks`): the detection tracks in
:mod:`aegisbench.evaluation.detection`, fire-spread in :mod:`aegisbench.evaluation.firespread_track`.

>>> EvaluationParams(threshold_grid=(0.01, 0.02)).threshold_grid, EvaluationParams().threshold_grid
((0.01, 0.02), None)
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from aegisbench.overlap import refuse_overlap
from aegisbench.atomic import clean_leftovers, output_lock
from aegisbench.errors import BadInput
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.matching import IOU_THRESHOLD
from aegisbench.evaluation.results import Evaluation, write_results
from aegisbench.evaluation.submission import ValidatedSubmission, ValidationLimits, validate_submission
from aegisbench.evaluation.tracks import get_track
from aegisbench.executor import Executor
from aegisbench.evaluation.threshold import check_grid, rule_grid
from aegisbench.hashing import json_sha256
from aegisbench.paths import DATASET, RESULTS
from aegisbench.schema import Declared, param
from aegisbench.metrics import SilentFailureParams
from aegisbench.vocab import WARP_GRID

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationParams(Declared):
    """Evaluator settings; all of them are recorded (and hashed) in the provenance."""

    threshold_grid: tuple[float, ...] | str | None = param(
        None, doc="threshold candidates: None = the track's rule (threshold.TRACK_RULE), a rule name "
                  "(threshold.RULES) or a tuple of values in [0, 1]")
    max_dets: int | None = param(None, type=int, lo=1, unit="detections per image",
                                 doc="per-image cap for mAP; None = never truncate")
    bootstrap: BootstrapParams = param(BootstrapParams(), doc="bootstrap confidence intervals")
    silent: SilentFailureParams = param(SilentFailureParams(), doc="silent-failure metric")
    limits: ValidationLimits = param(ValidationLimits(), doc="submission validation limits")
    warp_grid: int = param(WARP_GRID, lo=1, unit="cells per side", doc="WARP patch-test grid side")
    stratify: tuple[str, ...] = param((), doc="meta columns reported per stratum (detection tracks)")

    def cross_check(self) -> None:
        if not isinstance(self.stratify, tuple) or not all(isinstance(c, str) and c for c in self.stratify):
            raise TypeError("stratify must be a tuple of meta column names")
        if len(set(self.stratify)) != len(self.stratify):
            raise ValueError(f"stratify names a column twice: {list(self.stratify)}")
        g = self.threshold_grid
        if isinstance(g, str):
            rule_grid(g)  # a known rule name
        elif g is not None:
            if not isinstance(g, tuple):
                raise TypeError("threshold_grid must be None, a rule name or a tuple of floats")
            check_grid(g, "threshold_grid")

    def as_dict(self) -> dict:
        d = asdict(self)
        g = self.threshold_grid
        d["threshold_grid"] = list(g) if isinstance(g, tuple) else g
        d["bootstrap"]["percentiles"] = list(self.bootstrap.percentiles)
        d["iou_threshold"] = IOU_THRESHOLD
        if self.stratify:  # absent when not stratified: the digest of older settings stays
            d["stratify"] = list(self.stratify)
        else:
            d.pop("stratify")
        return d

    def digest(self) -> str:
        return json_sha256(self.as_dict())


def evaluate(sub: ValidatedSubmission, index: DatasetIndex, params: EvaluationParams = EvaluationParams(),
             progress: bool = False, executor: Executor | None = None) -> Evaluation:
    """Score a validated submission with its track (in memory; nothing written)."""
    track = get_track(sub.meta.track)
    index.require_labels(track.name)
    if params.stratify and track.kind != "detection":
        raise BadInput(f"strata are reported for the detection tracks only, not {track.name}", where="--stratify")
    return track.score(sub, index, params, executor, progress)


def evaluate_submission(submission: str | Path, dataset: str | Path = DATASET,
                        results: str | Path = RESULTS, params: EvaluationParams = EvaluationParams(), *,
                        verify: bool = True, progress: bool = False, executor: Executor | None = None,
                        labels: str | Path | None = None) -> Path:
    """Validate (raising :class:`~aegisbench.evaluation.submission.SubmissionInvalid` with
    every problem, nothing written), score (sources on ``executor``) and write
    ``results/<id>/``; returns the folder (``labels``: the private label repo of a dataset whose
    test labels are withheld). Scoring and writing hold the lock of
    ``results/<id>`` (a second evaluation of the id is refused, naming this PID); the old
    results stay in place, whole, until the new ones are complete."""
    refuse_overlap({"--out": results}, {"submission": submission, "--dataset": dataset, "--labels": labels})
    index = DatasetIndex(dataset, verify=verify, labels=labels)
    sub = validate_submission(submission, index, params.limits, params.warp_grid)
    with output_lock(Path(results) / sub.id):
        clean_leftovers(Path(results) / sub.id)
        check_identity(sub, results)
        return write_results(evaluate(sub, index, params, progress=progress, executor=executor), results)


def check_identity(sub: ValidatedSubmission, results: str | Path) -> None:
    """Results are bound to the content of their submission: ``results/<id>/`` made from other
    files may be replaced only from the project's stored submission of that id
    (``results/../submissions/<id>``, whose content changed). A folder elsewhere that takes
    another submission's name is refused; nothing is written."""
    import json
    prov_path = Path(results) / sub.id / "provenance.json"
    try:
        prov = json.loads(prov_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # no earlier results (or unreadable ones, which the leaderboard skips anyway)
    if not isinstance(prov, dict) or prov.get("submission_files") == sub.files:
        return
    stored = Path(results).absolute().parent / "submissions" / sub.id
    if stored.resolve() == sub.folder.resolve():
        return
    raise BadInput(f"{prov_path.parent} holds the results of other files of a submission named {sub.id!r}; only "
                   f"{stored} may replace them. Give this submission its own name (rename its folder), or remove "
                   f"{prov_path.parent} first if you mean to discard those results", where=str(sub.folder))


__all__ = ["EvaluationParams", "evaluate", "evaluate_submission"]
