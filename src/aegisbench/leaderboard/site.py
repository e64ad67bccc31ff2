"""The static leaderboard site (``site/index.html`` + one page per model), Jinja2 templates.

Everything is computed here into plain dicts; the templates only lay them out, with
autoescaping on, so submitter text can never become markup. The pages need no server
(they open from ``file://``): metric switching is CSS (radio inputs and ``:has``),
table sorting is a few lines of inline JavaScript.

>>> heat_columns([{"config": "clean", "corruption": None, "family": None, "severity": 0}])[0][0]["text"]
'clean'
"""

from __future__ import annotations

import json
import logging
from itertools import groupby
from pathlib import Path

import jinja2
import polars as pl

import aegisbench
from aegisbench.atomic import atomic_write_bytes, atomic_write_text
from aegisbench.leaderboard.aggregate import Board, direction, is_headline
from aegisbench.leaderboard.findings import findings_html
from aegisbench.leaderboard.gallery import gallery_view
from aegisbench.leaderboard.machine import by_submission, machine_view
from aegisbench.leaderboard.plots import series_key, write_curves
from aegisbench.leaderboard.seeds import seed_views
from aegisbench.leaderboard.sensor import not_built_view
from aegisbench.leaderboard.strata import strata_tables
from aegisbench.leaderboard.tables import (NA, REFERENCE_MARK, REFERENCE_NOTE, Section, colour_stops,
                                           better, description, family_cells, floor_rows, fmt_interval, fmt_value,
                                           glossary, heading, heat_colour, is_collapse, is_count, label, rank_groups,
                                           primary_metric, release, sections, slug, smoke_test)
from aegisbench.evaluation.metadata import METADATA_FIELDS, check_metadata, check_url, check_weights_sha256
from aegisbench.metrics import selection
from aegisbench.vocab import CLEAN, FAMILIES, FIRESPREAD

log = logging.getLogger(__name__)
TEMPLATES = Path(aegisbench.__file__).parent / "templates"
FAMILY_ORDER = FAMILIES
# curves for these metrics only (the heat map holds every value; each figure costs build time)
CURVES = frozenset(selection("recall", "precision", "map50", "fp", "f1", "average_precision", "brier", "ece"))


def environment() -> jinja2.Environment:
    """The Jinja2 environment: autoescape everywhere, undefined names are errors."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def heat_columns(conds: list[dict], first_col: int = 2) -> list[list[dict]]:
    """Three header rows (family, corruption, severity) with colspans; clean spans all three.

    ``col`` is the body column a severity header sorts by (model and threshold come first).
    """
    def fam(c):
        return CLEAN if c["config"] == CLEAN else (c["family"] or "")

    def corr(c):
        return CLEAN if c["config"] == CLEAN else series_key(c)

    rows: list[list[dict]] = [[], [], []]
    col = {c["config"]: first_col + i for i, c in enumerate(conds)}
    for name, run in groupby(conds, key=fam):
        run = list(run)
        if name == CLEAN:
            rows[0].append({"text": CLEAN, "colspan": len(run), "rowspan": 3, "cls": "h-clean",
                            "col": col[CLEAN], "config": CLEAN})
            continue
        rows[0].append({"text": name, "colspan": len(run), "rowspan": 1, "cls": f"h-fam fam-{slug(name)}"})
        for cname, crun in groupby(run, key=corr):
            crun = list(crun)
            rows[1].append({"text": cname, "colspan": len(crun), "rowspan": 1, "cls": "h-corr"})
            rows[2] += [{"text": f"s{c['severity']}" if c["severity"] else c["config"], "colspan": 1,
                         "rowspan": 1, "cls": "h-sev", "config": c["config"], "col": col[c["config"]]}
                        for c in crun]
    return rows


def _cell(section: Section, sub: str, cond: dict, metric: str, floor_at: set) -> dict:
    """One heat-map cell: everything it says is visible text (no hover-only title)."""
    c = section.cell(sub, cond["config"], metric)
    if c is None:
        return {"text": "—", "ci": "", "bg": "#f4f4f4", "fg": "#888888", "cls": "missing", "v": "",
                "config": cond["config"], "n": "", "marks": ""}
    collapse = is_collapse(metric, c["value"], c["lo"], c["hi"])
    bg, fg = heat_colour(section, metric, c["value"], collapse)
    silent = section.silent(sub, cond["config"])
    cls = " ".join(k for k, on in (("collapse", collapse), ("silent", silent),
                                    ("floor", cond["config"] in floor_at), ("na", c["value"] is None)) if on)
    text = fmt_value(metric, c["value"], c.get("note"))
    if c["value"] is None:  # "n/a" on top, its reason below (the title holds "n/a (reason)")
        text, short_ci = NA, (f"({c['note']})" if c.get("note") else "")
    else:
        short_ci = fmt_interval(metric, c["lo"], c["hi"], compact=True)
    return {"text": text, "ci": short_ci,
            "bg": bg, "fg": fg, "cls": cls, "v": "" if c["value"] is None else repr(c["value"]),
            "config": cond["config"], "n": "" if c["n"] is None else str(c["n"]),
            "marks": ("⊘" if collapse else "") + ("⚠" if silent else "")}


def _heat(board: Board, section: Section, metric: str) -> dict:
    floors = floor_rows(board, section, metric)
    rows = []
    for m in section.models:
        at = set(floors[m.submission]["at"]) if m.submission in floors else set()
        rows.append({"m": m, "cells": [_cell(section, m.submission, c, metric, at) for c in section.conditions]})
    lo, hi = section.scale(metric)
    sign = direction(metric)
    ranks = {}
    for cond, groups in rank_groups(board, section, metric):
        for g in groups:
            for r in g:
                ranks[(r["submission"], cond["config"])] = {
                    "text": f"{r['rank']}{'=' if len(g) > 1 else ''}", "tied": len(g) > 1}
    rank_rows = [{"m": m, "cells": [ranks.get((m.submission, c["config"])) for c in section.conditions]}
                 for m in section.models] if ranks and len(section.models) > 1 else []
    return {"id": f"heat-{section.anchor}-{slug(metric)}", "rows": rows, "stops": colour_stops(metric),
            "rank_rows": rank_rows, "width": len(section.conditions) + 1 + has_threshold(section),
            "sqrt": is_count(metric),
            "lo": fmt_value(metric, lo), "hi": fmt_value(metric, hi), "sign": sign,
            "worst": fmt_value(metric, hi if sign == -1 else lo), "best": fmt_value(metric, lo if sign == -1 else hi)}


def _families(board: Board, section: Section, metric: str) -> dict | None:
    cells = family_cells(board, section, metric)
    if not cells:
        return None
    keys = sorted({(k[1], k[2]) for k in cells},
                  key=lambda fs: (FAMILY_ORDER.index(fs[0]) if fs[0] in FAMILY_ORDER else 9, fs[0],
                                  fs[1] is None, fs[1] or 0))
    heads = [{"family": f, "sev": "all" if s is None else f"s{s}",
              "n": max(r["n_conditions"] for k, r in cells.items() if k[1:] == (f, s))} for f, s in keys]
    spans = [{"family": f, "colspan": len(list(run))} for f, run in groupby(keys, key=lambda k: k[0])]
    rows = []
    for m in section.models:
        out = []
        for f, s in keys:
            r = cells.get((m.submission, f, s))
            if r is None:
                out.append(None)
                continue
            bg, fg = heat_colour(section, metric, r["mean"])
            out.append({"mean": fmt_value(metric, r["mean"]), "range": f"{fmt_value(metric, r['min'])}–"
                        f"{fmt_value(metric, r['max'])}", "bg": bg, "fg": fg, "v": repr(r["mean"]),
                        "worst": r["worst_config"] or ""})
        rows.append({"m": m, "cells": out})
    return {"heads": heads, "spans": spans, "rows": rows}


def _floor(board: Board, section: Section, metric: str) -> list[dict]:
    floors = floor_rows(board, section, metric)
    out = []
    for m in section.models:
        r = floors.get(m.submission)
        if r is None:
            continue
        drop = None if r[CLEAN] is None else (r[CLEAN] - r["floor"]) * (direction(metric) or 1)
        bg, fg = heat_colour(section, metric, r["floor"], is_collapse(metric, r["floor"], r["lo"], r["hi"]))
        out.append({"m": m, "floor": fmt_value(metric, r["floor"]), "ci": fmt_interval(metric, r["lo"], r["hi"]),
                    "v": repr(r["floor"]), "at": r["at"], CLEAN: fmt_value(metric, r[CLEAN]),
                    "clean_v": "" if r[CLEAN] is None else repr(r[CLEAN]), "bg": bg, "fg": fg,
                    "drop": "n/a" if drop is None else fmt_value(metric, drop),
                    "drop_v": "" if drop is None else repr(drop),
                    "collapse": is_collapse(metric, r["floor"], r["lo"], r["hi"])})
    return out


def section_view(board: Board, section: Section, plots: dict) -> dict:
    groups = []
    for gi, (title, metrics) in enumerate(section.heat_groups()):
        panels = []
        for metric in metrics:
            panels.append({"metric": metric, "slug": slug(metric), "label": label(metric, section.track),
                           "heading": heading(metric, section.track), "better": better(metric),
                           "description": description(metric),
                           "heat": _heat(board, section, metric), "families": _families(board, section, metric),
                           "floor": _floor(board, section, metric),
                           "curve": plots.get((section.anchor, metric))})
        groups.append({"index": gi, "title": title, "panels": panels})
    return {"s": section, "anchor": section.anchor, "thr": has_threshold(section),
            "detection": section.track != FIRESPREAD,
            "columns": heat_columns(list(section.conditions), first_col=1 + has_threshold(section)),
            "groups": groups, "n_conditions": len(section.conditions), "collapses": collapses(section),
            "strata": strata_tables(board, section), "not_built": not_built_view(section),
            "findings": findings_html(section), "seeds": seed_views(board.seeds, section, primary_metric(section))}


def has_threshold(section: Section) -> bool:
    """Whether the section's models have frozen thresholds (detection; fire spread has none:
    no τ column there)."""
    return any(m.threshold is not None for m in section.models)


STATUS_NOTE = ("verified: this project ran the model itself (its attestation of the run, made with a key only "
               "this project holds, matches the files these results were scored from); self-reported: "
               "predictions handed in by the submitter, scored here but not reproduced; published: numbers from "
               "a paper, shown beside and never ranked against rows scored here")
META_COLUMNS = [(k, k.replace("_", " ")) for k in METADATA_FIELDS]  # (field, column title), submission.yaml's order


def model_info(board: Board, sub: str) -> dict:
    """Status (verified / self-reported), the machine class of its rows (``machine``:
    :func:`~aegisbench.leaderboard.machine.machine_view`) and the model metadata of one submission, checked
    again here (provenance.json is an input like any other: a bad field is shown as absent)."""
    prov = board.provenance[sub]
    meta = prov.get("metadata")
    clean, bad = check_metadata(meta) if isinstance(meta, dict) else ({}, [])
    for key, why in bad:
        log.warning("%s: provenance metadata.%s %s: not shown", sub, key, why)
    try:
        weights = check_weights_sha256(prov.get("weights_sha256"))
    except ValueError as exc:
        log.warning("%s: provenance %s: not shown", sub, exc)
        weights = None
    status, reason = board.statuses.get(sub, ("self-reported", None))
    params = clean.get("parameters")
    kernels = by_submission(board.long.filter(pl.col("submission") == sub)).get(sub)
    return {"verified": status == "verified", "status": status, "status_reason": reason or "",
            "machine": machine_view(kernels),
            "weights": weights or "", **{k: clean.get(k, "") for k in METADATA_FIELDS},
            "parameters_text": "" if params is None else f"{params / 1e6:.2f} M" if params >= 10**5 else f"{params:,}",
            "parameters_v": "" if params is None else str(params)}


def models_view(board: Board) -> list[dict]:
    """One row per merged submission for the sortable model table (reference rows first)."""
    refs = set(board.references)
    subs = sorted(board.provenance, key=lambda s: (s not in refs, board.provenance[s]["model"].casefold(), s))
    return [{"sub": s, "model": board.provenance[s]["model"], "team": board.provenance[s]["team"],
             "track": board.provenance[s]["track"], "page": f"models/{slug(s)}.html", "reference": s in refs,
             "info": model_info(board, s), "digest": board.provenance[s]["dataset_digest"],
             "copies_labels": bool(board.long.filter((pl.col("submission") == s)
                                                     & pl.col("matches_test_labels")).height),
             "evaluator": board.provenance[s]["evaluator_version"],
             "scored_with": f'{board.provenance[s]["dataset_digest"]} {board.provenance[s]["evaluator_version"]}',
             "published": _published(board.provenance[s])}
            for s in subs]


def _published(prov: dict) -> dict | None:
    """What a published row says of itself: protocol, source (an http(s) URL, else none), citation."""
    if prov.get("status") != "published":
        return None
    return {"protocol": str(prov.get("protocol") or "")[:2000], "source_url": check_url(prov.get("source_url")) or "",
            "citation": str(prov.get("citation") or "")[:4000]}


def collapses(section: Section) -> list[dict]:
    """Per condition, the models whose primary metric collapsed (value 0, interval [0, 0])."""
    groups = section.heat_groups()
    if not groups:
        return []
    metric = groups[0][1][0]
    out = []
    for c in section.conditions:
        hit = [m.model for m in section.models
               if (cell := section.cell(m.submission, c["config"], metric))
               and is_collapse(metric, cell["value"], cell["lo"], cell["hi"])]
        if hit:
            who = f"all {len(hit)} models" if len(hit) == len(section.models) > 1 else ", ".join(hit)
            out.append({"config": c["config"], "who": who, "metric": label(metric, section.track)})
    return out


def _model_view(board: Board, secs: list[Section], sub: str) -> dict:
    prov = board.provenance[sub]
    parts = []
    for section in secs:
        row = next((m for m in section.models if m.submission == sub), None)
        if row is None:
            continue
        metrics = [m for m in section.metrics if any(section.cell(sub, c["config"], m) for c in section.conditions)]
        table = []
        for c in section.conditions:
            cells = []
            for metric in metrics:
                cell = _cell(section, sub, c, metric, set())
                raw = section.cell(sub, c["config"], metric)
                if raw is None or raw["value"] is not None:  # a null value keeps its "(reason)"
                    cell["ci"] = "" if raw is None else fmt_interval(metric, raw["lo"], raw["hi"])
                cells.append(cell)
            table.append({"c": c, "cells": cells})
        floors = {metric: floor_rows(board, section, metric).get(sub) for metric in metrics}
        parts.append({"s": section, "m": row, "thr": has_threshold(section), "not_built": not_built_view(section),
                      "metrics": [{"metric": m, "label": label(m, section.track), "heading": heading(m, section.track),
                                   "description": description(m)} for m in metrics],
                      "table": table, "floors": [{"label": heading(k, section.track), "floor": fmt_value(k, v["floor"]),
                                                 "ci": fmt_interval(k, v["lo"], v["hi"]), "at": v["at"],
                                                 CLEAN: fmt_value(k, v[CLEAN])}
                                                for k, v in floors.items() if v]})
    provenance = [{"key": k, "value": v if isinstance(v, str) else json.dumps(v, sort_keys=True, indent=1)}
                  for k, v in sorted(prov.items())]
    return {"sub": sub, "prov": prov, "provenance": provenance, "parts": parts, "strata": _strata(board, sub),
            "reference": sub in board.references, "info": model_info(board, sub)}


def _strata(board: Board, sub: str) -> list[dict]:
    """The rows beyond the headline cells (per frame, per stratum), in the long table's order."""
    extra = board.long.filter((pl.col("submission") == sub) & ~is_headline())
    return [{"source": r["source"], "config": r["config"], "stratum": r["stratum"] or "",
             "t": "" if r["t"] is None else r["t"], "metric": heading(r["metric"], r["track"]),
             "value": fmt_value(r["metric"], r["value"], r["note"]),
             "ci": fmt_interval(r["metric"], r["lo"], r["hi"]), "n": "" if r["n"] is None else r["n"]}
            for r in extra.iter_rows(named=True)]


def _firespread_view(report, out: Path, written: list[Path]) -> dict | None:
    """The fire-spread report on the page: Fig. 3 as a PNG and the F2R-vs-F2S tables."""
    if report is None:
        return None
    from aegisbench.leaderboard.firespread_report import max_sd_by_level, table_views
    figures = {"figure": "plots/firespread-sd_zt.png", "figure_narrow": "plots/firespread-sd_zt-narrow.png"}
    for key, name in figures.items():
        if getattr(report, key):  # the narrow one: stacked panels, for a phone
            atomic_write_bytes(out / name, getattr(report, key))
            written.append(out / name)
        else:
            figures[key] = ""
    peaks = [{"s": r["s_level"], "mean": f"{r['mean']:.1f}", "range": f"{r['lo']:.1f}–{r['hi']:.1f}"}
             for r in max_sd_by_level(report.sd_zt).iter_rows(named=True)]
    return {**figures, "peaks": peaks, "tables": table_views(report)}


def render_site(board: Board, out: str | Path, firespread=None, preview: str | Path | None = None,
                calibration: str | Path | None = None) -> list[Path]:
    """Write index.html, models/*.html and plots/*.svg under ``out``; return the files written.
    ``firespread``: the fire-spread report, shown in the fire-spread section; ``preview``:
    the preview stage's folder (condition gallery thumbnails under ``gallery/``)."""
    out = Path(out)
    env = environment()
    secs = sections(board)
    written: list[Path] = []
    plots = {}
    for section in secs:
        plots |= write_curves(section, [m for _, ms in section.heat_groups() for m in ms
                                        if m in CURVES and (m != "f1" or section.track == FIRESPREAD)], out, written)
    views = [section_view(board, s, plots) for s in secs]
    fs_view = _firespread_view(firespread, out, written)
    for v in views:
        v[FIRESPREAD] = fs_view if v["s"].track == FIRESPREAD else None
    metrics_css = [(v["anchor"], g["index"], p["slug"], i == 0)
                   for v in views for g in v["groups"] for i, p in enumerate(g["panels"])]
    built: dict[str, set[str]] = {}  # source -> the corruptions built for it (the gallery shows those)
    for section in secs:
        built.setdefault(section.source, set()).update(c["corruption"] for c in section.conditions if c["corruption"])
    gallery = gallery_view(preview, out, built, written, {s.source: s.sensor for s in secs if s.sensor},
                           calibration)
    common = {"board": board, "expect": board.expect, "version": aegisbench.__version__,
              "references": board.references, "reference_note": REFERENCE_NOTE, "reference_mark": REFERENCE_MARK,
              "smoke_test": smoke_test(board), "status_note": STATUS_NOTE, "release": release(board)}
    html = env.get_template("leaderboard_index.html.j2").render(
        sections=views, skipped=board.skipped, n_results=len(board.provenance), metrics_css=metrics_css,
        glossary=glossary({m for s in secs for m in s.metrics}), root="", models=models_view(board),
        meta_fields=META_COLUMNS, gallery=gallery, **common)
    atomic_write_text(out / "index.html", html)
    written.append(out / "index.html")
    for sub in sorted(board.provenance):
        page = f"models/{slug(sub)}.html"
        figures = []
        for name, data in sorted(board.attachments.get(sub, {}).items()):
            rel = f"{slug(sub)}-{name}"
            atomic_write_bytes(out / "models" / rel, data)
            written.append(out / "models" / rel)
            figures.append({"src": rel, "name": name})
        html = env.get_template("leaderboard_model.html.j2").render(
            view=_model_view(board, secs, sub), figures=figures, root="../", metrics_css=[], **common)
        atomic_write_text(out / page, html)
        written.append(out / page)
    return written
