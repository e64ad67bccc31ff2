"""CLI commands ``leaderboard`` and ``publish`` (wired in via ``register(subparsers)``)."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("leaderboard", help="build leaderboard/ (Parquet, Markdown, static site) from results/")
    p.add_argument("--results", default="results", help="folder of results/<id>/ (default results)")
    p.add_argument("--dataset", default="data/aegisbench",
                   help="dataset repo whose manifest digest results must match (default data/aegisbench)")
    p.add_argument("--out", default="leaderboard", help="output folder (default leaderboard)")
    p.add_argument("--evaluator-version", default=None,
                   help="current evaluator version (default: the installed evaluator's)")
    p.add_argument("--strict", action="store_true", help="exit 2 if any results folder was skipped")
    p.set_defaults(func=cmd_leaderboard)

    p = sub.add_parser("publish", help="upload a verified dataset repo to the Hugging Face Hub")
    p.add_argument("--repo-id", required=True, help="Hub dataset repo, ORG/NAME")
    p.add_argument("--dataset", default="data/aegisbench", help="dataset repo folder (default data/aegisbench)")
    p.add_argument("--dry-run", action="store_true", help="list exactly what would be uploaded, upload nothing")
    p.add_argument("--private", action="store_true", help="create the Hub repo as private")
    p.set_defaults(func=cmd_publish)


def cmd_leaderboard(args) -> int:
    from aegisbench.leaderboard.build import build_leaderboard

    report = build_leaderboard(args.results, args.dataset, args.out, evaluator_version=args.evaluator_version)
    for s in report.skipped:
        print(f"skipped {s.folder} ({s.problem}): {s.reason}", file=sys.stderr)
    print(f"leaderboard {report.out}: {len(report.merged)} results merged, {len(report.skipped)} skipped; "
          f"open {report.out}/site/index.html")
    return 2 if args.strict and report.skipped else 0


def cmd_publish(args) -> int:
    from aegisbench.leaderboard.publish import publish

    plan = publish(args.repo_id, args.dataset, dry_run=args.dry_run, private=args.private)
    total = sum(i.bytes for i in plan)
    if args.dry_run:
        for item in plan:
            print(f"{item.path}\t{item.bytes}\t{item.sha256}")
        print(f"dry run: {len(plan)} files, {total} bytes would be uploaded to "
              f"https://huggingface.co/datasets/{args.repo_id}")
    else:
        print(f"published {len(plan)} files ({total} bytes) to https://huggingface.co/datasets/{args.repo_id}")
    return 0
