"""Small files the DVC pipeline reads instead of large ones (``python -m aegisbench.pipeline.summaries``).

``digest REPO OUT``: the dataset's identity as a tiny, path-free JSON: its ``benchmark_version``
and ``dataset_digest`` (the manifest's, checked; the digest every submission and result names).
Stages after ``build`` depend on it instead of the dataset folder, so a rebuild that changes
bytes but not content (a card edit, an encoder writing other PNG bytes for the same pixels,
re-sharding with another ``build.rows_per_shard``: the digest hashes each split's rows, not its
shards) reruns ``build`` and this stage, and nothing after them.

``ladders REPORT OUT``: the calibration report (``aegisbench calibrate --metrics``) cut to
what ``dvc metrics show`` should print: per corruption ladder its two verdicts, ``monotone``
and ``on_target``, and its worst miss of the target in % (signed: measured minus target);
overall, how many ladders are monotone and how many of the severity cells are on target,
and the tolerance. The stage fails (exit 2, the summary still written) only on a ladder that
is not monotone, or, for a fitted report, one that is off target: a measured miss of the
HERIDAL targets on other frames is information.

The report is read and checked by the one reader every consumer uses
(:mod:`aegisbench.leaderboard.calibration_report`).

>>> ladder_summary({"fit": False, "tolerance": 0.02, "corruptions": {"fog": {"monotone": True,
...     "on_target": False, "severities": {"s1": {"measured": 1.05, "diff_pct": 5.0, "on_target": False},
...     "s2": {"measured": 0.875, "diff_pct": -12.5, "on_target": False}}}}})["ladders"]
{'fog': {'monotone': True, 'on_target': False, 'worst_miss_pct': -12.5}}
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.leaderboard.calibration_report import (CalibrationReportView, parse_calibration_report,
                                                       read_calibration_report)

log = logging.getLogger(__name__)


def dataset_identity(repo: str | Path) -> dict:
    """``{"benchmark_version", "dataset_digest"}`` of a dataset repo (its checked manifest)."""
    from aegisbench.dataset.manifest import load_manifest

    manifest = load_manifest(repo)
    return {"benchmark_version": manifest["benchmark_version"], "dataset_digest": manifest["dataset_digest"]}


def write_dataset_identity(repo: str | Path, out: str | Path) -> Path:
    """Write :func:`dataset_identity` of ``repo`` to ``out`` (atomic, sorted keys)."""
    doc = dataset_identity(repo)
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    log.info("dataset digest %s -> %s", doc["dataset_digest"], out)
    return Path(out)


def ladder_summary(report: CalibrationReportView | dict) -> dict:
    """Per corruption ladder of a calibration report: ``monotone``, ``on_target`` and
    ``worst_miss_pct`` (the signed % difference of the severity farthest from its target);
    overall the ladders monotone, the cells on target and the tolerance. Never one ``ok``.
    ``report``: a checked report, or a parsed one (checked here)."""
    if not isinstance(report, CalibrationReportView):
        report = parse_calibration_report(report)
    ladders, cells, on = {}, 0, 0
    for name, lad in sorted(report.ladders.items()):
        diffs = [s.diff_pct for s in lad.severities.values()]
        cells += len(diffs)
        on += sum(s.on_target for s in lad.severities.values())
        ladders[name] = {"monotone": lad.monotone, "on_target": lad.on_target,
                         "worst_miss_pct": max(diffs, key=abs) if diffs else None}
    return {"ladders": ladders, "ladders_monotone": f"{sum(v['monotone'] for v in ladders.values())}/{len(ladders)}",
            "cells_on_target": f"{on}/{cells}", "tolerance_pct": 100.0 * float(report.tolerance),
            "fit": report.fit}


def ladder_failures(summary: dict) -> list[str]:
    """What fails the ladders stage: a ladder not monotone; with ``fit``, one off target."""
    return [f"{name}: {'not monotone' if not v['monotone'] else 'fitted but off target'}"
            for name, v in summary["ladders"].items()
            if not v["monotone"] or (summary["fit"] and not v["on_target"])]


def write_ladder_summary(report: str | Path, out: str | Path) -> Path:
    """Write :func:`ladder_summary` of the report file ``report`` to ``out``."""
    doc = ladder_summary(read_calibration_report(report))
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    failed = ladder_failures(doc)
    if failed:
        raise BadInput("; ".join(failed), where=str(report))
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aegisbench.pipeline.summaries", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    d = sub.add_parser("digest", help="benchmark version and dataset digest of a dataset repo (path-free JSON)")
    d.add_argument("repo")
    d.add_argument("out")
    lad = sub.add_parser("ladders", help="per-ladder summary of a calibration report")
    lad.add_argument("report")
    lad.add_argument("out")
    args = parser.parse_args(argv)
    try:
        if args.what == "digest":
            write_dataset_identity(args.repo, args.out)
        else:
            write_ladder_summary(args.report, args.out)
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through dvc repro
    sys.exit(main())
