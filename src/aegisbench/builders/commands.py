"""CLI commands of the dataset repo: ``sources``, ``build``, ``verify``, ``preview``, ``publish``.

>>> import argparse
>>> parser = argparse.ArgumentParser(prog="aegisbench")
>>> register(parser.add_subparsers(dest="command"))
>>> parser.parse_args(["preview", "--grid", "--cell", "48"]).cell
48
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

import aegisbench
from aegisbench.cli import command
from aegisbench.cli_options import (add_dataset_option, add_executor_options, add_out_option,
                                     add_params_option)
from aegisbench.overlap import declare_io
from aegisbench.errors import BadInput
from aegisbench.params import Params
from aegisbench.builders.source_flags import source_args, source_entry, tracks_of
from aegisbench.vocab import FIRESPREAD
from aegisbench.paths import DATASET

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "sources", "materialize the canonical source tables from params.yaml (or --source-dir)",
                "One streamed Parquet table per source (images, boxes, splits) under paths.sources; "
                "`build` reads them.",
                ["aegisbench sources", "aegisbench sources --only synthetic_sar",
                 "aegisbench sources --source-dir /data/HERIDAL --source-format voc --source heridal"])
    _common(p)
    p.add_argument("--only", action="append", metavar="SOURCE", help="only this source (repeatable)")
    source_args(p)
    p.set_defaults(func=cmd_sources)

    p = command(sub, "build", "build the checksummed HF dataset repo from the source tables",
                "Writes every condition (clean and each corruption x severity) as Parquet shards with a "
                "manifest of SHA-256 digests and a dataset card; resumable and atomic. Sources missing "
                "from paths.sources are materialized first.",
                ["aegisbench build", "aegisbench build --skip-sources --workers 4",
                 "aegisbench build --source-dir /data/HERIDAL --source-format voc --source heridal "
                 "--class-map person=person"])
    _common(p)
    add_out_option(p, "output repo folder (default: paths.dataset of --params)")
    add_executor_options(p)
    p.add_argument("--skip-sources", action="store_true", help="reuse the existing source tables as they are")
    p.add_argument("--replace", action="store_true", help="build over a repo at --out that holds sources this build "
                   "leaves out (their splits are dropped; without it such a build is refused)")
    p.add_argument("--withhold-labels", metavar="SPLITS",
                   help="comma-separated splits built without boxes (e.g. the test split heridal); their labels go "
                        "to the private label repo --private-out (default: build.withhold_labels)")
    p.add_argument("--private-out", metavar="DIR",
                   help="the private label repo of the withheld splits (default: paths.private_labels); never "
                        "inside the public repo, never published")
    source_args(p)
    declare_io(p, reads={"source_dir": "--source-dir", "params": "--params"},
               writes={"out": "--out", "private_out": "--private-out"})
    p.set_defaults(func=cmd_build)

    p = command(sub, "verify", "re-hash a dataset repo against its manifest",
                "Re-hashes and re-decodes every file (shard contents, digest, card); exit 2 on any "
                "difference, one line each.",
                ["aegisbench verify", "aegisbench verify aegisbench"])
    p.add_argument("path", nargs="?", default=DATASET, help="dataset repo folder")
    add_dataset_option(p, "with a private label repo as PATH: the public repo it must belong to", default=None)
    p.add_argument("--expect", metavar="DIGEST", help="exit 2 unless the repo's dataset digest is DIGEST (64 hex; "
                   "e.g. the one released for its version, which verify names)")
    p.set_defaults(func=cmd_verify)

    _register_preview(sub)

    p = command(sub, "publish", "upload a verified dataset repo to the Hugging Face Hub",
                "Verifies the repo first, uploads it in one commit with a card naming the Hub id, then "
                "tags that revision v<benchmark_version> (pin it with load_dataset(..., revision=...)); "
                "--dry-run lists every file with its size and SHA-256 and uploads nothing.",
                ["aegisbench publish --repo-id ORG/aegisbench --dry-run",
                 "aegisbench publish --repo-id ORG/aegisbench"])
    p.add_argument("--repo-id", required=True, help="Hub dataset repo, ORG/NAME")
    add_dataset_option(p, "dataset repo folder")
    p.add_argument("--dry-run", action="store_true", help="list exactly what would be uploaded, upload nothing")
    p.add_argument("--private", action="store_true", help="create the Hub repo as private")
    p.set_defaults(func=cmd_publish)


def _register_preview(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "preview", "contact-sheet PNG of every source; --grid: one frame under every "
                "corruption x severity",
                "Contact sheets <source>.png of a split; with --grid also <source>_grid.png, the "
                "same frame under every condition of the severity table.",
                ["aegisbench preview", "aegisbench preview --grid --cell 160",
                 "aegisbench preview --grid --source-table data/sources/heridal.parquet --image-id IMG "
                 "--table calibration/heridal.yaml"])
    _common(p)
    p.add_argument("--source-table", action="append", type=Path, metavar="TABLE",
                   help="preview this canonical source table instead of the sources of --params (repeatable)")
    add_dataset_option(p, "preview the sources of this dataset repo (default: paths.dataset when built there, "
                       "else the sources of --params)", default=None)
    add_out_option(p, "folder for the PNGs", default="data/preview")
    p.add_argument("--split", default="test", help="split of the contact sheets")
    p.add_argument("--grid", action="store_true",
                   help="also write <source>_grid.png: one frame under every corruption x severity")
    p.add_argument("--image-id", help="frame for --grid, from any split (default: the first of --split)")
    p.add_argument("--table", type=Path, help="severity table (YAML) for --grid (default: build.severity_table)")
    p.add_argument("--cell", type=int, default=200, help="tile size of --grid in px")
    declare_io(p, reads={"source_table": "--source-table", "dataset": "--dataset", "table": "--table",
                         "params": "--params"}, writes={"out": "--out"}, into=["out"])  # <name>.png files
    p.set_defaults(func=cmd_preview)


def _common(p: argparse.ArgumentParser) -> None:
    add_params_option(p)


def executor_of(args, default_workers: int = 1, paths=()):
    """The executor of ``--executor/--workers/--ray-address``, ready to run (Ray joined or
    started; every node of a joined cluster sees ``paths``), so that a bad choice fails
    before anything is written."""
    from aegisbench.executor import Executor, connect
    ex = Executor.from_cli(args.executor, args.workers, args.ray_address, default_workers)
    connect(ex, paths)
    return ex


def _direct_params(args) -> Params:
    """Params for ``--source-dir``: those of ``--params`` (when the file exists) with one source,
    the folder; the fire-spread ensembles only if ``--tracks`` names firespread."""
    entry = source_entry(args)
    tracks = tracks_of(args) or (args.track,)
    if args.track not in tracks:
        raise BadInput(f"the --source-dir source is on track {args.track!r}, which it leaves out", where="--tracks")
    base = Params.load(args.params).raw if Path(args.params).exists() else {"benchmark_version": "0.1.0"}
    raw = {k: v for k, v in base.items() if k != "sources"}
    raw["sources"] = {args.name: entry}
    fs = {k: v for k, v in (base.get("firespread") or {}).items() if k != "enabled"}
    raw["firespread"] = fs if FIRESPREAD in tracks else None
    return Params.from_dict(raw)


def cmd_sources(args) -> int:
    from aegisbench.builders.sources import materialize_sources
    if args.source_dir:
        params = _direct_params(args)
        written = materialize_sources(params)
    else:
        params = Params.load(args.params).select_tracks(tracks_of(args))
        written = materialize_sources(params, only=args.only, where=args.params)
    for path in written:
        print(f"wrote {path}")
    return 0


def cmd_build(args) -> int:
    from aegisbench.builders.build import build_repo
    from aegisbench.builders.sources import materialize_sources
    params = _direct_params(args) if args.source_dir else Params.load(args.params).select_tracks(tracks_of(args))
    executor = executor_of(args, params.build.workers, (params.sources_dir, args.out or params.dataset_dir))
    if args.source_dir or not args.skip_sources:
        materialize_sources(params, missing_only=not args.source_dir)
    if args.withhold_labels is not None:
        splits = tuple(s.strip() for s in args.withhold_labels.split(",") if s.strip())
        params = dataclasses.replace(params, build=dataclasses.replace(params.build, withhold_labels=splits))
    manifest = build_repo(params, out=args.out, executor=executor, private_out=args.private_out,
                          replace=args.replace)
    out = args.out or params.dataset_dir
    print(f"built {out}  version {manifest['benchmark_version']}  digest {manifest['dataset_digest']}")
    if manifest.get("withheld_labels"):
        print(f"labels of {', '.join(manifest['withheld_labels'])} withheld in "
              f"{args.private_out or params.private_labels_dir} (private: never publish it)")
    return 0

def cmd_verify(args) -> int:
    import re

    from aegisbench.dataset.manifest import load_manifest
    from aegisbench.dataset.verify import verify_repo
    from aegisbench.dataset.labels import is_label_repo, load_labels, verify_labels
    from aegisbench.releases import release_note
    if args.expect is not None and not re.fullmatch(r"[0-9a-f]{64}", args.expect):
        raise BadInput(f"expected 64 lowercase hex digits, got {args.expect[:80]!r}", where="--expect")
    labels = is_label_repo(args.path)
    report = (verify_labels(args.path, load_manifest(args.dataset) if args.dataset else None) if labels
              else verify_repo(args.path))
    if not report.ok:
        for line in report.lines():
            print(f"{args.path}: {line}", file=sys.stderr)
        return 2
    if labels:
        m = load_labels(args.path)
        print(f"{args.path}: OK (private label repo of dataset {m['public_digest'][:12]}, labels digest "
              f"{m['labels_digest']})")
        return 0
    m = load_manifest(args.path)
    digest = m["dataset_digest"]
    if args.expect is not None and digest != args.expect:
        raise BadInput(f"the dataset digest is {digest}, not the expected {args.expect} (the files match "
                       "their own manifest: this is another build)", where=str(args.path))
    print(f"{args.path}: OK ({len(m['files'])} files, digest {digest}: {release_note(digest, m['benchmark_version'])})")
    return 0


def cmd_preview(args) -> int:
    from aegisbench.builders.preview import preview_tables, source_modalities, write_previews
    from aegisbench.corruptions.calibrate import load_table

    params = Params.load(args.params) if not args.source_table or Path(args.params).exists() else None
    if args.source_table:
        tables = {t.stem: t for t in args.source_table}
    else:
        tables = preview_tables(params, args.dataset)
    version = params.benchmark_version if params else aegisbench.__version__
    table = None  # the grid shows the table the build uses, unless --table names another one
    if args.grid and args.table:
        table = load_table(args.table)
    elif args.grid and params and params.build.severity_table:
        table = load_table(params.build.severity_table, expected_version=version)
    for path in write_previews(tables, args.out, version=version, split=args.split, grid=args.grid,
                               image_id=args.image_id, geometry=params.build.geometry if params else "frame",
                               table=table, cell=args.cell, modalities=source_modalities(params, args.dataset)):
        print(f"wrote {path}")
    return 0


def cmd_publish(args) -> int:
    from aegisbench.dataset.publish import publish

    plan = publish(args.repo_id, args.dataset, dry_run=args.dry_run, private=args.private)
    total = sum(i.bytes for i in plan)
    if args.dry_run:
        for item in plan:
            print(f"{item.path}\t{item.bytes}\t{item.sha256}")
        print(f"dry run: {len(plan)} files, {total} bytes would be uploaded to "
              f"https://huggingface.co/datasets/{args.repo_id}")
    else:
        from aegisbench.dataset.manifest import load_manifest
        from aegisbench.dataset.publish import release_tag
        tag = release_tag(load_manifest(args.dataset))
        print(f"published {len(plan)} files ({total} bytes) to https://huggingface.co/datasets/{args.repo_id}, "
              f"tagged {tag}: load_dataset({args.repo_id!r}, CONFIG, revision={tag!r})")
    return 0
