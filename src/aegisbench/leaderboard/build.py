"""``aegisbench leaderboard``: results/ -> leaderboard/ (Parquet, Markdown, static site).

The output folder is rebuilt in a staging sibling and swapped in whole, so a build is
idempotent and a reader never sees a half-written leaderboard; one build at a time holds
the lock of ``out`` (a second is refused, naming the first's PID) and clears what killed
builds left. Outputs carry no timestamps and are written in sorted order: the same results
give the same bytes.

Files written under ``out``: ``leaderboard.parquet`` (long format), ``views/*.parquet``
(family_summary, floor, relative_drop, ranks), ``skipped.json``, ``README.md``,
``CITATION.bib`` (the benchmark's and the sources' BibTeX, ``citations``) and
``site/`` (``index.html``, ``models/*.html``, ``plots/*.svg``); from the command, ``CHANGES.md``
(the cells that differ from the leaderboard it replaces, :mod:`~aegisbench.leaderboard.changes`).
Optionally, outside ``out``: the metrics JSON for ``dvc metrics show`` and the severity curves
(SVG images and their JSON data) for ``dvc plots show`` / ``dvc plots diff`` (see ``exports``). Submissions named as
references are listed first and marked everywhere. With fire-spread results, ``firespread/``
holds the fire-spread report (seed 003 Fig. 3 from the dataset's statistic, the F2R-vs-F2S
table by ``Var[Z_t]``) that the page also shows.

>>> import polars as pl
>>> parquet_bytes(pl.DataFrame({"a": [1.5]})) == parquet_bytes(pl.DataFrame({"a": [1.5]}))
True
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from aegisbench.atomic import atomic_write_bytes, atomic_write_text, clean_leftovers, output_lock

from aegisbench.staging import staged_dir
from aegisbench.errors import BadInput
from aegisbench.leaderboard.aggregate import Board, build_board
from aegisbench.leaderboard.changes_md import write_changes
from aegisbench.leaderboard.citations import write_citations
from aegisbench.leaderboard.exports import check_export_paths, write_metrics, write_plots
from aegisbench.leaderboard.markdown import render_markdown
from aegisbench.leaderboard.identity import bind_to_submissions, statuses
from aegisbench.leaderboard.results import (Expectation, Skipped, collect_results, current_dataset_digest,
                                            current_evaluator_version, test_images)
from aegisbench.leaderboard.seeds import read_seeds
from aegisbench.leaderboard.site import render_site
from aegisbench.overlap import refuse_overlap
from aegisbench.private import private_dir
from aegisbench.vocab import FIRESPREAD

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildReport:
    out: Path
    merged: tuple[str, ...]
    skipped: tuple[Skipped, ...]
    files: tuple[str, ...]
    references: tuple[str, ...] = ()  # reference submissions found among the merged results
    missing_references: tuple[str, ...] = ()  # --reference ids not among the merged results
    metrics: Path | None = None
    plots: tuple[str, ...] = ()  # file names written under the plots folder (SVG and JSON)


def parquet_bytes(df: pl.DataFrame) -> bytes:
    """Parquet bytes of ``df`` with fixed writer settings (deterministic)."""
    buf = io.BytesIO()
    df.write_parquet(buf, compression="zstd", compression_level=3, statistics=True)
    return buf.getvalue()


def write_board(board: Board, out: Path, firespread=None, preview: str | Path | None = None,
                calibration: str | Path | None = None) -> list[Path]:
    """Write every output of ``board`` under ``out`` (which must be empty or new);
    ``firespread``: a :class:`~aegisbench.leaderboard.firespread_report.FirespreadReport` or None;
    ``preview``: the preview stage's folder (the page's condition gallery) or None."""
    files = []
    if firespread is not None:
        for name, data in firespread.files().items():
            atomic_write_bytes(out / FIRESPREAD / name, data)
            files.append(out / FIRESPREAD / name)
    tables = {"leaderboard.parquet": board.long, "views/family_summary.parquet": board.families,
              "views/floor.parquet": board.floors, "views/relative_drop.parquet": board.drops,
              "views/ranks.parquet": board.ranks}
    for name, df in tables.items():
        atomic_write_bytes(out / name, parquet_bytes(df))
        files.append(out / name)
    skipped = [{"folder": s.folder, "problem": s.problem, "reason": s.reason} for s in board.skipped]
    atomic_write_text(out / "skipped.json", json.dumps(skipped, indent=1, sort_keys=True) + "\n")
    atomic_write_text(out / "README.md", render_markdown(board, firespread_report=firespread is not None))
    files += [out / "skipped.json", out / "README.md"]
    files += render_site(board, out / "site", firespread=firespread, preview=preview, calibration=calibration)
    return files


def _firespread_report(board: Board, results: dict[str, Path], dataset: str | Path):
    """The fire-spread report of the merged fire-spread results that carry pooled strata
    (``results``: each merged submission's folder), when the dataset holds the statistic
    (None otherwise); the dataset repo it reads must pass verify."""
    from aegisbench.dataset.manifest import load_manifest
    from aegisbench.dataset.verify import require_verified
    from aegisbench.leaderboard.firespread_report import STRATA_FILE, build_report
    from aegisbench.dataset.firespread_truth import STATISTIC_CONFIG
    subs = sorted(s for s, prov in board.provenance.items() if prov.get("track") == FIRESPREAD)
    if not subs:
        return None
    declared = load_manifest(dataset)  # the one manifest reader: checked, not yet verified
    if STATISTIC_CONFIG not in declared["configs"]:
        log.warning("fire-spread results but no %s in %s: no fire-spread report", STATISTIC_CONFIG, dataset)
        return None
    manifest = require_verified(dataset)  # the statistic is read from the shards: verified first
    with_strata = [s for s in subs if (results[s] / STRATA_FILE).is_file()]
    for s in sorted(set(subs) - set(with_strata)):
        log.warning("%s: no %s (evaluated before pooled strata existed): not in the F2R-vs-F2S table", s, STRATA_FILE)
    return build_report(dataset, {s: results[s] for s in with_strata}, with_strata, manifest=manifest)


def _references(references) -> tuple[str, ...]:
    refs = []
    for ref in references or ():
        if not isinstance(ref, str) or not ref.strip() or ref != ref.strip() or "/" in ref:
            raise BadInput(f"--reference must be a submission id (a results folder name), got {ref!r}")
        if ref not in refs:
            refs.append(ref)
    return tuple(refs)


def build_leaderboard(results: str | Path | None, dataset: str | Path, out: str | Path,
                      evaluator_version: str | None = None, references=(),
                      metrics: str | Path | None = None, plots: str | Path | None = None,
                      preview: str | Path | None = None, extra_results=(), submissions=(),
                      private: str | Path | None = None, calibration: str | Path | None = None,
                      changes: bool = False, seeds: str | Path | None = None) -> BuildReport:
    """Merge every current, well-formed results folder and publish ``out`` atomically.

    ``extra_results``: results folders merged beside those under ``results`` (None: only
    these; a hosted leaderboard names its folders one by one, :mod:`aegisbench.service.board`).
    ``submissions``: folders of stored submissions; when given, results whose files are not those
    of their stored submission are skipped (:func:`~aegisbench.leaderboard.identity.bind_to_submissions`).
    ``private``: the project whose ``private/`` attests the runs it made (default: the current
    folder; ``AEGISBENCH_PRIVATE``): a row is verified only with a matching attestation.

    ``references``: submission ids of the reference detector(s), listed first and marked;
    ids not among the merged results are logged and reported (not an error).
    ``metrics`` / ``plots``: also write the DVC metrics JSON / severity-curve folder.
    ``preview``: the ``preview`` stage's folder; its corruption grids become the page's
    condition gallery (one thumbnail per condition of the same frame); ``calibration``: the
    calibrate stage's report, whose measured ladders and verdicts the gallery shows.
    ``seeds``: the folder of the references' training-seed tables (``aegisbench reference-seeds``,
    :mod:`~aegisbench.leaderboard.seeds`): each reference row then says how many seeds it has.
    ``changes``: also write ``CHANGES.md``, the cells that differ from the leaderboard published in
    ``out`` before (:func:`~aegisbench.leaderboard.changes_md.write_changes`; the pipeline's stage;
    off for a hosted board, whose revisions are rebuilt byte for byte into an empty folder).
    """
    refs = _references(references)
    refuse_overlap({"--out": out}, {"--results": [results, *extra_results], "--dataset": dataset,
                                    "--submissions": list(submissions), "--preview": preview, "--private": private_dir(private),
                                    "--calibration": calibration, "--seeds": seeds})
    check_export_paths(results=results, dataset=dataset, out=out, metrics=metrics, plots=plots)
    out = Path(out)
    with output_lock(out):
        for path in (out, metrics, plots):
            if path is not None:
                clean_leftovers(path)
        return _build(results, dataset, out, evaluator_version, refs, metrics, plots, preview, extra_results,
                      submissions, private, calibration, changes, seeds)


def _build(results, dataset, out: Path, evaluator_version, refs, metrics, plots, preview=None,
           extra_results=(), submissions=(), private=None, calibration=None, changes=False, seeds=None) -> BuildReport:
    expect = Expectation(dataset_digest=current_dataset_digest(dataset),
                         evaluator_version=evaluator_version or current_evaluator_version())
    entries, skipped = collect_results(results, expect, extra_results)
    if submissions:
        entries, unbound = bind_to_submissions(entries, submissions)
        skipped += unbound
    board = build_board(entries, skipped, expect, references=refs, test_images=test_images(dataset),
                        statuses=statuses(entries, private))
    board = dataclasses.replace(board, seeds=read_seeds(seeds, board.references))
    missing = tuple(r for r in refs if r not in board.references)
    for ref in missing:
        log.warning("--reference %s: no merged results for this submission; nothing is marked as reference", ref)
    firespread = _firespread_report(board, {e.folder: e.path for e in entries}, dataset)
    with staged_dir(out) as staging:
        files = write_board(board, staging, firespread, preview, calibration)
        files.append(write_citations(dataset, staging, expect.dataset_digest))
        if changes:  # against the published folder, before the swap replaces it
            files.append(write_changes(out, board.long, staging))
    rel = tuple(sorted(p.relative_to(staging).as_posix() for p in files))
    log.info("leaderboard %s: %d results merged, %d skipped, %d files", out, len(entries), len(skipped), len(rel))
    metrics_path = write_metrics(board, metrics) if metrics is not None else None
    curves = tuple(p.name for p in write_plots(board, plots)) if plots is not None else ()
    return BuildReport(out=out, merged=tuple(sorted(e.folder for e in entries)),
                       skipped=board.skipped, files=rel, references=board.references,
                       missing_references=missing, metrics=metrics_path, plots=curves)
