"""``leaderboard/README.md``: per track and source, every condition with its interval.

Every text that comes from a submission or a results folder (names, teams, ids, sources,
families, notes, labels of unregistered metrics) is HTML-escaped and Markdown-escaped, or
set in a code span no text can close (a fence longer than any backtick run in it); newlines
are flattened and pipes escaped, so a model named ``<script>`` or a folder whose name holds
double backticks and an ``<img onerror=...>`` stays text on any Markdown renderer.

>>> md_escape("<b>a|b</b>")
'&lt;b&gt;a\\\\|b&lt;/b&gt;'
>>> md_code("low_light_s3"), md_code("a``b")
('`low_light_s3`', '``` a``b ```')
"""

from __future__ import annotations

import html
import re

import polars as pl

from aegisbench.leaderboard.aggregate import Board
from aegisbench.leaderboard.findings import section_findings
from aegisbench.leaderboard.machine import MACHINE_DEPENDENT, MEANING, PORTABLE, by_submission, verdict
from aegisbench.leaderboard.seeds import seed_views
from aegisbench.leaderboard.sensor import not_built_text
from aegisbench.leaderboard.strata import strata_tables
from aegisbench.leaderboard.tables import (REFERENCE_MARK, REFERENCE_NOTE, ModelRow, Section, family_cells,
                                           floor_rows, fmt_interval, fmt_value, glossary, is_collapse, label,
                                           primary_metric, rank_groups, release, sections, smoke_test)
from aegisbench.metrics import selection
from aegisbench.vocab import CLEAN, FIRESPREAD, WARP_GRID, WARP_NOISE, WARP_PATCH, config_kind, family_rank

COLLAPSE = "⛔"
SILENT = "⚠"
# which metrics get a per-condition table (registered names, checked on import)
MARKDOWN_METRICS = {FIRESPREAD: selection("f1", "average_precision", "brier", "ece", "ece_seed003", "excess_brier")}
DETECTION_MARKDOWN = selection("recall", "precision", "map50", "fp")


def md_escape(text: str) -> str:
    """Escape text for a Markdown table cell (HTML, pipes, emphasis, newlines)."""
    text = html.escape(str(text), quote=True)
    text = re.sub(r"([\\`*_\[\]|~])", r"\\\1", text)
    return " ".join(text.split())


def md_code(text: str) -> str:
    """A code span its content cannot close: the fence is one backtick longer than the
    longest run in the text (padded with spaces when the text holds one); whitespace is
    flattened and every pipe escaped for the table parser (which pairs backslashes first)."""
    text = " ".join(str(text).split())
    text = re.sub(r"(\\*)\|", lambda m: m.group(1) + "\\" * (len(m.group(1)) % 2) + "\\|", text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence, pad = "`" * (longest + 1), " " if longest else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _label(metric: str, track: str | None = None) -> str:
    """The metric's display label, escaped (an unregistered metric shows its own name)."""
    return md_escape(label(metric, track))


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> list[str]:
    align = align or ["---"] * len(header)
    return [_row(header), _row(align), *(_row(r) for r in rows)]


def _name(m: ModelRow | dict, references: tuple[str, ...] = ()) -> str:
    """The escaped model name, with the reference mark on reference submissions."""
    if isinstance(m, dict):  # a rank-view row
        return md_escape(m["model"]) + (f" {REFERENCE_MARK}" if m["submission"] in references else "")
    return md_escape(m.model) + (f" {REFERENCE_MARK}" if m.reference else "")


def _thr(value: float | None) -> str:
    return "none" if value is None else f"{value:.3f}"


def _cell_text(section: Section, sub: str, config: str, metric: str) -> str:
    c = section.cell(sub, config, metric)
    if c is None:
        return "—"
    note = c.get("note")
    text = fmt_value(metric, c["value"], md_escape(note) if note else note)
    ci = fmt_interval(metric, c["lo"], c["hi"])
    if is_collapse(metric, c["value"], c["lo"], c["hi"]):
        text = f"**{text}** {ci} {COLLAPSE}"
    elif ci:
        text = f"{text} {ci}"
    if section.silent(sub, config):
        text += f" {SILENT}"
    return text


def _machine(kernels: str | None) -> str:
    """The machine class of a submission's rows and what it promises (escaped)."""
    return (md_escape(verdict(None)) if kernels is None
            else f"{md_code(kernels)}: {md_escape(verdict(kernels))}")


def _section(board: Board, section: Section) -> list[str]:
    out = [f"## {md_escape(section.track)} · {md_escape(section.source)}", ""]
    if section.not_built:  # one note, never a row per condition (nor an n/a column)
        out += [f"> {not_built_text(md_escape(section.source), md_escape(section.sensor or ''), section.not_built, md_code)}",
                ""]
    found = section_findings(section, md_escape)
    if found:
        out += ["**What these results show** (generated from the rows below; the default row's recall):", "",
                *(f"- {line}" for line in found), ""]
    main = primary_metric(section)
    floors = floor_rows(board, section, main) if main else {}
    rows, machines = [], by_submission(board.long.filter(pl.col("track") == section.track))
    for m in section.models:
        fl = floors.get(m.submission)
        clean = _cell_text(section, m.submission, CLEAN, main) if main else "—"
        floor = (f"{fmt_value(main, fl['floor'])} {fmt_interval(main, fl['lo'], fl['hi'])} at "
                 + ", ".join(md_code(a) for a in fl["at"])) if fl else "—"
        prov = board.provenance[m.submission]
        status = m.status + ("; matches the published test labels" if m.copies_labels else "")
        rows.append([_name(m), md_escape(m.team), md_code(m.submission), status,
                     f"{md_code(prov['dataset_digest'][:12])} · {md_escape(prov['evaluator_version'])}",
                     _thr(m.threshold), _machine(machines.get(m.submission)), clean, floor])
    order = (f"reference {REFERENCE_MARK} first, then alphabetical" if any(m.reference for m in section.models)
             else "alphabetical")
    out += [f"Models ({order}; there is no overall rank). Clean and floor are {_label(main, section.track)}.", ""]
    out += _table(["model", "team", "submission", "status", "scored with (dataset, evaluator)", "frozen threshold",
                   "computed on (machine class)", f"clean {_label(main, section.track)}",
                   f"floor: worst {_label(main, section.track)} (where)"], rows)
    out.append("")
    views = seed_views(board.seeds, section, main)
    out += [f"Training seeds: {md_escape(v['note'])}" for v in views] + ([""] if views else [])
    heads = ["condition", "family", "sev."] + [
        f"{_name(m)} (τ {_thr(m.threshold)})" for m in section.models]
    for metric in [m for m in MARKDOWN_METRICS.get(section.track, DETECTION_MARKDOWN) if m in section.metrics]:
        out += [f"### {_label(metric, section.track)} per condition", ""]
        body = [[md_code(c["config"]), md_escape(c["family"] or ""),
                 str(c["severity"])] + [_cell_text(section, m.submission, c["config"], metric)
                                        for m in section.models] for c in section.conditions]
        out += _table(heads, body, ["---", "---", "--:"] + ["--:"] * len(section.models))
        out.append("")
    out += _seed_tables(views) + _warp(section) + _strata(board, section)
    if main:
        out += _families(board, section, main) + _ranks(board, section, main)
    return out


def _seed_tables(views: list[dict]) -> list[str]:
    """Per reference with two seeds or more: its metric per condition for every seed, beside the
    row's own value and bootstrap interval."""
    out = []
    for v in views:
        if len(v["seeds"]) < 2:
            continue
        out += [f"### {md_escape(v['label'])} across training seeds: {md_code(v['submission'])}", "",
                f"The seed range exceeds the width of seed {v['primary']}'s 95% interval under {v['wider']} of "
                f"{len(v['rows'])} conditions: there, a difference between conditions smaller than the range may be "
                "the training seed's, not the condition's."
                + (" —: not scored for that seed (the WARP tests run for the row's seed only)." if v["missing"] else ""),
                ""]
        heads = ["condition", "sev.", f"seed {v['primary']} (the row) [95% interval]",
                 *(f"seed {s}" for s in v["seeds"]), "seed range", "interval width", "range > width"]
        body = [[md_code(r["config"]), str(r["severity"]), r["row"], *r["values"], r["range"], r["width"], r["wider"]]
                for r in v["rows"]]
        out += _table(heads, body, ["---", "--:", "--:"] + ["--:"] * (len(v["seeds"]) + 3)) + [""]
    return out


def _strata(board: Board, section: Section) -> list[str]:
    """Per metric and model: strata (rows) x conditions (columns), when the evaluation was stratified."""
    tables = strata_tables(board, section)
    if not tables:
        return []
    out = ["### Strata beside conditions (`evaluate --stratify`)", "",
           "Each row is one value of a per-image metadata column, scored on those test images only at the "
           "model's frozen threshold τ, with its own 95% bootstrap interval over them; the cells above pool "
           "every image.", ""]
    for t in tables:
        out += [f"#### {_label(t['metric'], section.track)} by stratum: {_name(t['model'])}", ""]
        body = [[md_code(r["stratum"]), r["images"], *(_strata_cell(c) for c in r["cells"])]
                for r in t["rows"]]
        out += _table(["stratum", "images", *(md_code(c["config"]) for c in t["conditions"])], body,
                      ["---", "--:"] + ["--:"] * len(t["conditions"])) + [""]
    return out


def _strata_cell(c: dict) -> str:
    """One strata cell: the value (a null one with its escaped note) and its interval."""
    note = f" ({md_escape(c['note'])})" if c.get("note") else ""
    return f"{c['base']}{note} {c['ci']}".strip() if "base" in c else c["text"]


WARP_PATCH_METRICS = selection("alpha", "beta", "gamma", "gamma_positions")


def _warp(section: Section) -> list[str]:
    """Seed 000's two WARP tables: mAP loss per noise level, and the patch deception rates."""
    noise = [c for c in section.conditions if config_kind(c["config"]) == WARP_NOISE]
    patch = any(c["config"] == WARP_PATCH for c in section.conditions)
    if not noise and not patch:
        return []
    out = ["### WARP (seed 000)", ""]
    names = [_name(m) for m in section.models]
    if noise:
        out += ["Global noise `x' = (1 - a) x + a σ r` at the model input of the clean smoke test frames "
                "(`aegisbench warp-detect`; the dataset stores no noisy frames). The mAP loss is "
                "`100 (mAP_clean - mAP_a) / mAP_clean`, a positive percentage as in the seed's "
                "tables, with its bootstrap interval (a step where the loss falls inside the interval "
                "is noise, not a trend): **lower is better** (negative: the noise raised mAP).", ""]
        body = [[md_code(c["config"])] + [_cell_text(section, m.submission, c["config"], "warp_map_loss")
                                          for m in section.models] for c in noise]
        out += _table(["noise level", *(f"{n}: {_label('warp_map_loss')}" for n in names)], body,
                      ["---"] + ["--:"] * len(names)) + [""]
    if patch:
        out += [f"Cloud-patch deception test ({WARP_GRID * WARP_GRID} positions per smoke-positive image at "
                "the default grid): lower is better for all three.", ""]
        body = [[_label(metric)] + [_cell_text(section, m.submission, WARP_PATCH, metric) for m in section.models]
                for metric in WARP_PATCH_METRICS]
        out += _table(["rate", *names], body, ["---"] + ["--:"] * len(names)) + [""]
    return out


def _families(board: Board, section: Section, metric: str) -> list[str]:
    cells = family_cells(board, section, metric)
    if not cells:
        return []
    fams = sorted({(k[1], k[2]) for k in cells if k[2] is not None}, key=lambda fs: (family_rank(fs[0]), fs))
    out = [f"### Per-family summary of {_label(metric, section.track)} (beside, not instead of, the cells above)", "",
           "Each cell is the mean over the family's corruptions at that severity, with the range "
           "(min–max) across them; the number of conditions it covers is in the header.", ""]
    heads = ["model"] + [f"{md_escape(fam)} s{sev} ({cells_n(cells, fam, sev)})" for fam, sev in fams]
    body = []
    for m in section.models:
        row = [_name(m)]
        for fam, sev in fams:
            r = cells.get((m.submission, fam, sev))
            row.append("—" if r is None else f"{fmt_value(metric, r['mean'])} "
                       f"({fmt_value(metric, r['min'])}–{fmt_value(metric, r['max'])})")
        body.append(row)
    return out + _table(heads, body) + [""]


def cells_n(cells: dict, fam: str, sev: int) -> int:
    return max((r["n_conditions"] for k, r in cells.items() if k[1] == fam and k[2] == sev), default=0)


def _ranks(board: Board, section: Section, metric: str) -> list[str]:
    ranked = rank_groups(board, section, metric)
    if not ranked:
        return []
    out = [f"### Order within each condition ({_label(metric, section.track)})", "",
           "Models whose intervals overlap are one tied group `{…}`; `>` separates groups "
           "whose intervals are disjoint. Verified rows come first; a self-reported row is ranked after every "
           "verified one. Ranks are never combined across conditions.", ""]
    body = []
    for cond, groups in ranked:
        parts = []
        for g in groups:
            names = ", ".join(_name(r, board.references) + ("" if r["status"] == "verified" else f" ({r['status']})")
                              for r in g)
            parts.append(f"{g[0]['rank']}. {{{names}}}" if len(g) > 1 else f"{g[0]['rank']}. {names}")
        body.append([md_code(cond["config"]), " > ".join(parts)])
    return out + _table(["condition", "order (best first)"], body) + [""]


def render_markdown(board: Board, firespread_report: bool = False) -> str:
    """The whole README.md of the leaderboard (deterministic); ``firespread_report``: link the
    fire-spread report written beside it."""
    secs = sections(board)
    out = ["# AegisBench leaderboard", "",
           f"Built by `aegisbench leaderboard` from {len(board.provenance)} results folder(s), "
           f"dataset digest {md_code(board.expect.dataset_digest)} ({release(board)}), evaluator version "
           f"{md_code(board.expect.evaluator_version)}. Open `site/index.html` for heat maps, "
           "severity curves and one page per model.", "",
           "Every number is one condition of one model with its 95% bootstrap interval `[lo, hi]`; "
           "nothing is averaged into a single score. τ is the model's confidence threshold, frozen "
           f"on clean validation data. {COLLAPSE} collapse: value 0 with interval [0, 0]. "
           f"{SILENT} silent failure flagged by the evaluator (detections vanish without a sign: recall "
           "at most half of clean, survivors on target, false positives per image not above clean's). "
           "n/a (reason): no value, never 0 — `0/0` an undefined ratio (e.g. precision without a single "
           "kept detection). Conditions not built for a source's sensor (a thermal camera has no sun glint) "
           "have no row: one note under the source's heading lists them.", "",
           "*Computed on* is the machine class a submission's rows were computed with, as its run recorded it "
           f"(the Parquet's `kernels` column): {PORTABLE} (x86-64-v3, oneDNN off, MKL COMPATIBLE, a fixed "
           f"thread count, and where named the convolutions on OpenBLAS's Haswell kernels): {MEANING[PORTABLE]}; {MACHINE_DEPENDENT} (oneDNN on, or a GPU): "
           f"{MEANING[MACHINE_DEPENDENT]}; not recorded: predictions handed in without one, or numbers from a paper.",
           ""]
    if smoke_test(board):
        out[2:2] = [f"> **Smoke test.** {md_escape(smoke_test(board))}", ""]
    if board.references:
        out += [f"{REFERENCE_MARK} {REFERENCE_NOTE}: "
                + ", ".join(md_code(r) for r in board.references) + ".", ""]
    if board.skipped:
        out += ["## Skipped results folders", "", "These were not merged:", ""]
        out += _table(["folder", "problem", "reason"], [
            [md_code(s.folder), s.problem, md_escape(s.reason)] for s in board.skipped])
        out.append("")
    if not secs:
        out += ["No current results yet.", ""]
    for section in secs:
        out += _section(board, section)
        if section.track == FIRESPREAD and firespread_report:
            out += ["Seed 003's Fig. 3 (SD[Z_t] over t per S-Level, from the statistic) and the F2R-vs-F2S "
                    "table by Var[Z_t] (all S-Levels pooled, with the ECE floor): "
                    "[`firespread/README.md`](firespread/README.md).", ""]
    out += _glossary(secs)
    return "\n".join(out).rstrip("\n") + "\n"


def _glossary(secs: list[Section]) -> list[str]:
    """What every metric in the tables above is (from the metric registry)."""
    entries = glossary({m for s in secs for m in s.metrics})
    if not entries:
        return []
    rows = [[md_code(e["name"]), md_escape(e["label"]), e["better"], e["range"], md_escape(e["unit"]),
             e["interval"], md_escape(e["description"])] for e in entries]
    return ["## Metrics", "", "Direction, range and meaning of every metric above, from the metric registry "
            "(`aegisbench.metrics`).", "",
            *_table(["metric", "label", "better", "range", "unit", "interval", "description"], rows), ""]
