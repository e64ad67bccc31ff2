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

from aegisbench.cli import command, export_global_options
from aegisbench.cli_options import add_dataset_option, add_executor_options, add_no_verify_option, add_params_option
from aegisbench.errors import BadInput


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "run", "the whole pipeline under dvc repro, then where the leaderboard page is",
                "sources -> build -> reference detectors -> detect -> evaluate -> leaderboard, each stage a "
                "`dvc.yaml` stage (rerun only when its inputs change). Every long stage reports progress: a "
                "bar on a terminal, else a line every --progress-interval seconds.",
                ["aegisbench run --fast        # a few images in runs/fast, minutes",
                 "aegisbench run               # the full benchmark",
                 "aegisbench run train_reference@smoke   # one stage and what it needs",
                 "aegisbench run --executor ray --ray-address auto"])
    p.add_argument("stages", nargs="*", metavar="STAGE",
                   help="dvc.yaml stages to reproduce, with the stages they depend on (default: all), "
                   "e.g. leaderboard, train_reference@smoke")
    add_params_option(p)
    p.add_argument("--fast", action="store_true",
                   help="fast variant: the same dvc.yaml on a few images in a scratch project (runs/fast)")
    p.add_argument("--fast-dir", default="runs/fast", help="scratch project of --fast")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="dvc.yaml stages run at the same time when they do not depend on each other (1: one "
                   "plain `dvc repro`); default: the CPU count")
    add_executor_options(p)
    p.set_defaults(func=cmd_run)
    for verb, summary, details, examples in (
            ("pull", "the pipeline's outputs from the DVC remote instead of rebuilding them, then verify the dataset",
             "Checks that the remote is reachable first (one line, exit 2, nothing fetched or checked out when it "
             "is not), runs `dvc pull`, then re-hashes and re-decodes the dataset repo it brought.",
             ["aegisbench pull                    # the default remote (`dvc remote add -d`)",
              "aegisbench pull --remote shared --no-verify"]),
            ("push", "the pipeline's outputs (as dvc.lock names them) to the DVC remote",
             "Checks that the remote is reachable first (one line, exit 2, nothing uploaded when it is not), then "
             "runs `dvc push`.",
             ["aegisbench push                    # after `aegisbench run`", "aegisbench push --remote shared"])):
        p = command(sub, verb, summary, details, examples)
        p.add_argument("--remote", default=None, help="DVC remote name; default: the project's default remote")
        p.add_argument("--jobs", type=int, default=None, help="parallel transfers (dvc's --jobs); default: dvc's")
        if verb == "pull":
            add_dataset_option(p, "dataset repo to verify after the pull")
            add_no_verify_option(p, "skip verifying the dataset after the pull")
        p.set_defaults(func=cmd_remote, verb=verb)


def cmd_run(args) -> int:
    from aegisbench.detectors.reference import ReferenceParams
    from aegisbench.executor import export_env
    from aegisbench.params import Params
    from aegisbench.pipeline.project import (PAGE, check_runnable, check_stages, dvc_repro, fast_params,
                                             prepare_project)

    checkout = Path.cwd()
    check_runnable(checkout)
    if args.jobs < 1:
        raise BadInput(f"must be at least 1, got {args.jobs}", where="--jobs")
    params = Params.load(args.params)  # validates before anything runs
    ReferenceParams.check_section(params.raw.get("reference_detector"))  # and the trainer's recipe
    check_stages(checkout, params.raw, args.stages)
    export_env(args.executor, args.workers, args.ray_address, params.build.workers)  # the stages' executor
    export_global_options(args)  # and their -v/-q and --progress-interval
    if args.fast:
        project = prepare_project(checkout, args.fast_dir, fast_params(params.raw))
    else:
        if Path(args.params).resolve() != (checkout / "params.yaml").resolve():
            raise BadInput("dvc repro reads ./params.yaml; edit it (or use --fast)", where="--params")
        project = checkout
    rc = dvc_repro(project, args.jobs, args.stages or None)
    if rc != 0:
        print(f"dvc repro failed (exit {rc}); the published leaderboard was left as it was", file=sys.stderr)
        return rc
    print(f"dataset repo: {project / params.dataset_dir}")
    print(f"leaderboard page: {project / PAGE}")
    return 0


def cmd_remote(args) -> int:
    """``pull`` / ``push``: check the remote, transfer, and (pull) verify the dataset."""
    from aegisbench.pipeline.remote import check_reachable, resolve_remote, transfer

    checkout = Path.cwd()
    if args.jobs is not None and args.jobs < 1:
        raise BadInput(f"must be at least 1, got {args.jobs}", where="--jobs")
    remote = resolve_remote(checkout, args.remote)
    check_reachable(remote, for_push=args.verb == "push")
    transfer(checkout, args.verb, remote, args.jobs)
    if args.verb == "push" or args.no_verify:
        print(f"{args.verb} {'to' if args.verb == 'push' else 'from'} remote {remote.name!r}: done")
        return 0
    from aegisbench.dataset.manifest import load_manifest
    from aegisbench.dataset.verify import verify_repo
    report = verify_repo(args.dataset)
    if not report.ok:
        for line in report.lines():
            print(f"{args.dataset}: {line}", file=sys.stderr)
        return 2
    from aegisbench.releases import release_note
    m = load_manifest(args.dataset)
    print(f"pulled from remote {remote.name!r}; {args.dataset}: OK ({len(m['files'])} files, "
          f"digest {m['dataset_digest']}: {release_note(m['dataset_digest'], m['benchmark_version'])})")
    return 0
