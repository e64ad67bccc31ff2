"""Per-image strata beside the conditions (``evaluate --stratify``): per source, model and
metric, one table with a row per stratum value (``COLUMN=value``) and a column per
condition, each cell the value with its interval. Only detection rows whose ``stratum``
is ``COLUMN=value`` count (fire spread's ``all`` / ``var_z:`` / ``dice:`` strata have their
own report); the headline cells never include them (:func:`~aegisbench.leaderboard.aggregate.is_headline`).

>>> split_label("time=night"), split_label("a=b=c")
(('time', 'night'), ('a', 'b=c'))
"""

from __future__ import annotations

import polars as pl

from aegisbench.leaderboard.aggregate import Board, natural_key
from aegisbench.leaderboard.tables import Section, fmt_interval, fmt_value, label
from aegisbench.metrics import selection
from aegisbench.vocab import CLEAN, FIRESPREAD

STRATA_METRICS = selection("recall", "precision", "map50")
IMAGES_METRIC = "map50"  # its ``n`` is the stratum's images
NONE_VALUE = "(none)"


def split_label(stratum: str) -> tuple[str, str]:
    """``("COLUMN", "value")`` of a ``COLUMN=value`` stratum label."""
    col, _, value = stratum.partition("=")
    return col, value


def _order(stratum: str) -> tuple:
    col, value = split_label(stratum)
    return (col, value == NONE_VALUE, natural_key(value))


def strata_rows(board: Board, section: Section) -> pl.DataFrame:
    """The stratified detection rows of one section (empty for fire spread)."""
    if section.track == FIRESPREAD or "stratum" not in board.long.columns:
        return board.long.clear()
    return board.long.filter((pl.col("track") == section.track) & (pl.col("source") == section.source)
                             & pl.col("t").is_null() & pl.col("stratum").is_not_null()
                             & pl.col("stratum").str.contains("=", literal=True))


def _cell(metric: str, r: dict | None) -> dict:
    if r is None:
        return {"text": "—", "value": "—", "ci": ""}
    note = r.get("note") if r["value"] is None else None
    base = fmt_value(metric, r["value"])
    value = base + (f" ({note})" if note else "")
    ci = fmt_interval(metric, r["lo"], r["hi"])
    return {"text": f"{value} {ci}".strip(), "value": value, "ci": ci, "base": base, "note": note}


def strata_tables(board: Board, section: Section) -> list[dict]:
    """Per metric and model (section order): ``{"metric", "label", "model", "conditions",
    "rows": [{"stratum", "column", "value", "images", "cells"}]}``; [] without strata rows."""
    df = strata_rows(board, section)
    if df.height == 0:
        return []
    cells = {(r["submission"], r["stratum"], r["config"], r["metric"]): r for r in df.iter_rows(named=True)}
    out = []
    for metric in [m for m in STRATA_METRICS if m in set(df["metric"].to_list())]:
        for m in section.models:
            mine = [k for k in cells if k[0] == m.submission and k[3] == metric]
            if not mine:
                continue
            configs = {k[2] for k in mine}
            conds = [c for c in section.conditions if c["config"] in configs]
            rows = []
            for stratum in sorted({k[1] for k in mine}, key=_order):
                img = cells.get((m.submission, stratum, CLEAN, IMAGES_METRIC))
                col, value = split_label(stratum)
                rows.append({"stratum": stratum, "column": col, "value": value,
                             "images": "" if img is None or img["n"] is None else str(img["n"]),
                             "cells": [_cell(metric, cells.get((m.submission, stratum, c["config"], metric)))
                                       for c in conds]})
            out.append({"metric": metric, "label": label(metric, section.track), "model": m,
                        "conditions": conds, "rows": rows})
    return out
