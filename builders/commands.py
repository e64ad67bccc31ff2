"""CLI commands of the builders: ``sources``, ``build``, ``verify``, ``preview``, ``run``."""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from pathlib import Path

from aegisbench.errors import BadInput
from aegisbench.params import Params

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sources", help="materialize canonical source tables from params.yaml")
    _common(p)
    p.add_argument("--only", action="append", help="only this source (repeatable)")
    p.set_defaults(func=cmd_sources)

    p = sub.add_parser("build", help="build the checksummed HF dataset repo")
    _common(p)
    p.add_argument("--out", help="output repo folder (default: paths.dataset in params)")
    executor_args(p)
    p.add_argument("--source-dir", help="build from this local dataset folder instead of params sources")
    p.add_argument("--format", choices=["voc", "yolo", "coco", "visdrone"], help="format of --source-dir")
    p.add_argument("--name", help="source name for --source-dir (e.g. heridal)")
    p.add_argument("--track", default="sar", choices=["sar", "smoke"], help="track of --source-dir")
    p.add_argument("--class-map", help="CLASS=TARGET[,CLASS=TARGET...]; TARGET 'none' drops a class")
    p.add_argument("--target-label", default=None, help="the track's one target class")
    p.add_argument("--split-mode", choices=["hash", "folders"], default="hash",
                   help="group-aware hash split (default) or the dataset's own split folders")
    p.add_argument("--skip-sources", action="store_true", help="reuse existing source tables")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("verify", help="re-hash a dataset repo against its manifest")
    p.add_argument("path", nargs="?", default="data/aegisbench")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("preview", help="contact-sheet PNG of every source")
    _common(p)
    p.add_argument("--out", default="data/preview", help="folder for the PNGs")
    p.add_argument("--split", default="test")
    p.add_argument("--grid", action="store_true",
                   help="also write <source>_grid.png: one frame under every corruption x severity")
    p.add_argument("--image-id", help="frame for --grid (default: the first of the split)")
    p.set_defaults(func=cmd_preview)

    p = sub.add_parser("run", help="the whole pipeline under dvc repro (sources -> build -> reference "
                       "detector -> detect -> evaluate -> leaderboard); prints where the page is")
    p.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    p.add_argument("--fast", action="store_true",
                   help="fast variant: the same dvc.yaml on a few images in a scratch project (runs/fast)")
    p.add_argument("--fast-dir", default="runs/fast", help="scratch project of --fast (default runs/fast)")
    executor_args(p)
    p.set_defaults(func=cmd_run)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")


def executor_args(p: argparse.ArgumentParser) -> None:
    """``--executor``, ``--workers``, ``--ray-address`` (defaults: the AEGISBENCH_* variables)."""
    p.add_argument("--executor", help="local (default: processes on this machine) or ray (a Ray cluster)")
    p.add_argument("--workers", type=int, help="local worker processes (default build.workers); the CPUs of a "
                   "local Ray started for --executor ray without --ray-address")
    p.add_argument("--ray-address", help="Ray cluster to join: auto or HOST:PORT (default: start a local Ray)")


def executor_of(args, default_workers: int = 1):
    """The executor of ``--executor/--workers/--ray-address``, ready to run (Ray joined or
    started), so that a bad choice fails before anything is written."""
    from aegisbench.executor import Executor, connect
    ex = Executor.from_cli(args.executor, args.workers, args.ray_address, default_workers)
    connect(ex)
    return ex


def cmd_sources(args) -> int:
    from aegisbench.builders.build import materialize_source
    params = Params.load(args.params)
    names = set(args.only or [s.name for s in params.sources])
    unknown = names - {s.name for s in params.sources}
    if unknown:
        raise BadInput(f"unknown source(s) {sorted(unknown)}", where=args.params)
    for src in params.sources:
        if src.name in names:
            materialize_source(src, params.benchmark_version, params.sources_dir)
    return 0


def _direct_params(args) -> Params:
    """Params for ``build --source-dir``: one local folder in a known format."""
    if not (args.format and args.name):
        raise BadInput("--source-dir needs --format and --name", where="command line")
    class_map = {}
    for item in filter(None, (args.class_map or "").split(",")):
        if "=" not in item:
            raise BadInput(f"class map entry {item!r} is not CLASS=TARGET", where="--class-map")
        k, v = item.split("=", 1)
        class_map[k.strip()] = None if v.strip().lower() == "none" else v.strip()
    target = args.target_label or ("person" if args.track == "sar" else "smoke")
    base = Params.load(args.params).raw if Path(args.params).exists() else {"benchmark_version": "0.1.0"}
    raw = {k: v for k, v in base.items() if k != "sources"}
    raw["sources"] = {args.name: {"track": args.track, "kind": args.format, "options": {
        "path": args.source_dir, "class_map": class_map or {target: target}, "target_label": target,
        "split_mode": args.split_mode}}}
    return Params.from_dict(raw)


def cmd_build(args) -> int:
    from aegisbench.builders.build import build_repo, materialize_source
    params = _direct_params(args) if args.source_dir else Params.load(args.params)
    executor = executor_of(args, params.build.workers)
    if args.source_dir or not args.skip_sources:
        for src in params.sources:
            table = Path(params.sources_dir) / f"{src.name}.parquet"
            if args.source_dir or not table.exists():
                materialize_source(src, params.benchmark_version, params.sources_dir)
    manifest = build_repo(params, out=args.out, executor=executor)
    out = args.out or params.dataset_dir
    print(f"built {out}  version {manifest['benchmark_version']}  digest {manifest['dataset_digest']}")
    return 0


def cmd_verify(args) -> int:
    from aegisbench.builders.manifest import load_manifest, verify_repo
    report = verify_repo(args.path)
    if report.ok:
        m = load_manifest(args.path)
        print(f"{args.path}: OK ({len(m['files'])} files, digest {m['dataset_digest']})")
        return 0
    for line in report.lines():
        print(f"{args.path}: {line}", file=sys.stderr)
    return 2


def cmd_preview(args) -> int:
    from aegisbench.builders.preview import contact_sheet
    from aegisbench.builders.source_table import read_source_table
    params = Params.load(args.params)
    for src in params.sources:
        table = Path(params.sources_dir) / f"{src.name}.parquet"
        records = list(itertools.islice(read_source_table(table, splits=[args.split]), 36))
        if not records:
            log.warning("source %s has no %s images: no contact sheet", src.name, args.split)
            continue
        path = contact_sheet(records, Path(args.out) / f"{src.name}.png")
        print(f"wrote {path}")
        if getattr(args, "grid", False):
            from aegisbench.corruptions import preview_grid
            rec = records[0]
            if args.image_id:
                rec = next((r for r in read_source_table(table) if r.image_id == args.image_id), None)
                if rec is None:
                    continue
            grid = Path(args.out) / f"{src.name}_grid.png"
            preview_grid(rec.image(), grid, key=(params.benchmark_version, rec.source, rec.image_id),
                         boxes=rec.boxes, geometry=params.build.geometry)
            print(f"wrote {grid}")
    return 0


def cmd_run(args) -> int:
    from aegisbench.executor import export_env
    from aegisbench.pipeline import PAGE, check_runnable, dvc_repro, fast_params, prepare_project
    checkout = Path.cwd()
    check_runnable(checkout)
    params = Params.load(args.params)  # validates before anything runs
    export_env(args.executor, args.workers, args.ray_address, params.build.workers)  # the stages' executor
    if args.fast:
        project = prepare_project(checkout, args.fast_dir, fast_params(params.raw))
    else:
        if Path(args.params).resolve() != (checkout / "params.yaml").resolve():
            raise BadInput("dvc repro reads ./params.yaml; edit it (or use --fast)", where="--params")
        project = checkout
    rc = dvc_repro(project)
    if rc != 0:
        print(f"dvc repro failed (exit {rc}); the published leaderboard was left as it was", file=sys.stderr)
        return rc
    print(f"dataset repo: {project / params.dataset_dir}")
    print(f"leaderboard page: {project / PAGE}")
    return 0
