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

import io
import json
import logging
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from aegisbench.atomic import recover_dir
from aegisbench.fields import is_finite_number
from aegisbench.corruptions import corruption_families
from aegisbench.errors import BadInput
from aegisbench.metrics import REGISTRY
from aegisbench.vocab import CLEAN, TRACKS

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.parquet"
ATTACHMENTS = ("calibration.png",)  # optional evaluator figures carried to the model page
PROVENANCE_FILE = "provenance.json"
# Disaster family of every corruption, from the corruption registry (table order). Other
# conditions (fire-spread stochasticity, WARP levels) may name their own family.
FAMILY_OF = corruption_families()

# column -> (kind, nullable); kind is "str", "int" or "float".
METRICS_COLUMNS = {
    "submission": ("str", False), "track": ("str", False), "source": ("str", False),
    "config": ("str", False), "corruption": ("str", True), "family": ("str", True),
    "severity": ("int", False), "metric": ("str", False), "value": ("float", True),
    "lo": ("float", True), "hi": ("float", True), "n": ("int", True),
}
# optional cell columns: a frame ``t`` and a ``stratum``; the headline cell has t null and
# stratum null or "all" (the fire-spread evaluator adds per-frame and stratified rows); and
# ``note``, why a value is null ("0/0", "not physical for thermal"); tables written before
# it existed read as all-null
OPTIONAL_COLUMNS = {"t": ("int", True), "stratum": ("str", True), "note": ("str", True)}
PROVENANCE_STRINGS = ("submission", "name", "team", "model", "track", "dataset_version",
                      "dataset_digest", "evaluator_version")
_INTERRUPTED = re.compile(r"\.(.+)\.old-\d+")  # the old copy of a two-rename swap (aegisbench.atomic)
_POLARS = {"str": pl.String, "int": pl.Int64, "float": pl.Float64}


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


def _kind_ok(dtype: pl.DataType, kind: str, nullable: bool) -> bool:
    if dtype == pl.Null:
        return nullable
    if kind == "str":
        return dtype in (pl.String, pl.Categorical) or isinstance(dtype, pl.Enum)
    if kind == "int":
        return dtype.is_integer()
    return dtype.is_float() or dtype.is_integer()


def check_metrics(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """Check columns, types and row invariants; return the rows with canonical dtypes."""
    missing = [c for c in METRICS_COLUMNS if c not in df.columns]
    if missing:
        raise BadInput(f"missing column(s) {missing}", where=where)
    for col, (kind, nullable) in METRICS_COLUMNS.items():
        if not _kind_ok(df.schema[col], kind, nullable):
            raise BadInput(f"column {col!r} has type {df.schema[col]}, expected {kind}", where=where)
        if not nullable and df[col].null_count():
            raise BadInput(f"column {col!r} has null values", where=where)
    for col, (kind, nullable) in OPTIONAL_COLUMNS.items():
        if col not in df.columns:
            df = df.with_columns(pl.lit(None, dtype=_POLARS[kind]).alias(col))
        elif not _kind_ok(df.schema[col], kind, nullable):
            raise BadInput(f"column {col!r} has type {df.schema[col]}, expected {kind}", where=where)
    if df.height == 0:
        raise BadInput("no rows", where=where)
    columns = {**METRICS_COLUMNS, **OPTIONAL_COLUMNS}
    out = df.select([pl.col(c).cast(_POLARS[k]) for c, (k, _) in columns.items()])
    out = out.with_columns([pl.col(c).fill_nan(None) for c in ("value", "lo", "hi")])
    out = out.with_columns(pl.when(pl.col("value").is_null()).then(pl.col("note")).otherwise(None).alias("note"))
    rows = out.with_row_index("_row")
    bad = rows.filter(pl.col("lo").is_null() != pl.col("hi").is_null())
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: lo and hi must both be set or both be null", where=where)
    bad = rows.filter(pl.col("lo") > pl.col("hi"))
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: lo > hi", where=where)
    bad = rows.filter(pl.col("severity") < 0)
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: negative severity", where=where)
    bad = rows.filter((pl.col("config") == CLEAN)
                      & (pl.col("corruption").is_not_null() | (pl.col("severity") != 0)))
    if bad.height:
        raise BadInput(f"row {bad['_row'][0]}: config 'clean' needs corruption null and severity 0",
                       where=where)
    for row in rows.select("_row", "corruption", "family", "severity").iter_rows(named=True):
        corr, fam = row["corruption"], row["family"]
        if corr in FAMILY_OF and fam != FAMILY_OF[corr]:
            raise BadInput(f"row {row['_row']}: corruption {corr!r} belongs to family "
                           f"{FAMILY_OF[corr]!r}, not {fam!r}", where=where)
        if corr is None and fam is not None:
            raise BadInput(f"row {row['_row']}: family without corruption", where=where)
    keys = ["source", "config", "metric", "stratum", "t"]
    dup = out.group_by(keys).len().filter(pl.col("len") > 1)
    if dup.height:
        first = dup.sort(keys).row(0, named=True)
        extra = "".join(f" {k}={first[k]!r}" for k in ("stratum", "t") if first[k] is not None)
        raise BadInput(f"duplicate rows for source={first['source']!r} config={first['config']!r} "
                       f"metric={first['metric']!r}{extra}", where=where)
    return out


def _check_threshold(value, where: str) -> None:
    if value is None:
        return
    if not is_finite_number(value):
        raise BadInput(f"frozen_threshold must be a number or null, got {value!r}", where=where)


def check_provenance(obj, where: str) -> dict:
    """Check the required provenance fields; the rest is kept as given."""
    if not isinstance(obj, dict):
        raise BadInput("provenance must be a JSON object", where=where)
    for key in (*PROVENANCE_STRINGS, "frozen_threshold"):
        if key not in obj:
            raise BadInput(f"missing field {key!r}", where=where)
    for key in PROVENANCE_STRINGS:
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise BadInput(f"field {key!r} must be a non-empty string", where=where)
    if obj["track"] not in TRACKS:
        raise BadInput(f"unknown track {obj['track']!r} (expected one of {list(TRACKS)})", where=where)
    thr = obj["frozen_threshold"]
    if isinstance(thr, dict):  # one threshold per source dataset
        for src, val in thr.items():
            _check_threshold(val, f"{where}: frozen_threshold.{src}")
    else:
        _check_threshold(thr, where)
    return obj


class UnreadableResult(BadInput):
    """A results folder that exists but cannot be read (I/O error, broken link, a swap
    that never settles): the leaderboard stops instead of leaving it out."""


def _read_at(dfd: int, name: str, folder: Path) -> bytes | None:
    """The bytes of regular file ``name`` in the open folder ``dfd`` (None: absent)."""
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnreadableResult(f"cannot open {name} ({exc.strerror})", where=str(folder)) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        try:
            return fh.read()
        except OSError as exc:
            raise UnreadableResult(f"cannot read {name} ({exc.strerror})", where=str(folder)) from None


def snapshot(folder: str | Path, names) -> dict[str, bytes | None]:
    """The bytes of ``names`` in ``folder`` (None: absent), all of one published version:
    read through one folder handle, again when the folder was swapped meanwhile."""
    folder = Path(folder)
    for attempt in range(20):
        try:
            dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            data, dfd = None, None
        except OSError as exc:
            raise UnreadableResult(f"cannot open the folder ({exc.strerror})", where=str(folder)) from None
        if dfd is not None:
            try:
                data = {name: _read_at(dfd, name, folder) for name in names}
                same = os.path.samestat(os.fstat(dfd), os.stat(folder))
            except FileNotFoundError:
                same = False
            finally:
                os.close(dfd)
            if same:
                return data
        time.sleep(0.05 * (attempt + 1))
    raise UnreadableResult("kept changing or vanished while being read (a writer is publishing it?)",
                           where=str(folder))


def read_entry(folder: str | Path) -> ResultEntry:
    """Read and check one results folder (all files from one published version of it);
    raise BadInput if it is malformed, :class:`UnreadableResult` if it cannot be read."""
    folder = Path(folder)
    mpath, ppath = folder / METRICS_FILE, folder / PROVENANCE_FILE
    files = snapshot(folder, (METRICS_FILE, PROVENANCE_FILE, *ATTACHMENTS))
    for path in (mpath, ppath):
        if files[path.name] is None:
            raise BadInput(f"missing {path.name}", where=str(folder))
    try:
        prov = json.loads(files[PROVENANCE_FILE].decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"unreadable JSON ({exc})", where=str(ppath)) from None
    prov = check_provenance(prov, str(ppath))
    try:
        df = pl.read_parquet(io.BytesIO(files[METRICS_FILE]))
    except Exception as exc:  # any reader failure means the file is not usable Parquet
        raise BadInput(f"unreadable Parquet ({type(exc).__name__}: {exc})", where=str(mpath)) from None
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
    return entries, skipped


def _relative_reason(exc: BadInput, folder: Path) -> str:
    """The error message with its location made relative to the results folder."""
    where = exc.where or ""
    if where.startswith(str(folder)):
        where = where[len(str(folder)):].lstrip("/")
    return f"{where}: {exc.message}" if where else exc.message


def current_dataset_digest(dataset_dir: str | Path) -> str:
    """The ``dataset_digest`` of the dataset repo's manifest.json."""
    path = Path(dataset_dir) / "manifest.json"
    if not path.is_file():
        raise BadInput("no manifest.json: cannot tell current results from stale ones",
                       where=str(dataset_dir))
    try:
        digest = json.loads(path.read_text(encoding="utf-8")).get("dataset_digest")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise BadInput(f"malformed manifest ({exc})", where=str(path)) from None
    if not isinstance(digest, str) or not digest:
        raise BadInput("manifest has no dataset_digest", where=str(path))
    return digest


def test_images(dataset_dir: str | Path) -> dict[str, int]:
    """Clean test images per detection source of the dataset repo (its manifest's ``clean``
    config; ``<source>_val`` splits left out); empty when the manifest declares no configs."""
    path = Path(dataset_dir) / "manifest.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        splits = doc["configs"][CLEAN]["splits"]
        return {name: int(info["rows"]) for name, info in sorted(splits.items()) if not name.endswith("_val")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def current_evaluator_version() -> str:
    """The evaluator's version string (``aegisbench.evaluation.EVALUATOR_VERSION`` if defined)."""
    import aegisbench
    import aegisbench.evaluation as evaluation

    return str(getattr(evaluation, "EVALUATOR_VERSION", aegisbench.__version__))
