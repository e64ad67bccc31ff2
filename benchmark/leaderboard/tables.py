"""Presentation-neutral tables shared by the Markdown and the HTML renderers.

A ``Section`` is one track and source: its models (reference submissions first, then
alphabetical — there is no overall rank), its ordered conditions and a cell lookup.
Number formatting, colour scales and the collapse / silent-failure markers live here so
both renderers agree.

>>> fmt_value("recall", 0.7451), fmt_value("fp", 655.0), fmt_interval("recall", 0.0, 0.0)
('0.745', '655', '[0.000, 0.000]')
>>> fmt_interval("recall", 0.7, 0.79, compact=True)
'.70–.79'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import polars as pl
from matplotlib import colormaps, colors

from aegisbench.leaderboard.aggregate import Board, conditions, direction, headline
from aegisbench.leaderboard.results import TRACKS

COUNT_METRICS = frozenset({"tp", "fp", "fn"})
UNIT_METRICS = frozenset({  # bounded in [0, 1] and drawn on the full [0, 1] scale
    "recall", "precision", "f1", "map50", "map50_95", "loc_iou", "silent_failure", "alpha", "beta",
    "gamma", "average_precision", "auc_pr_trapezoid", "f2r_precision", "f2r_recall", "f2r_f1", "f2r_ap"})
DETECTION_HEAT = ("recall", "precision", "f1", "map50", "fp", "relative_drop_recall", "time_to_detect_min")
# fire spread: the evaluator's plain names, or the f2r_/f2s_ prefixed ones
F2R_HEAT = ("f1", "f2r_f1", "precision", "f2r_precision", "recall", "f2r_recall", "average_precision",
            "f2r_ap", "auc_pr_trapezoid")
F2S_HEAT = ("brier", "f2s_brier", "ece", "f2s_ece", "excess_brier", "brier_reliability", "brier_resolution")
F2R_PLAIN = frozenset({"precision", "recall", "f1", "average_precision", "auc_pr_trapezoid"})
LABELS = {
    "recall": "Recall", "precision": "Precision", "f1": "F1", "map50": "mAP50", "map50_95": "mAP50-95",
    "tp": "TP count", "fp": "FP count", "fn": "FN count", "loc_iou": "Localization IoU",
    "relative_drop_recall": "Recall drop vs own clean", "silent_failure": "Silent failure",
    "time_to_detect_min": "Time to detect (min)", "warp_map_loss": "WARP mAP loss % (lower is better)",
    "f2r_precision": "F2R precision", "f2r_recall": "F2R recall", "f2r_f1": "F2R F1",
    "f2r_ap": "F2R AP", "f2s_brier": "F2S Brier", "f2s_ece": "F2S ECE", "excess_brier": "Excess Brier",
    "average_precision": "AP", "auc_pr_trapezoid": "AUC-PR (trapezoid)", "brier": "Brier", "ece": "ECE",
    "brier_reliability": "Brier reliability", "brier_resolution": "Brier resolution",
    "brier_uncertainty": "Brier uncertainty", "oracle_brier": "Oracle Brier",
}
CMAP = colormaps["RdYlBu"]
COLLAPSE_BG = "#141414"
MODEL_COLOURS = [colors.to_hex(c) for c in colormaps["tab10"].colors]
REFERENCE_MARK = "†"
REFERENCE_NOTE = ("reference submission: the reference detector, trained inside this pipeline from its "
                  "YAML config (dvc.yaml); it is the default row, listed first in every table")


def label(metric: str, track: str | None = None) -> str:
    """Display name; on the fire-spread track plain names say whether they are F2R or F2S."""
    text = LABELS.get(metric, metric)
    if track == "firespread" and not metric.startswith(("f2r_", "f2s_")):
        if metric in F2R_PLAIN:
            return f"F2R {text[0].lower() + text[1:] if text[1:2].islower() else text}"
        if metric in F2S_HEAT:
            return f"F2S {text}"
    return text


def fmt_value(metric: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if metric in COUNT_METRICS:
        return f"{value:.0f}"
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def fmt_interval(metric: str, lo: float | None, hi: float | None, compact: bool = False) -> str:
    if lo is None or hi is None:
        return ""
    if compact:  # heat-map cells: two decimals, no leading zero for values in [0, 1)
        if metric in COUNT_METRICS:
            return f"{lo:.0f}–{hi:.0f}"
        if lo == 0 and hi == 0:
            return "[0, 0]"
        return "–".join(re.sub(r"^(-?)0\.", r"\1.", f"{x:.2f}") for x in (lo, hi))
    return f"[{fmt_value(metric, lo)}, {fmt_value(metric, hi)}]"


def is_collapse(metric: str, value, lo, hi) -> bool:
    """Value 0 with a degenerate [0, 0] interval on a higher-is-better metric."""
    return direction(metric) == 1 and value == 0 and lo == 0 and hi == 0


@dataclass(frozen=True)
class ModelRow:
    submission: str
    model: str
    team: str
    name: str
    threshold: float | None
    colour: str
    page: str
    reference: bool = False  # named with --reference: listed first, marked in every table


@dataclass(frozen=True)
class Section:
    track: str
    source: str
    models: tuple[ModelRow, ...]
    conditions: tuple[dict, ...]
    metrics: tuple[str, ...]
    cells: dict = field(repr=False)

    @property
    def anchor(self) -> str:
        return slug(f"{self.track}-{self.source}")

    def cell(self, submission: str, config: str, metric: str) -> dict | None:
        return self.cells.get((submission, config, metric))

    def silent(self, submission: str, config: str) -> bool:
        c = self.cell(submission, config, "silent_failure")
        return bool(c and c["value"] is not None and c["value"] >= 0.5)

    def heat_groups(self) -> list[tuple[str, list[str]]]:
        """The switchable heat-map metrics; fire spread shows F2R and F2S side by side."""
        if self.track == "firespread":
            groups = [("F2R — fidelity to realization", F2R_HEAT), ("F2S — fidelity to statistic", F2S_HEAT)]
        else:
            groups = [("", DETECTION_HEAT)]
        out = [(t, [m for m in ms if m in self.metrics]) for t, ms in groups]
        return [(t, ms) for t, ms in out if ms]

    def scale(self, metric: str) -> tuple[float, float]:
        """Colour scale bounds: [0, 1] for unit metrics, else [0, the largest value]."""
        if metric in UNIT_METRICS:
            return 0.0, 1.0
        vals = [c["value"] for k, c in self.cells.items() if k[2] == metric and c["value"] is not None]
        top = max([abs(v) for v in vals] + [1e-12])
        return (min(0.0, min(vals, default=0.0)), top)


def slug(text: str) -> str:
    """A file- and id-safe name; a short hash keeps different texts apart."""
    import hashlib
    import re

    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "x"
    if clean == text and len(clean) <= 80:
        return clean
    return f"{clean[:60]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def heat_colour(section: Section, metric: str, value: float | None, collapse: bool = False) -> tuple[str, str]:
    """(background, text colour) of a heat-map cell; red is worse, blue is better, collapse black."""
    if value is None:
        return "#e6e6e6", "#333333"
    if collapse:
        return COLLAPSE_BG, "#ffffff"
    lo, hi = section.scale(metric)
    if metric in COUNT_METRICS and lo >= 0:  # square-root scale: one huge count does not wash out the rest
        value, lo, hi = (math.sqrt(max(x, 0.0)) for x in (value, lo, hi))
    t = 0.5 if hi <= lo else min(max((value - lo) / (hi - lo), 0.0), 1.0)
    if direction(metric) == -1:
        t = 1.0 - t
    rgba = CMAP(0.04 + 0.92 * t)
    lum = 0.2126 * rgba[0] + 0.7152 * rgba[1] + 0.0722 * rgba[2]
    return colors.to_hex(rgba), "#ffffff" if lum < 0.45 else "#111111"


def colour_stops(metric: str, n: int = 11) -> list[str]:
    """Colours from worst to best for the legend bar."""
    return [colors.to_hex(CMAP(0.04 + 0.92 * i / (n - 1))) for i in range(n)]


def sections(board: Board) -> list[Section]:
    """One section per (track, source), in sorted order."""
    long = board.long
    subs = sorted(board.provenance)
    colour = {s: MODEL_COLOURS[i % len(MODEL_COLOURS)] for i, s in enumerate(subs)}
    out = []
    track_rank = {t: i for i, t in enumerate(TRACKS)}
    for track, source in sorted(set(long.select("track", "source").iter_rows()),
                                key=lambda ts: (track_rank.get(ts[0], len(TRACKS)), ts)):
        part = headline(long).filter((pl.col("track") == track) & (pl.col("source") == source))
        models = []
        refs = set(board.references)
        for sub in sorted(set(part["submission"].to_list()),
                          key=lambda s: (s not in refs, board.provenance[s]["model"].casefold(), s)):
            p = board.provenance[sub]
            thr = part.filter(pl.col("submission") == sub)["frozen_threshold"][0]
            models.append(ModelRow(sub, p["model"], p["team"], p["name"], thr, colour[sub],
                                   f"models/{slug(sub)}.html", sub in refs))
        cells = {(r["submission"], r["config"], r["metric"]): {k: r[k] for k in ("value", "lo", "hi", "n")}
                 for r in part.iter_rows(named=True)}
        metrics = set(part["metric"].to_list())
        if "recall" in metrics and "relative_drop_recall" not in metrics:
            # the evaluator gave no drop with its own interval: show the point drop from the recall cells
            drops = board.drops.filter((pl.col("track") == track) & (pl.col("source") == source)
                                       & (pl.col("metric") == "recall") & pl.col("relative_drop").is_not_null())
            for r in drops.iter_rows(named=True):
                cells[(r["submission"], r["config"], "relative_drop_recall")] = {
                    "value": r["relative_drop"], "lo": None, "hi": None, "n": None}
            if drops.height:
                metrics.add("relative_drop_recall")
        out.append(Section(track, source, tuple(models), tuple(conditions(long, track, source)),
                           tuple(sorted(metrics)), cells))
    return out


def family_cells(board: Board, section: Section, metric: str) -> dict:
    """(submission, family, severity) -> family-summary row of one section and metric."""
    fam = board.families.filter((pl.col("track") == section.track) & (pl.col("source") == section.source)
                                & (pl.col("metric") == metric))
    return {(r["submission"], r["family"], r["severity"]): r for r in fam.iter_rows(named=True)}


def floor_rows(board: Board, section: Section, metric: str) -> dict:
    fl = board.floors.filter((pl.col("track") == section.track) & (pl.col("source") == section.source)
                             & (pl.col("metric") == metric))
    return {r["submission"]: r for r in fl.iter_rows(named=True)}


def rank_groups(board: Board, section: Section, metric: str) -> list[tuple[dict, list[list[dict]]]]:
    """Per condition (in order), the tied groups best first."""
    rk = board.ranks.filter((pl.col("track") == section.track) & (pl.col("source") == section.source)
                            & (pl.col("metric") == metric))
    by_cfg: dict[str, list[list[dict]]] = {}
    for r in rk.iter_rows(named=True):
        groups = by_cfg.setdefault(r["config"], [])
        if len(groups) < r["group"]:
            groups.append([])
        groups[r["group"] - 1].append(r)
    return [(c, by_cfg[c["config"]]) for c in section.conditions if c["config"] in by_cfg]


def primary_metric(section: Section) -> str | None:
    groups = section.heat_groups()
    return groups[0][1][0] if groups else (section.metrics[0] if section.metrics else None)


def primary_metrics(section: Section) -> list[str]:
    """The headline metric of each heat-map group: recall (detection), or F2R and F2S (fire spread)."""
    groups = section.heat_groups()
    if groups:
        return [ms[0] for _, ms in groups]
    return [section.metrics[0]] if section.metrics else []
