"""CLI of the evaluator: ``validate``, ``evaluate`` and ``export-coco``.

``validate`` and ``evaluate`` serve every track (the track is read from
``submission.yaml``); the threshold options apply to the detection tracks, whose
threshold the evaluator freezes (the fire-spread F2R threshold is declared by the dataset).

``validate`` and ``evaluate`` print every problem of an invalid submission on its own
line (``file:row N field F: message``, at most 50, then a count of the rest) to
stderr and exit 2; nothing is written to ``results/`` then.

>>> parse_grid("seed001"), parse_grid("0.1, 0.2"), parse_grid("scores")
('seed001', (0.1, 0.2), 'scores')
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from aegisbench.cli import command
from aegisbench.cli_options import (add_dataset_option, add_executor_options, add_no_verify_option, add_out_option,
                                     add_results_option)
from aegisbench.fields import deprecated_alias, did_you_mean
from aegisbench.overlap import declare_io
from aegisbench.errors import BadInput, as_bad_input
from aegisbench.evaluation.bootstrap import BootstrapParams
from aegisbench.evaluation.submission import ValidationLimits
from aegisbench.vocab import WARP_GRID

log = logging.getLogger(__name__)

MAX_LISTED = 50


def parse_grid(text: str | None) -> tuple[float, ...] | str | None:
    """None (the track's rule), a rule name (``scores``: every distinct val score, ``seed001``:
    0.01..0.20) or ``a,b,c`` (values in [0, 1]; :class:`BadInput` naming ``--threshold-grid`` otherwise)."""
    from aegisbench.evaluation.threshold import RULES, check_grid
    if text is None:
        return None
    t = text.strip().lower()
    if t in RULES:
        return t
    try:
        values = [float(v) for v in t.split(",") if v.strip()]
    except ValueError:
        raise BadInput(f"expected {' or '.join(repr(r) for r in RULES)} or comma-separated numbers in [0, 1], "
                       f"got {text!r}{did_you_mean(t, RULES)}", where="--threshold-grid") from None
    return check_grid(values, where="--threshold-grid")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission", help="submission folder (submission.yaml + predictions)")
    add_dataset_option(p)
    add_no_verify_option(p)
    d = ValidationLimits()
    p.add_argument("--max-dets-per-image", type=int, default=d.max_dets_per_image,
                   help="declared cap of detections per image")
    p.add_argument("--max-file-bytes", type=int, default=d.max_file_bytes,
                   help="declared size limit of one file in bytes")
    p.add_argument("--frame-tolerance", type=float, default=d.frame_tolerance_px,
                   help="pixels a box may extend beyond the frame")
    p.add_argument("--warp-grid", type=int, default=WARP_GRID, help="WARP cloud-patch grid side")


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "validate", "check a submission folder (every problem listed) before scoring",
                "Any track (read from submission.yaml). Every problem is one line `file:row N field F: "
                "message` on stderr (at most 50, then a count), exit 2; nothing is written.",
                ["aegisbench validate submissions/my_yolo",
                 "aegisbench validate submissions/my_yolo --dataset runs/fast/aegisbench"])
    _common(p)
    p.set_defaults(func=cmd_validate)

    p = command(sub, "evaluate", "validate, freeze thresholds on clean validation, score every condition "
                "and write results/<id>/",
                "Detection tracks: the operating threshold is frozen at maximum F1 on the clean <source>_val "
                "predictions (over every score on sar, over seed 001's grid 0.01..0.20 on smoke, unless "
                "--threshold-grid says otherwise) and applied unchanged to every condition; recall, precision, F1 "
                "and mAP get bootstrap intervals. Fire spread: scored per S-Level with the threshold the dataset declares.",
                ["aegisbench evaluate submissions/my_yolo",
                 "aegisbench evaluate submissions/my_yolo --results results --n-resamples 200 --stratify time",
                 "aegisbench evaluate submissions/my_yolo --executor ray --ray-address auto"])
    _common(p)
    add_results_option(p, "the results folder: writes <results>/<submission id>/")
    deprecated_alias(p, "--out", "--results")
    from aegisbench.evaluation.threshold import TRACK_RULE
    p.add_argument("--threshold-grid", metavar="{scores,seed001,V1,V2,...}",
                   help="threshold candidates: 'scores' (every distinct val score), 'seed001' (seed 001's grid "
                        "0.01..0.20) or comma-separated values in [0, 1] (default: the track's rule, "
                        + ", ".join(f"{k} {v}" for k, v in TRACK_RULE.items()) + ")")
    p.add_argument("--max-dets", type=int, default=None,
                   help="per-image cap for mAP (default: none, every prediction counts)")
    p.add_argument("--n-resamples", type=int, default=BootstrapParams().n_resamples,
                   help="bootstrap resamples (images; initial conditions for fire spread)")
    p.add_argument("--stratify", action="append", default=[], metavar="COLUMN",
                   help="also report every detection metric per value of this per-image meta column (e.g. time "
                        "from --meta-pattern), with its own interval; repeatable")
    p.add_argument("--labels", metavar="DIR",
                   help="the private label repo of a dataset whose test labels are withheld (default: "
                        "private/labels when it exists)")
    add_executor_options(p, "local (default) or ray: where the sources of the track are scored (each source is "
                         "independent)", "local worker processes (default 1: this process)")
    declare_io(p, reads={"submission": "submission", "dataset": "--dataset", "labels": "--labels"},
               writes={"results": "--results"})
    p.set_defaults(func=cmd_evaluate)

    _register_import_published(sub)

    p = command(sub, "export-coco", "write COCO GT JSON per config and per config/split",
                "Integer image and category ids for COCO-format results submissions; the dataset is "
                "re-hashed first unless --no-verify.",
                ["aegisbench export-coco --out coco_gt",
                 "aegisbench export-coco --dataset runs/fast/aegisbench --out /tmp/coco --no-verify"])
    add_dataset_option(p)
    add_out_option(p, "output folder", required=True)
    add_no_verify_option(p)
    declare_io(p, reads={"dataset": "--dataset"}, writes={"out": "--out"}, into=["out"])  # <config>.json files
    p.set_defaults(func=cmd_export_coco)


def _register_import_published(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "import-published", "add numbers a paper published as published rows (never ranked against "
                "rows scored here)",
                "Writes results/<id>/ from a table: the long layout (source, config, metric, value, lo, hi, n) or "
                "the reference release's condition table (--layout release: one folder per model, <id>_<model>). "
                "Metrics must be registered for the track and within their bounds; the whole table is checked "
                "before anything is written.",
                ["aegisbench import-published benchmark_168_conditions.csv --layout release --id release2026 "
                 "--track sar --team 'Altis-2026' --name 'reference release' --protocol 'frozen threshold on "
                 "clean val, 1000-resample bootstrap' --source-url https://github.com/Altis-2026/AegisBench "
                 "--citation 'Altis et al. 2026'"])
    p.add_argument("table", help="CSV or Parquet table")
    p.add_argument("--layout", choices=("long", "release"), default="long", help="table layout")
    p.add_argument("--id", required=True, help="results folder name (the release layout appends _<model>)")
    p.add_argument("--track", required=True, metavar="{sar,smoke,firespread}", help="sar, smoke or firespread")
    p.add_argument("--name", required=True, help="name of the publication's rows")
    p.add_argument("--team", required=True, help="who published the numbers")
    p.add_argument("--model", help="the model (long layout; the release layout names it per row)")
    p.add_argument("--protocol", required=True, help="how the numbers were measured, in words (shown beside them)")
    p.add_argument("--source-url", required=True, help="http(s) URL of the publication or its data")
    p.add_argument("--citation", required=True, help="how to cite it")
    p.add_argument("--date", help="date of the publication, YYYY-MM-DD")
    add_results_option(p, "the results folder: writes <results>/<id>/")
    deprecated_alias(p, "--out", "--results")
    declare_io(p, reads={"table": "table"}, writes={"results": "--results"})
    p.set_defaults(func=cmd_import_published)


def _limits(args):
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
    from aegisbench.dataset.index import DatasetIndex
    from aegisbench.evaluation.submission import SubmissionInvalid, validate_submission
    index = DatasetIndex(args.dataset, verify=not args.no_verify)
    try:
        sub = validate_submission(args.submission, index, _limits(args), args.warp_grid)
    except SubmissionInvalid as exc:
        return _print_problems(exc)
    from aegisbench.evaluation.tracks import get_track
    print(get_track(sub.meta.track).summary(sub))
    return 0


def cmd_evaluate(args) -> int:
    from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission
    from aegisbench.evaluation.submission import SubmissionInvalid
    grid = parse_grid(args.threshold_grid)  # BadInput naming --threshold-grid
    with as_bad_input("command line"):
        params = EvaluationParams(threshold_grid=grid, max_dets=args.max_dets,
                                  bootstrap=BootstrapParams(n_resamples=args.n_resamples), limits=_limits(args),
                                  warp_grid=args.warp_grid, stratify=tuple(args.stratify))
    from aegisbench.executor import Executor, connect
    executor = Executor.from_cli(args.executor, args.workers, args.ray_address)
    connect(executor, (args.submission, args.dataset))
    dataset = Path(args.dataset).absolute() if executor.kind == "ray" else args.dataset  # read on other nodes
    try:
        out = evaluate_submission(args.submission, dataset, args.results, params, verify=not args.no_verify,
                                  progress=True, executor=executor, labels=args.labels or default_labels())
    except SubmissionInvalid as exc:
        return _print_problems(exc)
    prov = json.loads((out / "provenance.json").read_text())
    print(f"wrote {out} ({threshold_summary(prov)}; "
          f"{len(prov.get('degenerate_intervals', []))} degenerate interval(s))")
    return 0


def default_labels():
    """``private/labels`` (of the current project, or under ``AEGISBENCH_PRIVATE``) when it exists."""
    from aegisbench.private import private_dir
    path = private_dir() / "labels"
    return path if path.is_dir() else None


def threshold_summary(prov: dict) -> str:
    """What the evaluator froze, in words, from a results provenance.

    >>> threshold_summary({"frozen_threshold": {"synthetic_sar": 0.25}})
    'threshold frozen on clean val: synthetic_sar=0.25'
    >>> threshold_summary({"frozen_threshold": None, "f2r_threshold": {"value": 0.5}})
    'F2R threshold 0.5, declared by the dataset (fire spread freezes none)'
    >>> threshold_summary({"frozen_threshold": {}})
    'no threshold frozen: no source was scored'
    """
    thr = prov.get("frozen_threshold")
    if isinstance(thr, dict) and thr:
        return "threshold frozen on clean val: " + ", ".join(
            f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}=none" for k, v in sorted(thr.items()))
    if isinstance(thr, dict):
        return "no threshold frozen: no source was scored"
    declared = (prov.get("f2r_threshold") or {}).get("value")
    if declared is not None:
        return f"F2R threshold {declared:g}, declared by the dataset (fire spread freezes none)"
    return "no threshold frozen (this track scores without one)"


def cmd_import_published(args) -> int:
    from aegisbench.evaluation.published import Publication, import_published
    pub = Publication(name=args.name, team=args.team, track=args.track, protocol=args.protocol,
                      source_url=args.source_url, citation=args.citation, date=args.date)
    for folder in import_published(args.table, args.layout, args.id, pub, args.results, model=args.model):
        print(f"wrote {folder} (published rows)")
    return 0


def cmd_export_coco(args) -> int:
    from aegisbench.dataset.index import DatasetIndex, export_coco
    written = export_coco(DatasetIndex(args.dataset, verify=not args.no_verify), args.out)
    print(f"wrote {len(written)} COCO GT files to {args.out}")
    return 0
