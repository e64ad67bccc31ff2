"""CLI of the evaluator: ``validate``, ``evaluate`` and ``export-coco``.

``validate`` and ``evaluate`` print every problem of an invalid submission on its own
line (``file:row N field F: message``, at most 50, then a count of the rest) to
stderr and exit 2; nothing is written to ``results/`` then.

>>> parse_grid("seed001")[:3]
(0.01, 0.02, 0.03)
>>> parse_grid("0.1, 0.2"), parse_grid("scores")
((0.1, 0.2), None)
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

MAX_LISTED = 50


def parse_grid(text: str) -> tuple[float, ...] | None:
    """``scores`` (every distinct val score), ``seed001`` (0.01..0.20) or ``a,b,c``."""
    from aegisbench.evaluation.threshold import seed_001_grid
    t = text.strip().lower()
    if t == "scores":
        return None
    if t == "seed001":
        return tuple(float(v) for v in seed_001_grid())
    try:
        return tuple(float(v) for v in t.split(",") if v.strip())
    except ValueError:
        raise BadInput(f"expected 'scores', 'seed001' or comma-separated numbers, got {text!r}",
                       where="--threshold-grid") from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission", help="submission folder (submission.yaml + predictions)")
    p.add_argument("--dataset", default="data/aegisbench", help="dataset repo (default data/aegisbench)")
    p.add_argument("--no-verify", action="store_true", help="do not re-hash the dataset repo against its manifest")
    p.add_argument("--max-dets-per-image", type=int, default=1000, help="declared cap of detections per image")
    p.add_argument("--max-file-bytes", type=int, default=2 * 1024**3, help="declared size limit of one file")
    p.add_argument("--frame-tolerance", type=float, default=2.0,
                   help="pixels a box may extend beyond the frame (default 2)")
    p.add_argument("--warp-grid", type=int, default=25, help="WARP cloud-patch grid side (default 25)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a submission folder (every problem listed) before scoring")
    _common(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("evaluate", help="validate, freeze thresholds on clean validation, score every condition "
                                        "and write results/<id>/")
    _common(p)
    p.add_argument("--results", default="results", help="results folder (default results)")
    p.add_argument("--threshold-grid", default="scores",
                   help="threshold candidates: 'scores' (every distinct val score, default), 'seed001' "
                        "(0.01..0.20) or comma-separated values")
    p.add_argument("--max-dets", type=int, default=None,
                   help="per-image cap for mAP (default: none, every prediction counts)")
    p.add_argument("--n-resamples", type=int, default=1000, help="bootstrap resamples over images (default 1000)")
    p.add_argument("--executor", help="local (default) or ray: where the sources of the track are scored "
                   "(each source is independent)")
    p.add_argument("--workers", type=int, help="local worker processes (default 1: this process)")
    p.add_argument("--ray-address", help="Ray cluster to join: auto or HOST:PORT (default: start a local Ray)")
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("export-coco", help="write COCO GT JSON per config and per config/split (integer ids "
                                           "for COCO results submissions)")
    p.add_argument("--dataset", default="data/aegisbench")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-verify", action="store_true")
    p.set_defaults(func=cmd_export_coco)


def _limits(args):
    from aegisbench.evaluation.submission import ValidationLimits
    try:
        return ValidationLimits(max_file_bytes=args.max_file_bytes, max_dets_per_image=args.max_dets_per_image,
                                frame_tolerance_px=args.frame_tolerance)
    except ValueError as exc:
        raise BadInput(str(exc), where="command line") from None


def _print_problems(exc) -> int:
    for line in exc.lines(MAX_LISTED):
        print(line, file=sys.stderr)
    print(f"invalid submission: {exc.total} problem(s)", file=sys.stderr)
    return 2


def cmd_validate(args) -> int:
    from aegisbench.evaluation.dataset import DatasetIndex
    from aegisbench.evaluation.submission import SubmissionInvalid, validate_submission
    index = DatasetIndex(args.dataset, verify=not args.no_verify)
    try:
        sub = validate_submission(args.submission, index, _limits(args), args.warp_grid)
    except SubmissionInvalid as exc:
        return _print_problems(exc)
    if sub.form == "firespread":
        from aegisbench.firespread.evaluate import validate_submission as validate_firespread
        validate_firespread(sub.folder, index.repo)
    extra = "" if sub.warp_patch is None else f", WARP patch test on {len(sub.warp_patch.entries)} images"
    print(f"{sub.id}: OK (track {sub.meta.track}, {sub.form} form, {sub.predictions.n_boxes()} boxes on "
          f"{len(sub.predictions)} images{extra})")
    return 0


def cmd_evaluate(args) -> int:
    from aegisbench.evaluation.bootstrap import BootstrapParams
    from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
    from aegisbench.evaluation.submission import SubmissionInvalid
    try:
        params = EvaluationParams(threshold_grid=parse_grid(args.threshold_grid), max_dets=args.max_dets,
                                  bootstrap=BootstrapParams(n_resamples=args.n_resamples), limits=_limits(args),
                                  warp_grid=args.warp_grid)
    except (TypeError, ValueError) as exc:
        raise BadInput(str(exc), where="command line") from None
    from aegisbench.executor import Executor, connect
    executor = Executor.from_cli(args.executor, args.workers, args.ray_address)
    connect(executor)
    dataset = Path(args.dataset).absolute() if executor.kind == "ray" else args.dataset  # read on other nodes
    try:
        out = evaluate_submission(args.submission, dataset, args.results, params,
                                  verify=not args.no_verify, progress=True, executor=executor)
    except SubmissionInvalid as exc:
        return _print_problems(exc)
    prov = json.loads((out / "provenance.json").read_text())
    thr = prov.get("frozen_threshold")
    thr_text = ", ".join(f"{k}={v:g}" for k, v in thr.items()) if isinstance(thr, dict) else str(thr)
    print(f"wrote {out} (frozen thresholds: {thr_text}; "
          f"{len(prov.get('degenerate_intervals', []))} degenerate interval(s))")
    return 0


def cmd_export_coco(args) -> int:
    from aegisbench.evaluation.dataset import DatasetIndex, export_coco
    written = export_coco(DatasetIndex(args.dataset, verify=not args.no_verify), args.out)
    print(f"wrote {len(written)} COCO GT files to {args.out}")
    return 0


def evaluate_firespread(sub, index, results, params) -> Path:
    """Score a fire-spread submission with :mod:`aegisbench.firespread.evaluate` into a
    staging folder, add ``provenance.json``, and swap it into ``results/<id>/``."""
    from aegisbench.atomic import replace_dir
    from aegisbench.evaluation.evaluator import EVALUATOR_VERSION
    from aegisbench.firespread.evaluate import score_submission
    root = Path(results)
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{sub.id}.staging-", dir=root))
    try:
        score_submission(sub.folder, index.repo, staging, n_boot=params.bootstrap.n_resamples)
        m = sub.meta
        prov = {"submission": sub.id, "name": m.name, "team": m.team, "model": m.model, "track": m.track,
                "contact": m.contact, "license": m.license, "dataset_version": index.version,
                "dataset_digest": index.digest, "evaluator_version": EVALUATOR_VERSION,
                "params_sha256": params.digest(), "frozen_threshold": None,
                "bootstrap": {"n_resamples": params.bootstrap.n_resamples, "unit": "initial condition"},
                "submission_files": sub.files}
        (staging / "provenance.json").write_text(json.dumps(prov, indent=1, sort_keys=True) + "\n")
        staging.chmod(0o755)
        replace_dir(staging, root / sub.id)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root / sub.id
