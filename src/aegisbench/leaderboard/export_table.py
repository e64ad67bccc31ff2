"""``aegisbench export``: the per-condition table with intervals, per model and source, as a
paper takes it: CSV, LaTeX (booktabs, :mod:`aegisbench.leaderboard.latex`) or JSON.

The rows are the headline cells (all frames pooled, no stratum) of a built leaderboard
(``leaderboard/leaderboard.parquet``) or of results folders (``results/<id>/`` as the
evaluator wrote them, one or a folder of them, all scored on one dataset by one evaluator
version). Every condition keeps its own row with its value and 95% interval ``[lo, hi]``;
a value that is not defined is empty (CSV) or null (JSON) with its reason in ``note``, never 0.
``--model`` (a model name or a submission id), ``--source`` and ``--metric`` keep only those.
CSV and JSON hold one record per row with :data:`COLUMNS`; floats are written as Python's
shortest round-trip repr. Same input, same bytes.

>>> csv_text([{c: None for c in COLUMNS} | {"model": "a,b", "value": 0.5, "n": 3}]).splitlines()[1]
',"a,b",,,,,,,,0.5,,,3,,,'
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.fields import did_you_mean
from aegisbench.leaderboard.aggregate import LONG_COLUMNS, condition_key, is_headline, long_table
from aegisbench.leaderboard.identity import statuses
from aegisbench.leaderboard.result_files import METRICS_FILE, _read_metrics
from aegisbench.leaderboard.results import read_entry, result_folders
from aegisbench.overlap import refuse_overlap
from aegisbench.readers import MAX_TEXT_BYTES, read_regular_bytes

log = logging.getLogger(__name__)
FORMATS = ("csv", "latex", "json")
SUFFIX = {"csv": ".csv", "latex": ".tex", "json": ".json"}
#: the columns of a CSV / JSON export, in order (``condition``: the config, ``clean`` or e.g. ``low_light_s3``)
COLUMNS = ("submission", "model", "status", "track", "source", "condition", "family", "severity", "metric",
           "value", "lo", "hi", "n", "note", "dataset_version", "evaluator_version")
#: the long-table columns an export reads, typed as in :data:`aegisbench.leaderboard.aggregate.LONG_COLUMNS`
REQUIRED = {c: LONG_COLUMNS[c] for c in ("submission", "model", "track", "source", "config", "metric", "value", "lo",
                                         "hi")}
OPTIONAL = {c: LONG_COLUMNS[c] for c in ("status", "corruption", "family", "severity", "n", "note", "dataset_version",
                                         "evaluator_version", "stratum", "t")}
LEADERBOARD_FILE = "leaderboard.parquet"


def read_leaderboard_file(path: str | Path, where: str, hint: str = "") -> pl.DataFrame:
    """The long table, unchecked, of a leaderboard folder or of its ``leaderboard.parquet`` (a
    bounded read of a regular file); BadInput naming ``where`` when it is absent (``hint`` ends
    that line) or not Parquet."""
    path = Path(path)
    file = path / LEADERBOARD_FILE if path.is_dir() else path
    if not file.exists():
        what = f"no {LEADERBOARD_FILE} in it" if path.is_dir() else "does not exist"
        raise BadInput(f"{what} (a leaderboard folder or its {LEADERBOARD_FILE}{hint})", where=where)
    return _read_metrics(read_regular_bytes(file, "leaderboard Parquet", MAX_TEXT_BYTES), where)


def read_leaderboard(path: str | Path) -> pl.DataFrame:
    """The long table of a built leaderboard: ``path`` is its folder or its ``leaderboard.parquet``."""
    where = f"--leaderboard {path}"
    return _checked(read_leaderboard_file(path, where, ": build one with aegisbench leaderboard"), where)


def read_results(path: str | Path, private: str | Path | None = None) -> pl.DataFrame:
    """The long table of the results folder ``path`` (one ``<id>/`` folder per submission, as
    ``evaluate`` writes them), each read and checked as the leaderboard reads it (a malformed one
    is an error naming its file). One submission's folder is refused: ``--results`` means the
    results folder everywhere; ``--model ID`` picks one submission."""
    path = Path(path)
    where = f"--results {path}"
    if not path.is_dir():
        raise BadInput("not a folder (the results folder, with one <id>/ folder per submission)", where=where)
    if (path / METRICS_FILE).exists():
        raise BadInput(f"is one submission's results, not the results folder: give --results {path.parent} "
                       f"--model {path.name}", where=where)
    folders = result_folders(path)
    if not folders:
        raise BadInput(f"no results folder in it (results/<id>/ with {METRICS_FILE}): no rows to export",
                       where=where)
    entries = [read_entry(f) for f in folders]
    scored = sorted({(e.provenance["dataset_digest"], e.provenance["evaluator_version"], e.folder) for e in entries})
    if len({s[:2] for s in scored}) > 1:
        (d1, v1, f1), (d2, v2, f2) = scored[0], next(s for s in scored if s[:2] != scored[0][:2])
        raise BadInput(f"{f1} was scored on dataset {d1[:12]} by evaluator {v1}, {f2} on dataset {d2[:12]} by "
                       f"evaluator {v2}: export them one at a time, or build the leaderboard", where=where)
    status = {k: v[0] for k, v in statuses(entries, private).items()}
    return _checked(long_table(entries, statuses=status), where)


def _checked(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """``df`` with the columns an export reads (optional ones added as nulls), NaN as null; BadInput
    naming the column when one is missing or of another type, or when there are no rows."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise BadInput(f"missing column(s) {missing}: not a leaderboard table", where=where)
    for col, dtype in {**REQUIRED, **OPTIONAL}.items():
        if col in df.columns and df.schema[col] != dtype and not (dtype.is_numeric() and df.schema[col].is_numeric()):
            raise BadInput(f"column {col!r} has type {df.schema[col]}, expected {dtype}", where=where)
    df = df.with_columns([pl.lit(None, dtype=t).alias(c) for c, t in OPTIONAL.items() if c not in df.columns])
    df = df.with_columns([pl.col(c).cast(t) for c, t in {**REQUIRED, **OPTIONAL}.items()])
    df = df.with_columns([pl.col(c).fill_nan(None) for c in ("value", "lo", "hi")])
    if df.height == 0:
        raise BadInput("no rows: nothing to export", where=where)
    return df


def _pick(df: pl.DataFrame, flag: str, wanted: Sequence[str], columns: Sequence[str]) -> pl.Expr:
    """True for the rows whose ``columns`` (any of them) hold one of ``wanted`` (all rows when none
    is wanted); BadInput naming ``flag`` and the closest value when one of ``wanted`` is in none."""
    if not wanted:
        return pl.lit(True)
    known = sorted({v for c in columns for v in df[c].drop_nulls().unique().to_list()})
    for w in wanted:
        if w not in known:
            shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
            raise BadInput(f"{w!r} is not in the table{did_you_mean(w, known)} (there: {shown})", where=flag)
    keep = pl.lit(False)
    for c in columns:
        keep = keep | pl.col(c).is_in(list(wanted))
    return keep


def export_rows(long: pl.DataFrame, models: Sequence[str] = (), sources: Sequence[str] = (),
                metrics: Sequence[str] = ()) -> list[dict]:
    """The headline rows of ``long`` kept by the filters, as records of :data:`COLUMNS` (plus
    ``_order``, the condition's rank, for the LaTeX tables), sorted by track, source,
    submission, condition and metric."""
    df = long.filter(is_headline())
    keep = pl.lit(True)
    for flag, wanted, columns in (("--model", models, ("model", "submission")), ("--source", sources, ("source",)),
                                  ("--metric", metrics, ("metric",))):
        keep = keep & _pick(df, flag, wanted, columns)
    df = df.filter(keep)
    if df.height == 0:
        asked = " ".join(f"{f} {' '.join(v)}" for f, v in (("--model", models), ("--source", sources),
                                                          ("--metric", metrics)) if v)
        raise BadInput("no row has all of them: nothing to export", where=asked or "the table")
    rows = []
    for r in df.iter_rows(named=True):
        rank = condition_key(r["config"], r["corruption"], r["family"], r["severity"] or 0)
        rows.append({**{c: r["config" if c == "condition" else c] for c in COLUMNS}, "_order": rank})
    return sorted(rows, key=lambda r: (r["track"], r["source"], r["submission"], r["_order"], r["condition"],
                                       r["metric"]))


def _cell(value) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def csv_text(rows: list[dict]) -> str:
    """The rows as CSV (header :data:`COLUMNS`, ``\\n`` line ends, empty for null)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([[_cell(r[c]) for c in COLUMNS] for r in rows])
    return buf.getvalue()


def json_text(rows: list[dict]) -> str:
    """The rows as a JSON list of records (keys in :data:`COLUMNS` order)."""
    return json.dumps([{c: r[c] for c in COLUMNS} for r in rows], indent=1, ensure_ascii=False,
                      allow_nan=False) + "\n"


def export_table(fmt: str, *, leaderboard: str | Path | None = None, results: str | Path | None = None,
                 models: Sequence[str] = (), sources: Sequence[str] = (), metrics: Sequence[str] = (),
                 private: str | Path | None = None) -> tuple[str, int]:
    """(text, rows) of the export of ``leaderboard`` (default ``leaderboard``) or ``results`` in
    ``fmt`` (:data:`FORMATS`). LaTeX without ``metrics``: the primary metrics only (one table per
    track, source and metric; :func:`aegisbench.leaderboard.latex.latex_tables`)."""
    from aegisbench.leaderboard.latex import latex_metrics, latex_tables

    if fmt not in FORMATS:
        raise BadInput(f"{fmt!r} is not one of {', '.join(FORMATS)}{did_you_mean(fmt, FORMATS)}", where="--format")
    if leaderboard is not None and results is not None:
        raise BadInput("give --leaderboard or --results, not both", where="--results")
    long = read_results(results, private) if results is not None else read_leaderboard(leaderboard or "leaderboard")
    rows = export_rows(long, models, sources, metrics)
    if fmt == "latex":
        rows = latex_metrics(rows) if not metrics else rows
        return latex_tables(rows), len(rows)
    return (csv_text(rows) if fmt == "csv" else json_text(rows)), len(rows)


def write_export(text: str, out: str | Path, leaderboard: str | Path | None = None,
                 results: str | Path | None = None) -> Path:
    """Write ``text`` to ``out`` atomically (a file; BadInput when it names a folder or is, holds or
    lies inside the input ``leaderboard`` or ``results`` it was exported from)."""
    refuse_overlap({"--out": out}, {"--leaderboard": leaderboard, "--results": results})
    out = Path(out)
    if out.is_dir():
        raise BadInput("names a folder, expected a file (or - for standard output)", where=f"--out {out}")
    atomic_write_text(out, text)
    log.info("export %s", out)
    return out
