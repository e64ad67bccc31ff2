"""CLI commands of the dataset repo: ``sources``, ``build``, ``verify``, ``preview``, ``publish``.

>>> import argparse
>>> parser = argparse.ArgumentParser(prog="aegisbench")
>>> register(parser.add_subparsers(dest="command"))
>>> parser.parse_args(["preview", "--grid", "--cell", "48"]).cell
48
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import aegisbench
from aegisbench.errors import BadInput
from aegisbench.params import Params
from aegisbench.vocab import DETECTION_TRACKS, SOURCE_FORMATS

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
    p.add_argument("--format", choices=SOURCE_FORMATS, help="format of --source-dir")
    p.add_argument("--name", help="source name for --source-dir (e.g. heridal)")
    p.add_argument("--track", default="sar", choices=list(DETECTION_TRACKS), help="track of --source-dir")
    p.add_argument("--class-map", help="CLASS=TARGET[,CLASS=TARGET...]; TARGET 'none' drops a class")
    p.add_argument("--target-label", default=None, help="the track's one target class")
    p.add_argument("--split-mode", choices=["hash", "folders"], default="hash",
                   help="group-aware hash split (default) or the dataset's own split folders")
    p.add_argument("--skip-sources", action="store_true", help="reuse existing source tables")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("verify", help="re-hash a dataset repo against its manifest")
    p.add_argument("path", nargs="?", default="data/aegisbench")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("preview", help="contact-sheet PNG of every source; --grid: one frame under every "
                       "corruption x severity")
    _common(p)
    p.add_argument("--source-table", action="append", type=Path, metavar="TABLE",
                   help="preview this canonical source table instead of the sources of --params (repeatable)")
    p.add_argument("--out", default="data/preview", help="folder for the PNGs (default data/preview)")
    p.add_argument("--split", default="test", help="split of the contact sheets (default test)")
    p.add_argument("--grid", action="store_true",
                   help="also write <source>_grid.png: one frame under every corruption x severity")
    p.add_argument("--image-id", help="frame for --grid, from any split (default: the first of --split)")
    p.add_argument("--table", type=Path, help="severity table (YAML) for --grid (default: build.severity_table)")
    p.add_argument("--cell", type=int, default=200, help="tile size of --grid in px (default 200)")
    p.set_defaults(func=cmd_preview)

    p = sub.add_parser("publish", help="upload a verified dataset repo to the Hugging Face Hub")
    p.add_argument("--repo-id", required=True, help="Hub dataset repo, ORG/NAME")
    p.add_argument("--dataset", default="data/aegisbench", help="dataset repo folder (default data/aegisbench)")
    p.add_argument("--dry-run", action="store_true", help="list exactly what would be uploaded, upload nothing")
    p.add_argument("--private", action="store_true", help="create the Hub repo as private")
    p.set_defaults(func=cmd_publish)


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
    from aegisbench.builders.sources import materialize_sources
    params = Params.load(args.params)
    materialize_sources(params, only=args.only, where=args.params)
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
    from aegisbench.builders.build import build_repo
    from aegisbench.builders.sources import materialize_sources
    params = _direct_params(args) if args.source_dir else Params.load(args.params)
    executor = executor_of(args, params.build.workers)
    if args.source_dir or not args.skip_sources:
        materialize_sources(params, missing_only=not args.source_dir)
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
    from aegisbench.builders.preview import write_previews
    from aegisbench.corruptions.calibrate import load_table

    params = Params.load(args.params) if not args.source_table or Path(args.params).exists() else None
    if args.source_table:
        tables = {t.stem: t for t in args.source_table}
    else:
        tables = {s.name: Path(params.sources_dir) / f"{s.name}.parquet" for s in params.sources}
    version = params.benchmark_version if params else aegisbench.__version__
    table = None  # the grid shows the table the build uses, unless --table names another one
    if args.grid and args.table:
        table = load_table(args.table)
    elif args.grid and params and params.build.severity_table:
        table = load_table(params.build.severity_table, expected_version=version)
    for path in write_previews(tables, args.out, version=version, split=args.split, grid=args.grid,
                               image_id=args.image_id, geometry=params.build.geometry if params else "frame",
                               table=table, cell=args.cell):
        print(f"wrote {path}")
    return 0


def cmd_publish(args) -> int:
    from aegisbench.builders.publish import publish

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
