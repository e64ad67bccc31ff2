"""Build orchestration: canonical source tables -> dataset repo (the ``build`` stage).

``build_repo`` turns the source tables that :mod:`aegisbench.builders.sources` wrote into
the HF dataset repo: it asks every config family for its plan (:func:`~aegisbench.builders.
families.plan_build`: shard tasks, metas, descriptions, sources), runs the tasks (skipping shards
an interrupted run already finished), then writes the card and manifest through the contract
(:mod:`aegisbench.dataset`) and swaps the completed staging folder into place. Nothing partial
is ever visible at the output path.

The code that decides the bytes of a build is the import closure of this module
(:func:`aegisbench.dataset.builder_code.build_code`); the manifest's ``builder_source_hash``
hashes exactly those files and dvc.yaml's ``build`` stage depends on exactly those.

>>> from aegisbench.dataset.builder_code import build_code
>>> "aegisbench/builders/firespread.py" in build_code(), "aegisbench/builders/sources.py" in build_code()
(True, False)
"""

from __future__ import annotations

import json
import logging
import shutil
from importlib.metadata import version as pkg_version
from pathlib import Path

import aegisbench
from aegisbench import isa
from aegisbench.atomic import atomic_write_text, clean_leftovers, output_lock, replace_dir
from aegisbench.builders.families import FamilyPlan, plan_build
from aegisbench.builders.hfrepo import ShardEntry, finished_entry
from aegisbench.builders.withhold import check_withhold, strip_labels, write_label_repo
from aegisbench.dataset.builder_code import builder_source_hash
from aegisbench.dataset.card import arrow_sizes, render_card
from aegisbench.dataset.manifest import MANIFEST, MANIFEST_FORMAT, dataset_digest, load_manifest, rows_sha256
from aegisbench.dataset.verify import verify_repo
from aegisbench.errors import BadInput
from aegisbench.executor import Executor, map_tasks
from aegisbench.hashing import file_sha256, json_sha256
from aegisbench.memory import release_arrow_memory
from aegisbench.overlap import refuse_overlap
from aegisbench.params import Params
from aegisbench.progress import progress as progress_bar
from aegisbench.staging import drop_partial_writes

log = logging.getLogger(__name__)

def plan_tasks(params: Params, sources_dir: Path) -> list:
    """Every shard of the build, family by family (:func:`plan_build`)."""
    return plan_build(params, Path(sources_dir)).tasks


def staging_dir(out: Path, params: Params, tasks: list, src_hash: str) -> Path:
    """Hidden sibling of ``out`` keyed by everything that decides the bytes, so a rerun
    of the same build resumes there and a different build never reuses its shards."""
    tables = sorted({path for t in tasks for path in t.inputs})
    key = json_sha256({"params": params.digest(), "code": src_hash,
                       "tables": {Path(t).name: file_sha256(t) for t in tables}})
    return out.parent / f".{out.name}.staging-{key[:16]}"


def _run_task(args) -> ShardEntry:
    task, root, transform = args
    done = finished_entry(task, root)
    if done is not None:
        return done
    try:
        return task.run(root, transform)
    finally:
        release_arrow_memory()  # each shard starts from the same resident set: the peak stays flat


def check_kept_sources(out: Path, plan: FamilyPlan) -> None:
    """Refuse to build over a repo that holds sources this build leaves out: their splits
    would be dropped without a word (``build --source-dir B --source b`` over a repo of ``a``)."""
    if not (out / MANIFEST).is_file():
        return  # no repo there
    try:
        held = load_manifest(out).get("sources", {})
    except BadInput:
        return  # not a repo this builder wrote: verify says so
    dropped = sorted(set(held) - set(plan.manifest_sources))
    if dropped:
        raise BadInput(f"already holds source(s) {', '.join(dropped)} that this build leaves out; building would "
                       "drop their splits: build every source together (params.yaml sources), give another --out, "
                       "or pass --replace", where=str(out))


def _resumed_staging(out: Path, staging: Path) -> Path:
    """``staging`` (the build's resumable staging folder) ready: other builds' staging of
    ``out`` removed, half-written files of a killed run dropped, finished shards kept."""
    for stale in out.parent.glob(f".{out.name}.staging-*"):
        if stale != staging:
            shutil.rmtree(stale, ignore_errors=True)
    staging.mkdir(parents=True, exist_ok=True)
    drop_partial_writes(staging)
    return staging


def _run_shards(jobs: list, executor: Executor, progress: bool) -> list:
    """The shard entries of ``jobs``, in task order, each written as it finishes."""
    bar = progress_bar(len(jobs), "build shards", unit="shard", enabled=progress)
    entries = []
    for e in map_tasks(_run_task, jobs, executor):
        entries.append(e)
        bar.update()
    bar.close()
    return entries


def build_repo(params: Params, out: str | Path | None = None, sources_dir: str | Path | None = None,
               workers: int | None = None, progress: bool = True, executor: Executor | None = None,
               private_out: str | Path | None = None, replace: bool = False) -> dict:
    """Build the dataset repo and return its manifest. Shards run on ``executor``
    (default: local, ``workers`` or ``build.workers`` processes); the bytes do not
    depend on which executor or how many workers ran them. The splits of
    ``build.withhold_labels`` are published without boxes, their labels written to the private
    label repo ``private_out`` (default ``paths.private_labels``; :mod:`~aegisbench.builders.withhold`).
    A repo at ``out`` holding sources this build leaves out is refused unless ``replace``
    (:func:`check_kept_sources`): adding a source is building them together."""
    isa.require("the dataset repo")
    out = Path(out or params.dataset_dir).absolute()  # absolute: tasks may run on other nodes (same shared path)
    with output_lock(out):  # one build of ``out`` at a time; what killed builds left goes first
        clean_leftovers(out)
        sources_dir = Path(sources_dir or params.sources_dir).absolute()
        refuse_overlap({"--out": out}, {"the source tables": sources_dir})
        plan = plan_build(params, sources_dir)
        if not replace:
            check_kept_sources(out, plan)
        tasks = plan.tasks
        withheld = check_withhold(params.build.withhold_labels, {t.split for t in tasks if t.labels},
                                  private_out or params.private_labels_dir, out)
        src_hash = builder_source_hash()
        staging = _resumed_staging(out, staging_dir(out, params, tasks, src_hash))
        jobs = [(t, staging, plan.transforms.get(t.config)) for t in tasks]
        entries = _run_shards(jobs, executor or Executor("local", workers or params.build.workers), progress)
        drop_partial_writes(staging)  # a worker killed mid-write and retried leaves its temp file behind
        full_digest, labels = None, {}
        if withheld:  # the digest the repo would have with its labels, then the labels out of its shards
            full_digest = assemble_manifest(params, plan, entries, src_hash)["dataset_digest"]
            entries, labels = strip_labels(staging, tasks, entries, withheld)
        manifest = assemble_manifest(params, plan, entries, src_hash, withheld)
        shutil.rmtree(staging / ".shards", ignore_errors=True)
        card = render_card(manifest, plan.descriptions, plan.sources, arrow_sizes(staging, manifest))
        atomic_write_text(staging / "README.md", card)
        manifest["files"]["README.md"] = {"sha256": file_sha256(staging / "README.md"),
                                          "bytes": (staging / "README.md").stat().st_size}
        atomic_write_text(staging / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        report = verify_repo(staging, cache=True)  # records what it decoded: the first evaluate skips it
        if not report.ok:  # pragma: no cover - would be a bug in the writer
            raise RuntimeError("freshly built repo fails verify: " + "; ".join(report.lines()))
        if withheld:  # the labels are safe before the public repo (without them) is published
            write_label_repo(private_out or params.private_labels_dir, labels, params.benchmark_version,
                             manifest["dataset_digest"], full_digest)
        replace_dir(staging, out)
        log.info("built %s: %d configs, %d shards, digest %s%s", out, len(manifest["configs"]),
                 len(tasks), manifest["dataset_digest"],
                 f"; labels of {', '.join(withheld)} withheld in {private_out or params.private_labels_dir}"
                 if withheld else "")
        return manifest


def assemble_manifest(params: Params, plan: FamilyPlan, entries: list[ShardEntry], src_hash: str,
                      withheld: tuple[str, ...] = ()) -> dict:
    """The manifest of the shards ``entries`` of ``plan.tasks``; the cells a family skipped
    (``plan.not_physical``) are recorded per config as ``not_physical: {source: modality}`` (a
    config every source skips is kept with no splits, so its meta stays known); ``withheld``: the
    splits whose labels are withheld (``withheld_labels``)."""
    tasks, metas, skipped = plan.tasks, plan.metas, plan.not_physical
    configs: dict = {}
    files: dict = {}
    row_hashes: dict[tuple[str, str], list[str]] = {}
    for task, e in zip(tasks, entries):
        split = configs.setdefault(task.config, {"splits": {}, "meta": metas[task.config]})["splits"].setdefault(
            task.split, {"rows": 0, "source": task.source, "role": task.source_split, "shards": []})
        split["rows"] += e.rows
        split["shards"].append({"path": e.path, "sha256": e.sha256, "bytes": e.bytes, "rows": e.rows,
                                "content_sha256": e.content_sha256, "images": e.images})
        row_hashes.setdefault((task.config, task.split), []).append(e.row_hashes)
        files[e.path] = {"sha256": e.sha256, "bytes": e.bytes}
    for (config, split), hashes in row_hashes.items():  # the split's rows, whatever its shards
        configs[config]["splits"][split]["content_sha256"] = rows_sha256("".join(hashes))
    for config, srcs in (skipped or {}).items():
        configs.setdefault(config, {"splits": {}, "meta": metas[config]})["not_physical"] = dict(sorted(srcs.items()))
    return {
        "format": MANIFEST_FORMAT,
        "benchmark_version": params.benchmark_version,
        "dataset_digest": dataset_digest(params.benchmark_version, configs),
        "package_version": aegisbench.__version__,
        "builder_source_hash": src_hash,
        "params_sha256": params.digest(),
        "libraries": {m: pkg_version(m) for m in ("numpy", "opencv-python-headless", "pyarrow")},
        "isa_profile": isa.profile(),  # the kernels the bytes came from (aegisbench.isa)
        "sources": dict(plan.manifest_sources),
        "configs": configs,
        "files": files,
        **({"withheld_labels": list(withheld)} if withheld else {}),
    }
