"""Published rows: numbers a paper reports, shown beside the rows scored here, never ranked
against them.

``aegisbench import-published TABLE --id ID ...`` writes ``results/<id>/`` in the one results
schema with a provenance whose ``status`` is ``published`` and which carries the ``protocol`` (how
the numbers were measured, in words), the ``source_url`` and the ``citation``. Two layouts:

* ``long`` (CSV or Parquet): ``source, config, metric, value[, lo, hi, n]``, one row per
  condition and metric; ``config`` follows the config grammar (``clean``, ``low_light_s3``);
* ``release``: the reference release's condition table (``results/workshop/benchmark_168_conditions.csv``
  of Altis-2026/AegisBench: ``model, dataset, family, corruption, severity, ..., n_images, n_gt,
  tp, fp, recall, recall_ci_lo, recall_ci_hi, precision, f1, map50, map50_95``): one results
  folder per model, ``<id>_<model>``.

Every metric must be registered for the track and lie within its bounds, every interval must hold
its value, every URL is http(s), the date is a date: anything else is one line naming the file,
row and field, exit 2, nothing written.

>>> release_rows([{"model": "m", "dataset": "sard", "family": "storm", "corruption": "low_light", "severity": "3",
...                "n_images": "10", "n_gt": "12", "tp": "3", "fp": "1", "recall": "0.25", "recall_ci_lo": "0.1",
...                "recall_ci_hi": "0.4", "precision": "0.75", "f1": "0.375", "map50": "0.3", "map50_95": "0.1"}])[
...     "m"][0]
{'source': 'sard', 'config': 'low_light_s3', 'metric': 'recall', 'value': 0.25, 'lo': 0.1, 'hi': 0.4, 'n': 12}
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from aegisbench.corruptions import corruption_families
from aegisbench.errors import BadInput
from aegisbench.evaluation.metadata import check_date, check_url, text_problem
from aegisbench.evaluation.results import PROVENANCE_FILE, _dump, results_table
from aegisbench.evaluation.version import EVALUATOR_VERSION
from aegisbench.fields import did_you_mean
from aegisbench.staging import staged_dir
from aegisbench.metrics import REGISTRY
from aegisbench.readers import read_regular_bytes
from aegisbench.vocab import CLEAN, TRACKS, parse_corruption_config

LAYOUTS = ("long", "release")
MAX_TABLE_BYTES = 64 * 1024**2
RELEASE_METRICS = {"recall": ("recall_ci_lo", "recall_ci_hi", "n_gt"), "precision": (None, None, None),
                   "f1": (None, None, None), "map50": (None, None, "n_images"), "map50_95": (None, None, "n_images")}
FAMILY_OF = corruption_families()


@dataclass(frozen=True)
class Publication:
    """Who published the numbers, how they were measured and where."""

    name: str
    team: str
    track: str
    protocol: str
    source_url: str
    citation: str
    date: str | None = None

    def __post_init__(self) -> None:
        if self.track not in TRACKS:
            raise BadInput(f"must be one of {list(TRACKS)}, got {self.track!r}{did_you_mean(self.track, TRACKS)}",
                           where="--track")
        for flag, value, limit in (("--name", self.name, 200), ("--team", self.team, 200),
                                   ("--protocol", self.protocol, 2000), ("--citation", self.citation, 4000)):
            why = "missing or empty" if not value.strip() else text_problem(value, limit, multiline=flag != "--name")
            if why:
                raise BadInput(why, where=flag)
        if check_url(self.source_url) is None:
            raise BadInput(f"must be an http(s) URL with a host, got {self.source_url[:80]!r}", where="--source-url")
        if self.date is not None and check_date(self.date) is None:
            raise BadInput(f"must be a date YYYY-MM-DD, got {self.date[:40]!r}", where="--date")


def read_table(path: str | Path) -> list[dict]:
    """The rows of a CSV or Parquet table as dicts of strings / numbers (bounded read)."""
    path = Path(path)
    data = read_regular_bytes(path, "table", MAX_TABLE_BYTES)
    if path.suffix.lower() == ".parquet":
        try:
            return pl.read_parquet(io.BytesIO(data)).to_dicts()
        except Exception as exc:  # noqa: BLE001 - any reader failure: not usable Parquet
            raise BadInput(f"unreadable Parquet ({type(exc).__name__})", where=str(path)) from None
    try:
        return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise BadInput(f"unreadable CSV ({exc})", where=str(path)) from None


def _num(row: dict, key: str, where: str, integer: bool = False):
    v = row.get(key)
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise BadInput(f"not a number: {str(v)[:40]!r}", where=f"{where} field {key}") from None
    if not math.isfinite(x) or (integer and (x != int(x) or x < 0)):
        raise BadInput(f"must be a finite {'count' if integer else 'number'}, got {str(v)[:40]!r}",
                       where=f"{where} field {key}")
    return int(x) if integer else x


def release_rows(rows: list[dict], where: str = "table") -> dict[str, list[dict]]:
    """The reference release's wide rows as long rows, per model."""
    out: dict[str, list[dict]] = {}
    for i, r in enumerate(rows):
        at = f"{where}:row {i}"
        corruption, severity = str(r.get("corruption", "")), _num(r, "severity", at, integer=True)
        config = CLEAN if corruption == CLEAN else f"{corruption}_s{severity}"
        for metric, (lo, hi, n) in RELEASE_METRICS.items():
            value = _num(r, metric, at)
            if value is None:
                continue
            out.setdefault(str(r.get("model", "")), []).append(
                {"source": str(r.get("dataset", "")), "config": config, "metric": metric, "value": value,
                 "lo": _num(r, lo, at) if lo else None, "hi": _num(r, hi, at) if hi else None,
                 "n": _num(r, n, at, integer=True) if n else None})
    return out


def long_rows(rows: list[dict], where: str = "table") -> list[dict]:
    """The long layout's rows, typed."""
    return [{"source": str(r.get("source") or ""), "config": str(r.get("config") or ""), "metric": str(r.get("metric")
             or ""), "value": _num(r, "value", f"{where}:row {i}"), "lo": _num(r, "lo", f"{where}:row {i}"),
             "hi": _num(r, "hi", f"{where}:row {i}"), "n": _num(r, "n", f"{where}:row {i}", integer=True)}
            for i, r in enumerate(rows)]


def checked_rows(sid: str, track: str, rows: list[dict], where: str) -> list[dict]:
    """Rows of the results schema; BadInput naming the row and field of the first bad one."""
    out, seen = [], set()
    for i, r in enumerate(rows):
        at = f"{where}:row {i}"
        config = r["config"]
        parsed = parse_corruption_config(config) if config != CLEAN else None
        if config != CLEAN and (parsed is None or parsed[0] not in FAMILY_OF):
            raise BadInput(f"not a config of the benchmark (clean, or <corruption>_s1..3): {config[:60]!r}",
                           where=f"{at} field config")
        if not r["source"] or not r["source"].replace("_", "").isalnum() or r["source"] != r["source"].lower():
            raise BadInput(f"a source is a snake_case name, got {r['source'][:60]!r}", where=f"{at} field source")
        spec = REGISTRY.get(r["metric"])
        if spec is None or track not in spec.tracks:
            raise BadInput(f"not a registered metric of track {track!r}: {r['metric'][:60]!r}", where=f"{at} field metric")
        lo_b, hi_b = spec.bounds
        for key in ("value", "lo", "hi"):
            v = r[key]
            if v is not None and not (lo_b <= v <= hi_b):
                raise BadInput(f"{v} lies outside the bounds [{lo_b}, {hi_b}] of {r['metric']}", where=f"{at} field {key}")
        if r["value"] is None:
            raise BadInput("missing", where=f"{at} field value")
        if (r["lo"] is None) != (r["hi"] is None) or (r["lo"] is not None and not r["lo"] <= r["value"] <= r["hi"]):
            raise BadInput("lo and hi must both be given and hold the value", where=f"{at} field lo")
        key = (r["source"], config, r["metric"])
        if key in seen:
            raise BadInput(f"given twice: {key}", where=at)
        seen.add(key)
        corruption, severity = parsed if parsed else (None, 0)
        out.append({"submission": sid, "track": track, "source": r["source"], "config": config,
                    "corruption": corruption, "family": FAMILY_OF.get(corruption), "severity": severity,
                    "metric": r["metric"], "value": r["value"], "lo": r["lo"], "hi": r["hi"], "n": r["n"],
                    "note": "published"})
    if not out:
        raise BadInput("no rows", where=where)
    return out


def write_published(results: str | Path, sid: str, model: str, pub: Publication, rows: list[dict]) -> Path:
    """Write ``results/<sid>/`` for checked published rows (swapped in whole); returns it."""
    final = Path(results) / sid
    prov = {"submission": sid, "status": "published", "name": pub.name, "team": pub.team, "model": model,
            "track": pub.track, "dataset_version": "published", "dataset_digest": "published",
            "evaluator_version": EVALUATOR_VERSION, "frozen_threshold": None, "protocol": pub.protocol,
            "source_url": pub.source_url, "citation": pub.citation, **({"date": pub.date} if pub.date else {})}
    table = results_table(rows)  # built (and so type-checked) before anything is written
    with staged_dir(final) as staging:
        pq.write_table(table, staging / "metrics.parquet", compression="zstd")
        (staging / PROVENANCE_FILE).write_text(_dump(prov))
    return final


def import_published(table: str | Path, layout: str, sid: str, pub: Publication, results: str | Path,
                     model: str | None = None) -> list[Path]:
    """Check the whole table, then write one results folder (``long``: ``sid``, with ``model``) or
    one per model (``release``: ``<sid>_<model>``); returns the folders."""
    from aegisbench.evaluation.intake import SUBMISSION_ID
    if layout not in LAYOUTS:
        raise BadInput(f"must be one of {list(LAYOUTS)}, got {layout!r}{did_you_mean(layout, LAYOUTS)}",
                       where="--layout")
    raw = read_table(table)
    if layout == "long":
        if not model:
            raise BadInput("the long layout names its model: give --model", where="--model")
        groups = {model: long_rows(raw, str(table))}
    else:
        groups = release_rows(raw, str(table))
    planned = {}
    for name, rows in groups.items():
        folder_id = sid if layout == "long" else f"{sid}_{name}"
        if not SUBMISSION_ID.fullmatch(folder_id):
            raise BadInput(f"{folder_id!r} is not a submission id (letters, digits, '.', '_', '-')", where="--id")
        existing = Path(results) / folder_id / PROVENANCE_FILE
        if existing.is_file() and '"status": "published"' not in existing.read_text(encoding="utf-8"):
            raise BadInput("holds the results of a submission scored here; choose another --id", where=str(existing.parent))
        planned[folder_id] = (name, checked_rows(folder_id, pub.track, rows, str(table)))
    return [write_published(results, fid, name, pub, rows) for fid, (name, rows) in planned.items()]
