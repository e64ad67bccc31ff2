"""CLI command ``run``: the whole pipeline under ``dvc repro``, then where the page is.

>>> import argparse
>>> parser = argparse.ArgumentParser(prog="aegisbench")
>>> register(parser.add_subparsers(dest="command"))
>>> parser.parse_args(["run", "--fast"]).fast_dir
'runs/fast'
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from aegisbench.builders.commands import executor_args
from aegisbench.cli import command, export_global_options
from aegisbench.errors import BadInput


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "run", "the whole pipeline under dvc repro, then where the leaderboard page is",
                "sources -> build -> reference detectors -> detect -> evaluate -> leaderboard, each stage a "
                "`dvc.yaml` stage (rerun only when its inputs change). Every long stage reports progress: a "
                "bar on a terminal, else a line every --progress-interval seconds.",
                ["aegisbench run --fast        # a few images in runs/fast, minutes",
                 "aegisbench run               # the full benchmark",
                 "aegisbench run --executor ray --ray-address auto"])
    p.add_argument("--params", default="params.yaml", help="params file")
    p.add_argument("--fast", action="store_true",
                   help="fast variant: the same dvc.yaml on a few images in a scratch project (runs/fast)")
    p.add_argument("--fast-dir", default="runs/fast", help="scratch project of --fast")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="dvc.yaml stages run at the same time when they do not depend on each other (1: one "
                   "plain `dvc repro`); default: the CPU count")
    executor_args(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from aegisbench.executor import export_env
    from aegisbench.params import Params
    from aegisbench.pipeline.project import PAGE, check_runnable, dvc_repro, fast_params, prepare_project

    checkout = Path.cwd()
    check_runnable(checkout)
    if args.jobs < 1:
        raise BadInput(f"must be at least 1, got {args.jobs}", where="--jobs")
    params = Params.load(args.params)  # validates before anything runs
    export_env(args.executor, args.workers, args.ray_address, params.build.workers)  # the stages' executor
    export_global_options(args)  # and their -v/-q and --progress-interval
    if args.fast:
        project = prepare_project(checkout, args.fast_dir, fast_params(params.raw))
    else:
        if Path(args.params).resolve() != (checkout / "params.yaml").resolve():
            raise BadInput("dvc repro reads ./params.yaml; edit it (or use --fast)", where="--params")
        project = checkout
    rc = dvc_repro(project, args.jobs)
    if rc != 0:
        print(f"dvc repro failed (exit {rc}); the published leaderboard was left as it was", file=sys.stderr)
        return rc
    print(f"dataset repo: {project / params.dataset_dir}")
    print(f"leaderboard page: {project / PAGE}")
    return 0
