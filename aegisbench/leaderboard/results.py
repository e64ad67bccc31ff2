"""Reading and checking ``results/<id>/`` folders written by the evaluator.

A results folder holds ``metrics.parquet`` (long format, one row per source x
config x metric) and ``provenance.json``. A folder is *malformed* when either file
is missing or unreadable, a column is missing or has the wrong type, or the rows
contradict the provenance; it is *stale* when it was scored on another dataset
digest or by another evaluator version. Both are reported and skipped, never merged.

>>> Expectation(dataset_digest="ab" * 32, evaluator_version="0.1.0").evaluator_version
'0.1.0'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

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


def read_entry(folder: str | Path) -> ResultEntry:
    """Read and check one results folder; raise BadInput if it is malformed."""
    folder = Path(folder)
    mpath, ppath = folder / METRICS_FILE, folder / PROVENANCE_FILE
    for path in (mpath, ppath):
        if not path.is_file():
            raise BadInput(f"missing {path.name}", where=str(folder))
    try:
        prov = json.loads(ppath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"unreadable JSON ({exc})", where=str(ppath)) from None
    prov = check_provenance(prov, str(ppath))
    try:
        df = pl.read_parquet(mpath)
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
    attachments = {name: (folder / name).read_bytes() for name in ATTACHMENTS if (folder / name).is_file()}
    return ResultEntry(folder=folder.name, provenance=prov, metrics=df, attachments=attachments)


def staleness(entry: ResultEntry, expect: Expectation) -> str | None:
    """Why ``entry`` is stale against ``expect``, or None if it is current."""
    prov = entry.provenance
    if prov["dataset_digest"] != expect.dataset_digest:
        return (f"dataset digest {prov['dataset_digest'][:12]} differs from the current "
                f"{expect.dataset_digest[:12]}")
    if prov["evaluator_version"] != expect.evaluator_version:
        return (f"evaluator version {prov['evaluator_version']} differs from the current "
                f"{expect.evaluator_version}")
    return None


def collect_results(results_dir: str | Path, expect: Expectation
                    ) -> tuple[list[ResultEntry], list[Skipped]]:
    """Every current, well-formed results folder, plus the ones skipped (sorted by name)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise BadInput("results folder not found", where=str(root))
    entries, skipped = [], []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            entry = read_entry(folder)
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


def current_evaluator_version() -> str:
    """The evaluator's version string (``aegisbench.evaluation.EVALUATOR_VERSION`` if defined)."""
    import aegisbench
    import aegisbench.evaluation as evaluation

    return str(getattr(evaluation, "EVALUATOR_VERSION", aegisbench.__version__))
