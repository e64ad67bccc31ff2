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
from aegisbench.cli_options import (add_dataset_option, add_executor_options, add_no_verify_option, add_out_option,
                                    add_params_option, add_results_option)
from aegisbench.errors import BadInput
from aegisbench.overlap import declare_io


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
    _register_seeds(sub)


def _register_seeds(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "train-seeds", "train a reference detector's extra seeds (params.yaml reference.seeds)",
                "The row's own seed (reference_detector.seed) is train-reference's; this trains the next "
                "reference.seeds - 1 with the same recipe, one child process each (--jobs at a time), into "
                "OUT/seed_<s>/ with OUT/seeds.json; published whole (seeds: 1 writes seeds.json alone).",
                ["aegisbench train-seeds --source synthetic_sar --out data/models/reference_sar_seeds"])
    add_params_option(p, "params file (reference.seeds, reference_detector)")
    p.add_argument("--source", required=True, help="the source the reference is trained on")
    p.add_argument("--jobs", type=int, default=1, help="trainings run at the same time, one process each")
    add_out_option(p, "output folder", required=True)
    declare_io(p, reads={"params": "--params"}, writes={"out": "--out"})
    p.set_defaults(func=cmd_train_seeds)
    p = command(sub, "reference-seeds", "score a reference detector's extra seeds as its row, for the "
                "leaderboard's training-seed spread",
                "Each seed model of --models (train-seeds) is detected with the arguments of the --detect-stage's "
                "`aegisbench detect` line in dvc.yaml and evaluated with the evaluate stage's, so the seeds differ "
                "by the seed alone; the row's own seed is read from its results folder. Writes OUT/seeds.parquet "
                "and OUT/seeds.json, published whole.",
                ["aegisbench reference-seeds --models data/models/reference_sar_seeds --reference reference_sar "
                 "--detect-stage detect_reference_sar --out seeds/reference_sar"])
    add_params_option(p, "params file (the evaluate stage's ${...} values)")
    p.add_argument("--models", required=True, help="the seed models folder train-seeds wrote")
    p.add_argument("--reference", required=True, help="the reference row's submission id (its results folder's name)")
    add_results_option(p, "results folder holding the row's results (<reference>/)")
    p.add_argument("--detect-stage", required=True, help="dvc.yaml stage whose `aegisbench detect` line made the row")
    p.add_argument("--evaluate-stage", default="evaluate", help="dvc.yaml stage whose `aegisbench evaluate` line "
                   "scored it (a foreach stage: its item is --reference)")
    p.add_argument("--jobs", type=int, default=1, help="seeds scored at the same time")
    add_out_option(p, "output folder", required=True)
    declare_io(p, reads={"params": "--params", "models": "--models", "results": "--results"}, writes={"out": "--out"})
    p.set_defaults(func=cmd_reference_seeds)


def cmd_train_seeds(args) -> int:
    from aegisbench.fields import check_int
    from aegisbench.pipeline.seeds import train_seeds

    check_int(args.jobs, "jobs", lo=1, error=BadInput, where="--jobs")
    report = train_seeds(args.params, args.source, args.out, jobs=args.jobs)
    print(f"wrote {args.out}: seeds {report['seeds']} (seed {report['primary']} is the row's, trained by "
          f"train-reference); {len(report['trained'])} trained in {report['seconds']:.0f} s")
    return 0


def cmd_reference_seeds(args) -> int:
    from aegisbench.fields import check_int
    from aegisbench.pipeline.seeds import reference_seeds

    check_int(args.jobs, "jobs", lo=1, error=BadInput, where="--jobs")
    report = reference_seeds(args.params, args.models, args.reference, args.results, args.out, args.detect_stage,
                             args.evaluate_stage, jobs=args.jobs)
    clean = ", ".join(f"seed {s}: {v:.3f}" for s, v in sorted(report["clean_recall"].items(), key=lambda kv: int(kv[0])))
    print(f"wrote {args.out}: {len(report['seeds'])} seed(s) in {report['seconds']:.0f} s; clean recall {clean}")
    return 0


def cmd_run(args) -> int:
    from aegisbench.detectors.reference import ReferenceParams
    from aegisbench.executor import export_env
    from aegisbench.params import Params
    from aegisbench.pipeline.seeds import SeedParams
    from aegisbench.pipeline.project import (PAGE, check_runnable, check_stages, dvc_repro, fast_params,
                                             prepare_project)

    checkout = Path.cwd()
    check_runnable(checkout)
    if args.jobs < 1:
        raise BadInput(f"must be at least 1, got {args.jobs}", where="--jobs")
    params = Params.load(args.params)  # validates before anything runs
    ReferenceParams.check_section(params.raw.get("reference_detector"))  # and the trainer's recipe
    SeedParams.from_dict(params.raw.get("reference"))  # and reference.seeds
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
