"""Presentation-neutral tables shared by the Markdown and the HTML renderers.

A ``Section`` is one track and source: its models (reference submissions first, then
alphabetical — there is no overall rank), its ordered conditions and a cell lookup.
Number formatting, colour scales and the collapse / silent-failure markers live here so
both renderers agree.

>>> fmt_value("recall", 0.7451), fmt_value("fp", 655.0), fmt_interval("recall", 0.0, 0.0)
('0.745', '655', '[0.000, 0.000]')
>>> fmt_value("precision", None, "0/0"), fmt_value("recall", None, "not physical for thermal")
('n/a (0/0)', 'n/a (not physical for thermal)')
>>> fmt_interval("recall", 0.7, 0.79, compact=True), fmt_value("brier", -0.0004)
('.70–.79', '0.000')
>>> heading("fp")
'FP count (boxes; lower is better)'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import polars as pl
from matplotlib import colormaps, colors

from aegisbench.leaderboard.aggregate import Board, conditions, direction, headline
from aegisbench.metrics import REGISTRY, selection
from aegisbench.metrics import label as metric_label
from aegisbench.vocab import FIRESPREAD, TRACKS

# Which metrics each view shows (lists of registered names, checked on import); what a
# metric is (direction, bounds, unit, label) is the registry's, never a list here.
DETECTION_HEAT = selection("recall", "precision", "f1", "map50", "fp", "relative_drop_recall", "time_to_detect_min")
F2R_HEAT = selection("f1", "precision", "recall", "average_precision", "auc_pr_trapezoid")
F2S_HEAT = selection("brier", "ece", "ece_seed003", "excess_brier", "brier_reliability", "brier_resolution")
CMAP = colormaps["RdYlBu"]
COLLAPSE_BG = "#141414"
MODEL_COLOURS = [colors.to_hex(c) for c in colormaps["tab10"].colors]
REFERENCE_MARK = "†"
REFERENCE_NOTE = ("reference submission: the reference detector, trained inside this pipeline from its "
                  "YAML config (dvc.yaml); it is the default row, listed first in every table")


def label(metric: str, track: str | None = None) -> str:
    """Display name from the registry (on fire spread, plain names say F2R or F2S); an
    unregistered name is shown as itself."""
    return metric_label(metric, track)


def is_count(metric: str) -> bool:
    """A registered integer count (shown without decimals, coloured on a square-root scale)."""
    spec = REGISTRY.get(metric)
    return spec is not None and spec.integer


def fixed_scale(metric: str) -> tuple[float, float] | None:
    """The registered bounds when the metric is drawn on them (``full_scale``), else None."""
    spec = REGISTRY.get(metric)
    return spec.bounds if spec is not None and spec.full_scale else None


def _bound(v: float) -> str:
    return "∞" if v == math.inf else "-∞" if v == -math.inf else f"{v:g}"


def glossary(metrics) -> list[dict]:
    """One entry per metric of ``metrics`` (registry order, unregistered ones last): name,
    label, direction, range, unit, interval and the one-line description."""
    present = set(metrics)
    out = []
    for spec in REGISTRY:
        if spec.name in present:
            lo, hi = spec.bounds
            out.append({"name": spec.name, "label": spec.label, "description": spec.description,
                        "better": {1: "higher", -1: "lower", None: "—"}[spec.sign], "unit": spec.unit,
                        "range": f"{'(' if lo == -math.inf else '['}{_bound(lo)}, {_bound(hi)}"
                                 f"{')' if hi == math.inf else ']'}",
                        "interval": "yes" if spec.interval else "no"})
    for name in sorted(present - set(REGISTRY.names())):
        out.append({"name": name, "label": name, "description": "not a registered metric", "better": "—",
                    "unit": "", "range": "", "interval": ""})
    return out


def description(metric: str) -> str:
    """The registered one-line description ('' for an unregistered name)."""
    spec = REGISTRY.get(metric)
    return "" if spec is None else spec.description


BETTER = {1: "higher is better", -1: "lower is better", None: "no better direction"}


def better(metric: str) -> str:
    """The registered direction in words: ``higher is better`` / ``lower is better``
    (``no better direction`` for an unordered or unregistered metric)."""
    return BETTER[direction(metric)]


def unit(metric: str) -> str:
    """The registered unit ('' when the metric has none or is not registered)."""
    spec = REGISTRY.get(metric)
    return "" if spec is None else spec.unit


def heading(metric: str, track: str | None = None) -> str:
    """Label, unit and direction in one line, all from the registry:
    ``False positives (count; lower is better)``."""
    text = label(metric, track)
    u = unit(metric)
    parts = [x for x in (u if u and f"({u})" not in text and f" {u} " not in f"{text} " else "",
                         "" if "better" in text else better(metric)) if x]
    return f"{text} ({'; '.join(parts)})" if parts else text


NA = "n/a"


def fmt_value(metric: str, value: float | None, note: str | None = None) -> str:
    """A value as shown; a null one is "n/a" with its reason (the row's ``note``), never 0."""
    if value is None:
        return f"{NA} ({note})" if note else NA
    if is_count(metric):
        return f"{value:.0f}"
    # round first and add 0.0: a value that rounds to zero never prints as "-0.000"
    return f"{round(value, 3) + 0.0:.3f}" if abs(value) < 100 else f"{round(value, 1) + 0.0:.1f}"


def fmt_interval(metric: str, lo: float | None, hi: float | None, compact: bool = False) -> str:
    if lo is None or hi is None:
        return ""
    if compact:  # heat-map cells: two decimals, no leading zero for values in [0, 1)
        if is_count(metric):
            return f"{lo:.0f}–{hi:.0f}"
        if lo == 0 and hi == 0:
            return "[0, 0]"
        return "–".join(re.sub(r"^(-?)0\.", r"\1.", f"{round(x, 2) + 0.0:.2f}") for x in (lo, hi))
    return f"[{fmt_value(metric, lo)}, {fmt_value(metric, hi)}]"


SMOKE_TEST_IMAGES = 10  # fewer clean test images than this per source: a smoke test, not a benchmark


def release(board: Board) -> str:
    """Whether the board's dataset digest is a released one (:mod:`aegisbench.releases`), in words."""
    from aegisbench.releases import release_note
    versions = sorted({p["dataset_version"] for p in board.provenance.values() if p.get("status") != "published"})
    return release_note(board.expect.dataset_digest, versions[0] if versions else "?")


def smoke_test(board: Board) -> str | None:
    """The banner of a page built on tiny data (``aegisbench run --fast``), else None."""
    sizes = dict(board.test_images)
    if not sizes or max(sizes.values()) >= SMOKE_TEST_IMAGES:
        return None
    each = ", ".join(f"{n} {src}" for src, n in sizes.items())
    return (f"Smoke test on tiny data, not a benchmark result: {each} clean test image(s) per source "
            f"(fewer than {SMOKE_TEST_IMAGES}; the fast variant, aegisbench run --fast). The numbers show that "
            "the pipeline runs end to end; zeros and wide intervals here say nothing about the models.")


def is_collapse(metric: str, value, lo, hi) -> bool:
    """Value 0 with a degenerate [0, 0] interval on a higher-is-better metric (never a null value)."""
    return direction(metric) == 1 and value is not None and value == 0 and lo == 0 and hi == 0


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
    status: str = "self-reported"  # verified / self-reported / published: marked wherever the model is named
    copies_labels: bool = False  # its clean test boxes copy the published test labels (flagged, not hidden)


@dataclass(frozen=True)
class Section:
    track: str
    source: str
    models: tuple[ModelRow, ...]
    conditions: tuple[dict, ...]
    metrics: tuple[str, ...]
    cells: dict = field(repr=False)
    # conditions of the track not built for this source's sensor (noted "not physical for <sensor>"
    # by the evaluator): never a column, a row or a panel, one note per source (``sensor``)
    not_built: tuple[dict, ...] = ()
    sensor: str | None = None

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
        if self.track == FIRESPREAD:
            groups = [("F2R — fidelity to realization", F2R_HEAT), ("F2S — fidelity to statistic", F2S_HEAT)]
        else:
            groups = [("", DETECTION_HEAT)]
        out = [(t, [m for m in ms if m in self.metrics]) for t, ms in groups]
        return [(t, ms) for t, ms in out if ms]

    def scale(self, metric: str) -> tuple[float, float]:
        """Colour scale bounds: the registered bounds of a ``full_scale`` metric, else
        [min(0, the smallest value), the largest magnitude]."""
        fixed = fixed_scale(metric)
        if fixed is not None:
            return fixed
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
    if is_count(metric) and lo >= 0:  # square-root scale: one huge count does not wash out the rest
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
            mine = part.filter(pl.col("submission") == sub)
            models.append(ModelRow(sub, p["model"], p["team"], p["name"], mine["frozen_threshold"][0], colour[sub],
                                   f"models/{slug(sub)}.html", sub in refs,
                                   board.statuses.get(sub, ("self-reported", None))[0],
                                   bool(mine["matches_test_labels"].any())))
        cells = {(r["submission"], r["config"], r["metric"]): {k: r[k] for k in ("value", "lo", "hi", "n", "note")}
                 for r in part.iter_rows(named=True)}
        metrics = set(part["metric"].to_list())
        if "recall" in metrics and "relative_drop_recall" not in metrics:
            # the evaluator gave no drop with its own interval: show the point drop from the recall cells
            drops = board.drops.filter((pl.col("track") == track) & (pl.col("source") == source)
                                       & (pl.col("metric") == "recall") & pl.col("relative_drop").is_not_null())
            for r in drops.iter_rows(named=True):
                cells[(r["submission"], r["config"], "relative_drop_recall")] = {
                    "value": r["relative_drop"], "lo": None, "hi": None, "n": None, "note": None}
            if drops.height:
                metrics.add("relative_drop_recall")
        built, skipped, sensor = split_not_built(part, conditions(long, track, source))
        out.append(Section(track, source, tuple(models), tuple(built), tuple(sorted(metrics)), cells,
                           tuple(skipped), sensor))
    return out


# the evaluator's note on a condition not built for a source's sensor (evaluation.detection.not_physical_note)
NOT_PHYSICAL = re.compile(r"not physical for (\S+)")


def split_not_built(part: pl.DataFrame, conds: list[dict]) -> tuple[list[dict], list[dict], str | None]:
    """``(built, not_built, sensor)`` of one section's conditions: a condition is not built when
    its rows hold no value and a note says ``not physical for <sensor>``."""
    if part.height == 0 or "note" not in part.columns:
        return conds, [], None
    found = (part.group_by("config").agg(pl.col("value").is_not_null().any().alias("scored"),
                                         pl.col("note").str.extract(f"^{NOT_PHYSICAL.pattern}$").drop_nulls()
                                         .first().alias("sensor"))
             .filter(~pl.col("scored") & pl.col("sensor").is_not_null()))
    skip = dict(found.select("config", "sensor").iter_rows())
    sensors = sorted(set(skip.values()))
    return ([c for c in conds if c["config"] not in skip], [c for c in conds if c["config"] in skip],
            ", ".join(sensors) or None)


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
