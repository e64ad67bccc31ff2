"""Reading and checking ``results/<id>/`` folders written by the evaluator.

A results folder holds ``metrics.parquet`` (long format, one row per source x
config x metric) and ``provenance.json``. A folder is *malformed* when either file
is missing or unreadable, a column is missing or has the wrong type, or the rows
contradict the provenance; it is *stale* when it was scored on another dataset
digest or by another evaluator version. Both are reported and skipped, never merged.
A folder that cannot be read at all (an I/O error, a broken link, absent after an
interrupted publication that cannot be put back) stops the leaderboard
(:class:`UnreadableResult`): a result is never silently left out. Each folder's files
are read from one published version of it, even while a writer swaps in a new one.

>>> Expectation(dataset_digest="ab" * 32, evaluator_version="0.1.0").evaluator_version
'0.1.0'
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from aegisbench.atomic import recover_dir
from aegisbench.dataset.manifest import MANIFEST, load_manifest
from aegisbench.errors import BadInput, printable
from aegisbench.leaderboard.result_files import (  # noqa: F401 - read here and re-exported
    ATTACHMENTS,
    FAMILY_OF,
    METRICS_COLUMNS,
    METRICS_FILE,
    OPTIONAL_COLUMNS,
    PROVENANCE_FILE,
    PROVENANCE_STRINGS,
    STRATA_COLUMNS,
    UnreadableResult,
    _read_metrics,
    check_metrics,
    check_provenance,
    check_strata,
    snapshot,
)
from aegisbench.metrics import REGISTRY
from aegisbench.readers import (
    load_json,
)
from aegisbench.vocab import (
    CLEAN,
    FAMILIES,
    STRATA_FILE,
)

log = logging.getLogger(__name__)

_INTERRUPTED = re.compile(r"\.(.+)\.old-\d+")  # the old copy of a two-rename swap (aegisbench.atomic)



@dataclass(frozen=True)
class Expectation:
    """What current results must have been scored against."""

    dataset_digest: str
    evaluator_version: str

    def __post_init__(self):
        for name in ("dataset_digest", "evaluator_version"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string")


@dataclass(frozen=True)
class ResultEntry:
    """One checked results folder: its provenance and its metrics rows."""

    folder: str
    provenance: Mapping
    metrics: pl.DataFrame
    attachments: Mapping = field(default_factory=dict)  # file name -> bytes, shown on the model page
    path: Path | None = field(default=None, compare=False)  # the folder it was read from


@dataclass(frozen=True)
class Skipped:
    """A results folder left out of the leaderboard, and why."""

    folder: str
    problem: str  # "malformed" or "stale"
    reason: str

    def __post_init__(self):
        if self.problem not in ("malformed", "stale"):
            raise ValueError(f"unknown problem {self.problem!r}")


def read_entry(folder: str | Path) -> ResultEntry:
    """Read and check one results folder (all files from one published version of it);
    raise BadInput if it is malformed, :class:`UnreadableResult` if it cannot be read."""
    folder = Path(folder)
    mpath, ppath = folder / METRICS_FILE, folder / PROVENANCE_FILE
    files = snapshot(folder, (METRICS_FILE, PROVENANCE_FILE, STRATA_FILE, *ATTACHMENTS))
    for path in (mpath, ppath):
        if files[path.name] is None:
            raise BadInput(f"missing {path.name}", where=str(folder))
    try:
        text = files[PROVENANCE_FILE].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"unreadable JSON ({exc})", where=str(ppath)) from None
    try:  # nesting and integer length bounded
        prov = load_json(text, str(ppath))
    except BadInput as exc:
        raise BadInput(f"unreadable JSON ({exc.message})", where=str(ppath)) from None
    prov = check_provenance(prov, str(ppath))
    df = _read_metrics(files[METRICS_FILE], str(mpath))
    df = check_metrics(df, str(mpath))
    unknown = REGISTRY.unregistered(df["metric"].unique().to_list())
    if unknown:
        log.warning("%s: metric(s) %s are not registered in aegisbench.metrics: shown without direction or label",
                    folder.name, unknown)
    if prov["submission"] != folder.name:
        raise BadInput(f"provenance submission {prov['submission']!r} does not match the folder name",
                       where=str(ppath))
    for col in ("submission", "track"):
        other = sorted(set(df[col].to_list()) - {prov[col]})
        if other:
            raise BadInput(f"column {col!r} has {other[0]!r}, provenance says {prov[col]!r}",
                           where=str(mpath))
    if files[STRATA_FILE] is not None:  # fire spread's pooled strata, read by the report: checked here
        check_strata(_read_metrics(files[STRATA_FILE], str(folder / STRATA_FILE)), str(folder / STRATA_FILE))
    attachments = {name: files[name] for name in ATTACHMENTS if files[name] is not None}
    return ResultEntry(folder=folder.name, provenance=prov, metrics=df, attachments=attachments, path=folder)


def staleness(entry: ResultEntry, expect: Expectation) -> str | None:
    """Why ``entry`` is stale against ``expect``, or None if it is current."""
    prov = entry.provenance
    if prov.get("status") == "published":
        return None  # numbers from a paper: never scored here, so never stale here
    if prov["dataset_digest"] != expect.dataset_digest:
        return (f"dataset digest {prov['dataset_digest'][:12]} differs from the current "
                f"{expect.dataset_digest[:12]}")
    if prov["evaluator_version"] != expect.evaluator_version:
        return (f"evaluator version {prov['evaluator_version']} differs from the current "
                f"{expect.evaluator_version}")
    return None


def result_folders(root: Path) -> list[Path]:
    """The results folders under ``root`` (sorted). A folder absent after an interrupted
    publication is put back first; one a live writer is swapping, or a broken link, is an
    error: a result is never left out because it is missing."""
    for name in sorted(os.listdir(root)):
        interrupted = _INTERRUPTED.fullmatch(name)
        folder = root / interrupted.group(1) if interrupted else None
        if folder is not None and not os.path.lexists(folder) and not recover_dir(folder):
            raise UnreadableResult(f"absent after an interrupted publication; its last version is in {name}",
                                   where=str(folder))  # (recover_dir: BadInput naming a live writer's PID)
    folders = []
    for p in sorted(root.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_symlink() and not p.exists():
            raise UnreadableResult("broken link: the results folder it names does not exist", where=str(p))
        if p.is_dir():
            folders.append(p)
    return folders


def collect_results(results_dir: str | Path | None, expect: Expectation, extra: Sequence[str | Path] = ()
                    ) -> tuple[list[ResultEntry], list[Skipped]]:
    """Every current, well-formed results folder under ``results_dir`` (None: none), and the
    ``extra`` results folders named one by one (a hosted leaderboard's), plus the ones skipped
    (sorted by name; a name merged twice is skipped the second time); an unreadable or missing
    one raises :class:`UnreadableResult` (never left out)."""
    folders = []
    if results_dir is not None:
        root = Path(results_dir)
        if not root.is_dir():
            raise BadInput("results folder not found", where=str(root))
        folders = [(p.name, 0, p) for p in result_folders(root)]
    for path in map(Path, extra):
        if not path.is_dir():
            raise UnreadableResult("results folder not found", where=str(path))
        folders.append((path.name, 1, path))
    entries, skipped, seen = [], [], set()
    for _, _, folder in sorted(folders):
        if folder.name in seen:
            skipped.append(Skipped(folder.name, "malformed", f"a results folder named {folder.name!r} is merged "
                                                             f"already; the one in {folder.parent.name}/ is left out"))
            log.warning("skipping %s: a results folder of that name is merged already", folder)
            continue
        seen.add(folder.name)
        try:
            entry = read_entry(folder)
        except UnreadableResult:
            raise
        except BadInput as exc:
            reason = _relative_reason(exc, folder)
            skipped.append(Skipped(folder.name, "malformed", reason))
            log.warning("skipping malformed results %s: %s", folder.name, reason)
            continue
        why = staleness(entry, expect)
        if why:
            skipped.append(Skipped(folder.name, "stale", why))
            log.warning("skipping stale results %s: %s", folder.name, why)
        else:
            entries.append(entry)
    disagree = disagreeing_conditions(entries)
    for folder, reason in sorted(disagree.items()):
        skipped.append(Skipped(folder, "malformed", reason))
        log.warning("skipping malformed results %s: %s", folder, reason)
    return [e for e in entries if e.folder not in disagree], skipped


def disagreeing_conditions(entries: Sequence[ResultEntry]) -> dict[str, str]:
    """``folder -> reason`` for the results that place a condition (track, source, config)
    elsewhere than the other results do (another corruption, severity or known family): the
    leaderboard lines conditions up by name, so one folder's stray severity must not move
    everyone's row. The place most folders give stands (on a tie, the first folder's by name)."""
    said: dict[tuple, dict[tuple, list[str]]] = {}
    for e in sorted(entries, key=lambda e: e.folder):
        for src, cfg, corr, fam, sev in (e.metrics.select("source", "config", "corruption", "family", "severity")
                                         .unique().sort("source", "config").iter_rows()):
            place = (corr, fam if fam in FAMILIES else None, sev)  # (an unknown family sorts as any other)
            said.setdefault((e.provenance["track"], src, cfg), {}).setdefault(place, []).append(e.folder)
    out: dict[str, str] = {}
    for (track, src, cfg), by in sorted(said.items()):
        if len(by) < 2:
            continue
        best = min(by, key=lambda a: (-len(by[a]), by[a][0]))
        for place, folders in by.items():
            for folder in folders:
                if place != best and folder not in out:
                    out[folder] = (f"metrics.parquet: config {cfg!r} of {track}/{src} is corruption {place[0]!r}, family "
                                   f"{place[1]!r}, severity {place[2]} here; {len(by[best])} other result(s) say "
                                   f"{best[0]!r}, {best[1]!r}, {best[2]}")
    return out


def _relative_reason(exc: BadInput, folder: Path) -> str:
    """The error message with its location made relative to the results folder, one escaped
    line (a reader's message may span lines)."""
    where = exc.where or ""
    if where.startswith(str(folder)):
        where = where[len(str(folder)):].lstrip("/")
    return printable(f"{where}: {exc.message}" if where else exc.message)


def current_dataset_digest(dataset_dir: str | Path) -> str:
    """The ``dataset_digest`` of the dataset repo's manifest (read by the one manifest reader,
    :func:`aegisbench.dataset.manifest.load_manifest`)."""
    if not (Path(dataset_dir) / MANIFEST).is_file():
        raise BadInput("no manifest.json: cannot tell current results from stale ones",
                       where=str(dataset_dir))
    return load_manifest(dataset_dir)["dataset_digest"]


def test_images(dataset_dir: str | Path) -> dict[str, int]:
    """Clean test images per detection source of the dataset repo (its manifest's ``clean``
    config; ``<source>_val`` splits left out); empty when there is no readable manifest or it
    declares no clean config."""
    try:
        splits = load_manifest(dataset_dir)["configs"].get(CLEAN, {}).get("splits", {})
    except BadInput:
        return {}
    return {name: int(info["rows"]) for name, info in sorted(splits.items()) if not name.endswith("_val")}


def current_evaluator_version() -> str:
    """The evaluator's version string (``aegisbench.evaluation.EVALUATOR_VERSION`` if defined)."""
    import aegisbench
    import aegisbench.evaluation as evaluation

    return str(getattr(evaluation, "EVALUATOR_VERSION", aegisbench.__version__))
