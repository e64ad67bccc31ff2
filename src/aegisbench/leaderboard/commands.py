"""CLI commands ``leaderboard`` and ``export`` (wired in via ``register(subparsers)``); ``publish``
(the dataset repo to the Hub) lives with the dataset repo, in :mod:`aegisbench.builders.commands`."""

from __future__ import annotations

import argparse
import logging
import sys

from aegisbench.cli import command
from aegisbench.cli_options import add_dataset_option, add_out_option, add_results_option
from aegisbench.overlap import declare_io
from aegisbench.paths import LEADERBOARD

log = logging.getLogger("aegisbench")


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "leaderboard", "build leaderboard/ (Parquet, Markdown, static site) from results/",
                "Merge every current results/<id>/ into leaderboard/: long-format Parquet, README.md and a "
                "static site, per condition with intervals (never one averaged score). Optionally also write "
                "the per-condition metrics for `dvc metrics show` and the severity curves for `dvc plots show`. "
                "Before it replaces a published leaderboard it writes <out>/CHANGES.md: identical, or every cell "
                "whose value or interval changed with both intervals (a warning says how many, and how many left "
                "their old interval). --compare OLD [NEW] compares two built leaderboards the same way and builds "
                "nothing.",
                ["aegisbench leaderboard", "aegisbench leaderboard --reference reference_sar --strict",
                 "aegisbench leaderboard --metrics metrics/leaderboard.json --plots plots/severity",
                 "aegisbench leaderboard --compare committed/leaderboard.parquet   # against ./leaderboard"])
    add_results_option(p, "the results folder: reads <results>/<id>/")
    add_dataset_option(p, "dataset repo whose manifest digest results must match")
    add_out_option(p, "output folder", default=LEADERBOARD)
    p.add_argument("--evaluator-version", default=None,
                   help="current evaluator version (default: the installed evaluator's)")
    p.add_argument("--reference", action="append", default=[], metavar="ID",
                   help="submission id of a reference detector (trained in the pipeline from its YAML): its "
                        "rows come first and are marked in every table (repeatable; an id with no merged "
                        "results is a warning)")
    p.add_argument("--metrics", default=None, metavar="FILE",
                   help="also write FILE (.json) for `dvc metrics show`: a compact summary per submission, source "
                        "and primary metric (clean, floor and where, worst per family); the full table stays in "
                        "leaderboard.parquet")
    p.add_argument("--plots", default=None, metavar="DIR",
                   help="also rebuild DIR with severity curves for `dvc plots show`: one titled SVG image per "
                        "track, source and corruption (metric-named y axis, S-Level axis for fire spread)")
    p.add_argument("--preview", default=None, metavar="DIR",
                   help="the preview stage's folder (data/preview): its corruption grids become the page's "
                        "condition gallery, one thumbnail per condition of the same frame (default: no gallery)")
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="the calibrate stage's report (calibration/report.json): the gallery shows each ladder's "
                        "measured values, the frames they were measured on and both verdicts (monotone, on target)")
    p.add_argument("--seeds", default=None, metavar="DIR",
                   help="the references' training-seed tables (DIR/<submission>/seeds.parquet, written by "
                        "`aegisbench reference-seeds`): each reference row says how many seeds it has and, with "
                        "two or more, its metric across seeds beside the interval")
    p.add_argument("--submissions", action="append", default=[], metavar="DIR",
                   help="a folder of submission folders, as stored (repeatable): results whose files are not "
                        "those of DIR/<id> are skipped, so a folder named like another submission cannot stand for it")
    p.add_argument("--private", default=None, metavar="DIR",
                   help="the project whose private/ holds its attestations (default: the current folder, or "
                        "AEGISBENCH_PRIVATE): a row is verified only when its run was attested there")
    p.add_argument("--strict", action="store_true",
                   help="exit 2 if any results folder was skipped or a --reference has no merged results")
    p.add_argument("--compare", nargs="+", default=None, metavar=("OLD", "NEW"),
                   help="build nothing; print, as CHANGES.md words it, the cells of leaderboard NEW "
                        "(default: --out) that differ from OLD's, each with both values and intervals (each a "
                        "leaderboard folder or its leaderboard.parquet; compared only on one benchmark_version and "
                        "dataset digest)")
    declare_io(p, reads={"results": "--results", "dataset": "--dataset", "preview": "--preview",
                         "submissions": "--submissions", "calibration": "--calibration", "seeds": "--seeds"},  # --private: its private/ (build_leaderboard)
               writes={"out": "--out", "metrics": "--metrics", "plots": "--plots"})  # --compare: reads, writes nothing
    p.set_defaults(func=cmd_leaderboard)
    register_export(sub)


#: the options that only building reads: refused beside --compare, which builds nothing
BUILD_ONLY = ("evaluator_version", "reference", "metrics", "plots", "preview", "calibration", "submissions",
              "private", "strict")


def cmd_compare(args) -> int:
    """``--compare OLD [NEW]``: the changed cells of NEW (default ``--out``) against OLD, on stdout."""
    from aegisbench.errors import BadInput
    from aegisbench.leaderboard.changes import changed_cells, read_table
    from aegisbench.leaderboard.changes_md import render_changes
    from aegisbench.leaderboard.markdown import md_code

    if len(args.compare) > 2:
        raise BadInput(f"takes OLD and at most one NEW leaderboard, got {len(args.compare)} paths", where="--compare")
    given = [name for name in BUILD_ONLY if getattr(args, name)]
    if given:
        raise BadInput(f"builds nothing: --{given[0].replace('_', '-')} has no use beside it", where="--compare")
    old, new = args.compare[0], args.compare[1] if len(args.compare) == 2 else args.out
    new_flag = "--compare" if len(args.compare) == 2 else "--out"  # NEW: the folder --out names by default
    changes = changed_cells(read_table(old, f"--compare {old}"), read_table(new, f"{new_flag} {new}"))
    sys.stdout.write(render_changes(changes, against=md_code(old), title=f"# Changes of {md_code(new)} against "
                                    f"{md_code(old)}", about="Every cell (submission, source, condition, metric) "
                                    "whose value, 95% interval or note differs, compared exactly."))
    log.info("compare: %d of %d cells changed, %d outside their old interval; %d added, %d removed%s",
             changes.changed, changes.compared, changes.outside, changes.added, changes.removed,
             f" (not compared: {changes.not_comparable})" if changes.not_comparable else "")
    return 0


def cmd_leaderboard(args) -> int:
    from aegisbench.leaderboard.build import build_leaderboard

    if args.compare is not None:
        return cmd_compare(args)
    report = build_leaderboard(args.results, args.dataset, args.out, evaluator_version=args.evaluator_version,
                               references=args.reference, metrics=args.metrics, plots=args.plots,
                               preview=args.preview, submissions=args.submissions, private=args.private,
                               calibration=args.calibration, changes=True, seeds=args.seeds)
    for s in report.skipped:
        print(f"skipped {s.folder} ({s.problem}): {s.reason}", file=sys.stderr)
    # --reference ids with no merged results are logged as warnings (stderr) by build_leaderboard;
    # under --strict each is also an error line (a reference missing from the board fails the stage)
    if args.strict:
        for ref in report.missing_references:
            print(f"missing reference {ref}: no merged results/{ref}", file=sys.stderr)
    print(f"leaderboard {report.out}: {len(report.merged)} results merged, {len(report.skipped)} skipped; "
          f"open {report.out}/site/index.html")
    if report.metrics is not None:
        print(f"metrics {report.metrics} (dvc metrics show)")
    if args.plots is not None:
        svg = sum(name.endswith(".svg") for name in report.plots)
        print(f"severity curves {args.plots}: {svg} SVG image(s) and {len(report.plots) - svg} JSON data file(s) "
              "(dvc plots show, dvc plots diff)")
    return 2 if args.strict and (report.skipped or report.missing_references) else 0


def _out(value: str) -> str | None:
    """``--out``: a file, or None for ``-`` (standard output)."""
    return None if value == "-" else value


def register_export(sub: argparse._SubParsersAction) -> None:
    from aegisbench.leaderboard.export_table import COLUMNS, FORMATS

    p = command(sub, "export", "write the per-condition table with intervals as CSV, LaTeX or JSON, for a paper",
                "One row per model, source, condition and metric with its value and 95% interval [lo, hi], from "
                "the built leaderboard (or from results folders): never one averaged number; a value that is "
                f"not defined is empty (null) with its reason in 'note'. CSV and JSON columns: {', '.join(COLUMNS)}. "
                "LaTeX: one booktabs table per track, source and metric (conditions as rows, models as columns; "
                "without --metric the primary metrics: recall, F2R F1 and F2S Brier). Cite the benchmark and "
                "its sources with leaderboard/CITATION.bib (written by `aegisbench leaderboard`).",
                ["aegisbench export --format csv --out paper/aegisbench.csv",
                 "aegisbench export --format latex --model reference_sar --source synthetic_sar --out paper/table.tex",
                 "aegisbench export --format json --metric recall --metric map50   # to standard output",
                 "aegisbench export --results results --model my_yolo   # your own results, not yet merged"])
    p.add_argument("--format", choices=FORMATS, default="csv", help="what to write")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--leaderboard", default=None, metavar="PATH",
                     help="the leaderboard folder (or its leaderboard.parquet) to export (default: leaderboard)")
    add_results_option(src, "export the results folder instead (one <id>/ per submission, all scored on one "
                       "dataset by one evaluator version; --model picks submissions)", default=None)
    p.add_argument("--model", action="append", default=[], metavar="NAME",
                   help="only this model (its name or submission id; repeatable)")
    p.add_argument("--source", action="append", default=[], metavar="NAME", help="only this source (repeatable)")
    p.add_argument("--metric", action="append", default=[], metavar="NAME",
                   help="only this metric (a registered name such as recall; repeatable)")
    add_out_option(p, "file to write (atomically; nothing is written on an error), - for standard output",
                   type=_out, default="-", metavar="FILE")
    p.add_argument("--private", default=None, metavar="DIR",
                   help="with --results: the project whose private/ attests its runs (verified rows; default: "
                        "the current folder, or AEGISBENCH_PRIVATE)")
    declare_io(p, reads={"leaderboard": "--leaderboard", "results": "--results"}, writes={"out": "--out"})
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from aegisbench.leaderboard.export_table import export_table, write_export

    leaderboard = args.leaderboard if args.results is not None or args.leaderboard else "leaderboard"
    text, n = export_table(args.format, leaderboard=leaderboard if args.results is None else None,
                           results=args.results, models=args.model, sources=args.source, metrics=args.metric,
                           private=args.private)
    if args.out is None:
        sys.stdout.write(text)
        log.info("export: %d rows (%s) to standard output", n, args.format)
    else:
        write_export(text, args.out, leaderboard=leaderboard, results=args.results)
        print(f"export {args.out}: {n} rows ({args.format})")
    return 0
