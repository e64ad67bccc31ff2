"""CLI command ``leaderboard`` (wired in via ``register(subparsers)``); ``publish`` (the dataset
repo to the Hub) lives with the dataset repo, in :mod:`aegisbench.builders.commands`."""

from __future__ import annotations

import argparse
import sys

from aegisbench.cli import command
from aegisbench.overlap import declare_io


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "leaderboard", "build leaderboard/ (Parquet, Markdown, static site) from results/",
                "Merge every current results/<id>/ into leaderboard/: long-format Parquet, README.md and a "
                "static site, per condition with intervals (never one averaged score). Optionally also write "
                "the per-condition metrics for `dvc metrics show` and the severity curves for `dvc plots show`.",
                ["aegisbench leaderboard", "aegisbench leaderboard --reference reference_sar --strict",
                 "aegisbench leaderboard --metrics metrics/leaderboard.json --plots plots/severity"])
    p.add_argument("--results", default="results", help="folder of results/<id>/")
    p.add_argument("--dataset", default="data/aegisbench",
                   help="dataset repo whose manifest digest results must match")
    p.add_argument("--out", default="leaderboard", help="output folder")
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
    p.add_argument("--submissions", action="append", default=[], metavar="DIR",
                   help="folder of the stored submissions (repeatable): results whose files are not those of "
                        "DIR/<id> are skipped, so a folder named like another submission cannot stand for it")
    p.add_argument("--private", default=None, metavar="DIR",
                   help="the project whose private/ holds its attestations (default: the current folder, or "
                        "AEGISBENCH_PRIVATE): a row is verified only when its run was attested there")
    p.add_argument("--strict", action="store_true",
                   help="exit 2 if any results folder was skipped or a --reference has no merged results")
    declare_io(p, reads={"results": "--results", "dataset": "--dataset", "preview": "--preview",
                         "submissions": "--submissions"},  # --private: its private/ (build_leaderboard)
               writes={"out": "--out", "metrics": "--metrics", "plots": "--plots"})
    p.set_defaults(func=cmd_leaderboard)


def cmd_leaderboard(args) -> int:
    from aegisbench.leaderboard.build import build_leaderboard

    report = build_leaderboard(args.results, args.dataset, args.out, evaluator_version=args.evaluator_version,
                               references=args.reference, metrics=args.metrics, plots=args.plots,
                               preview=args.preview, submissions=args.submissions, private=args.private)
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
        print(f"severity curves {args.plots}: {len(report.plots)} SVG image(s) (dvc plots show)")
    return 2 if args.strict and (report.skipped or report.missing_references) else 0
