"""Deterministic SVG plots of the leaderboard (matplotlib, no pyplot global state).

Severity curves: one panel per corruption, severity on x (0 = the model's own clean),
one line per model with its interval as a band; collapses (value 0, interval [0, 0])
are drawn as crosses. Same inputs give the same bytes (fixed ``svg.hashsalt``, no date).

>>> mpl_text("cost $5 <b>")
'cost \\\\$5 <b>'
"""

from __future__ import annotations

import io
import math
import re

import matplotlib
from matplotlib.figure import Figure

from pathlib import Path

from aegisbench.atomic import atomic_write_bytes
from aegisbench.leaderboard.tables import REFERENCE_MARK, Section, fixed_scale, is_collapse, label, slug
from aegisbench.vocab import CLEAN

RC = {"svg.hashsalt": "aegisbench-leaderboard", "svg.fonttype": "none", "font.family": "DejaVu Sans",
      "font.size": 9, "axes.spines.top": False, "axes.spines.right": False}


def mpl_text(text: str) -> str:
    """Text matplotlib shows literally (``$`` would otherwise start mathtext)."""
    return str(text).replace("$", r"\$")


def series_key(cond: dict) -> str:
    """The curve a condition belongs to: its corruption, else its config without the level."""
    return cond["corruption"] or re.sub(r"_s?\d+$", "", cond["config"])


def tick_label(cond: dict) -> str:
    """``clean``, ``s2`` for a corruption severity, else the config's own level (``s30``)."""
    if cond["config"] == CLEAN:
        return CLEAN
    if cond["corruption"]:
        return f"s{cond['severity']}"
    m = re.search(r"_(s?\d+)$", cond["config"])
    return m.group(1) if m else cond["config"]


def curve_keys(section: Section) -> list[str]:
    """The panels of a section's severity curves: one per corruption built for its source."""
    keys: list[str] = []
    for c in section.conditions:
        if c["config"] != CLEAN and series_key(c) not in keys:
            keys.append(series_key(c))
    return keys


def severity_curves_svg(section: Section, metric: str, max_cols: int = 5) -> bytes | None:
    """Small multiples of metric vs severity per corruption, at most ``max_cols`` panels a
    row (3 in each: 1 fits a phone); None if there is nothing to draw."""
    keys = curve_keys(section)
    if not keys or metric not in section.metrics:
        return None
    ncols = min(max_cols, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    with matplotlib.rc_context(RC):
        legend_rows = math.ceil(len(section.models) / max(1, min(4, int(3.0 * ncols / 2.2))))
        width, top, bottom = 3.0 * ncols, 0.25 + 0.22 * legend_rows, 0.45
        height = 2.3 * nrows + top + bottom
        fig = Figure(figsize=(width, height))
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True, gridspec_kw={
            "left": 0.62 / width, "right": 1 - 0.12 / width, "top": 1 - top / height,
            "bottom": bottom / height, "wspace": 0.12, "hspace": 0.42})
        handles: dict = {}
        for i, key in enumerate(keys):
            _panel(axes[i // ncols][i % ncols], section, key, metric, handles, ylabel=i % ncols == 0)
        for j in range(len(keys), nrows * ncols):
            axes[j // ncols][j % ncols].set_visible(False)
        order = [m.submission for m in section.models]
        hs = [handles[k] for k in sorted(handles, key=order.index)]
        per_row = max(1, min(len(hs), 4, int(3.0 * ncols / 2.2)))
        if hs:
            fig.legend([h[0] for h in hs], [h[1] for h in hs], loc="upper center",
                       ncol=per_row, frameon=False, fontsize=8.5)
        fig.text(0.995, 0.005, "band: 95% interval · ×: collapse, interval [0, 0]", ha="right",
                 va="bottom", fontsize=7.5, color="#555555")
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def write_curves(section: Section, metrics, out: Path, written: list[Path]) -> dict:
    """Write the severity curves of ``section`` for each of ``metrics`` under ``out/plots/``:
    ``curves-<anchor>-<metric>.svg`` (up to 5 panels a row) and, when that has more than one
    panel a row, ``...-narrow.svg`` with one (what a 400 px screen shows at full size).
    Returns ``{(anchor, metric): {"wide": name, "narrow": name or ""}}``."""
    found = {}
    variants = (("wide", 5, ""), ("narrow", 1, "-narrow")) if len(curve_keys(section)) > 1 else (("wide", 5, ""),)
    for metric in metrics:
        names = {"narrow": ""}
        for variant, cols, suffix in variants:
            svg = severity_curves_svg(section, metric, max_cols=cols)
            if svg is None:
                break
            names[variant] = f"plots/curves-{section.anchor}-{slug(metric)}{suffix}.svg"
            atomic_write_bytes(out / names[variant], svg)
            written.append(out / names[variant])
        if "wide" in names:
            found[(section.anchor, metric)] = names
    return found


def _panel(ax, section: Section, key: str, metric: str, handles: dict, ylabel: bool) -> None:
    """One corruption's panel: the clean condition and the series ``key``, one line per model
    (its first line goes into ``handles`` for the legend)."""
    conds = [c for c in section.conditions if c["config"] == CLEAN] + \
            [c for c in section.conditions if c["config"] != CLEAN and series_key(c) == key]
    family = next((c["family"] for c in conds if c["family"]), None)
    for m in section.models:
        pts = _points(section, m.submission, conds, metric)
        if not pts:
            continue
        xs, vs, los, his, col = zip(*pts)
        ax.fill_between(xs, los, his, color=m.colour, alpha=0.16, linewidth=0)
        (line,) = ax.plot(xs, vs, color=m.colour, marker="o", markersize=3.5, linewidth=1.6)
        cx = [x for x, c in zip(xs, col) if c]
        if cx:
            ax.plot(cx, [0.0] * len(cx), linestyle="none", marker="X", markersize=8,
                    color=m.colour, markeredgecolor="black", markeredgewidth=0.6)
        name = f"{m.model} {REFERENCE_MARK} reference" if m.reference else m.model
        handles.setdefault(m.submission, (line, mpl_text(name)))
    ax.set_title(mpl_text(f"{key}" + (f" · {family}" if family else "")), fontsize=9.5)
    ticks = {c["severity"]: tick_label(c) for c in conds}
    ax.set_xticks(sorted(ticks), [ticks[s] for s in sorted(ticks)])
    ax.grid(axis="y", color="#dddddd", linewidth=0.6)
    fixed = fixed_scale(metric)
    if fixed is not None:
        pad = 0.03 * (fixed[1] - fixed[0])
        ax.set_ylim(fixed[0] - pad, fixed[1] + pad)
    if ylabel:
        ax.set_ylabel(mpl_text(label(metric, section.track)))


def _points(section: Section, submission: str, conds: list[dict], metric: str) -> list[tuple]:
    """``(severity, value, lo, hi, collapsed)`` of one model over ``conds`` (conditions without
    a value are left out; a missing bound is the value)."""
    pts = []
    for c in conds:
        cell = section.cell(submission, c["config"], metric)
        if cell and cell["value"] is not None:
            v = cell["value"]
            lo = v if cell["lo"] is None else cell["lo"]
            hi = v if cell["hi"] is None else cell["hi"]
            pts.append((c["severity"], v, lo, hi, is_collapse(metric, v, cell["lo"], cell["hi"])))
    return pts
