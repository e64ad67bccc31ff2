"""CLI sub-command of the corruption engine: ``calibrate``.

``aegisbench calibrate --source-table T --sample N [--fit] [--out FILE] [--metrics FILE]``
measures every severity ladder on a deterministic sample of N images of the source
table (ranked by SHA-256 of version and image id), optionally fits the ladder
parameters, writes the report as JSON (usable as DVC metrics) and the table as
YAML. A ladder that is not strictly monotone, or a fit that cannot reach its target
inside the parameter's declared bounds, is refused: exit 2, one line naming the
corruption, the severity, the target and the bound, and nothing written.

One frame under every corruption and severity is ``aegisbench preview --grid``
(:mod:`aegisbench.builders.commands`).

>>> import argparse
>>> parser = argparse.ArgumentParser(prog="aegisbench")
>>> register(parser.add_subparsers(dest="command"))
>>> parser.parse_args(["calibrate", "--source-table", "t.parquet", "--sample", "5"]).sample
5
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import aegisbench
from aegisbench.atomic import atomic_write_text
from aegisbench.cli import command
from aegisbench.cli_options import add_out_option, add_params_option
from aegisbench.overlap import declare_io
from aegisbench.corruptions.calibrate import calibrate, load_table, save_table, select_sample
from aegisbench.corruptions.conditions import GEOMETRIES
from aegisbench.errors import BadInput

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    p = command(subparsers, "calibrate", "measure (and fit) the corruption severity ladders on a sample",
                "Measure each corruption's declared statistic at s1..s3 on a seeded sample of a source "
                "table; with --fit, solve each severity's ladder parameter to hit the declared targets "
                "within --rtol. The report gives two verdicts per ladder, monotone and on_target (every "
                "severity within --rtol of its HERIDAL target). A ladder that is not strictly monotone is "
                "refused (exit 2); with --fit, so is one off target.",
                ["aegisbench calibrate --source-table data/sources/synthetic_sar.parquet --sample 20 "
                 "--metrics calibration/report.json",
                 "aegisbench calibrate --source-table data/sources/heridal.parquet --sample 20 --fit "
                 "--out calibration/heridal.yaml"])
    p.add_argument("--source-table", required=True, type=Path, help="canonical source table (Parquet)")
    p.add_argument("--sample", required=True, type=int, help="number of images in the sample")
    p.add_argument("--fit", action="store_true", help="fit the ladder parameters")
    add_out_option(p, "write the (fitted) severity table here (YAML)", type=Path)
    p.add_argument("--metrics", type=Path, help="write the calibration report here (JSON)")
    p.add_argument("--table", type=Path, help="start from this severity table instead of the defaults")
    p.add_argument("--corruption", action="append", dest="corruptions", metavar="NAME",
                   help="only this corruption (repeatable)")
    p.add_argument("--split", action="append", dest="splits", metavar="SPLIT",
                   help="sample only from this split (repeatable)")
    p.add_argument("--geometry", choices=GEOMETRIES,
                   help="geometry of the corruptions (default: build.geometry of --params)")
    p.add_argument("--benchmark-version", help="version that seeds the sample (default: benchmark_version "
                   "of --params)")
    add_params_option(p, "params file (the source of the --geometry and --benchmark-version defaults)")
    p.add_argument("--rtol", type=float, default=0.02, help="tolerance of on_target and of the fit (relative, in (0, 1))")
    declare_io(p, reads={"source_table": "--source-table", "table": "--table", "params": "--params"},
               writes={"out": "--out", "metrics": "--metrics"})
    p.set_defaults(func=run_calibrate)


def _read_table():
    from aegisbench.builders.source_table import read_source_table

    return read_source_table


def _defaults_from_params(args: argparse.Namespace) -> None:
    """Fill --benchmark-version / --geometry from params.yaml (package version / frame without)."""
    from aegisbench.params import Params

    params = Params.load(args.params) if Path(args.params).exists() else None
    if args.benchmark_version is None:
        args.benchmark_version = params.benchmark_version if params else aegisbench.__version__
    if args.geometry is None:
        args.geometry = params.build.geometry if params else "frame"


def run_calibrate(args: argparse.Namespace) -> int:
    _defaults_from_params(args)
    if args.sample < 1:
        raise BadInput(f"must be a positive integer, got {args.sample}", where="--sample")
    if not 0 < args.rtol < 1:
        raise BadInput(f"must lie in (0, 1), got {args.rtol}", where="--rtol")
    read = _read_table()
    ids = [f"{r.source}/{r.image_id}" for r in read(args.source_table, args.splits)]
    if not ids:
        raise BadInput("no images in the source table (or in the chosen splits)",
                       where=str(args.source_table))
    chosen = set(select_sample(ids, args.sample, args.benchmark_version))
    if len(chosen) < args.sample:
        log.warning("source table has only %d images; calibrating on all of them", len(chosen))
    images, boxes = {}, {}
    for r in read(args.source_table, args.splits):
        key = f"{r.source}/{r.image_id}"
        if key in chosen:
            images[key] = r.image()
            boxes[key] = r.boxes
    table = load_table(args.table) if args.table else None
    measured_on = {"source_table": Path(args.source_table).name, "sources": sorted({k.split("/")[0] for k in images}),
                   "splits": sorted(args.splits) if args.splits else "all"}
    report = calibrate(images, args.corruptions, fit=args.fit, benchmark_version=args.benchmark_version,
                       table=table, rtol=args.rtol, geometry=args.geometry, boxes=boxes, measured_on=measured_on)
    failures = report.failures()
    if failures:
        raise BadInput("; ".join(failures), where=f"calibrate {args.source_table}")
    if args.metrics:
        atomic_write_text(args.metrics, json.dumps(report.to_dict(), indent=2, sort_keys=True) + "\n")
        log.info("wrote calibration report %s", args.metrics)
    if args.out:
        save_table(args.out, report)
        log.info("wrote severity table %s", args.out)
    return 0
