"""The fire-spread report: seed 003's Fig. 3 (SD[Z_t] over t per S-Level) from the built
statistic, and its F2R-vs-F2S finding (Figs. 6-7) as a table stratified by Var[Z_t].

* ``sd_zt.csv`` / ``sd_zt.png``: ``E[Z_t]`` and ``SD[Z_t]`` (unburnt trees) of every test
  initial condition and S-Level, from the statistic (held-out realizations excluded). The
  figure draws SD[Z_t] over t per S-Level (mean over initial conditions, red at S = 0 to
  black at S = 50) and, beside it, max over t of SD[Z_t] against the S-Level (the page
  also gets the two panels stacked, 420 px wide, for a phone: ``figure_narrow``).
* ``f2r_vs_f2s.csv``: for every fire-spread result, the all-frames cells pooled over the
  S-Levels (``strata.parquet`` of the evaluator), per ``Var[Z_t]`` stratum: F2R (F1,
  precision, recall, AP, AUC-PR) beside F2S (Brier, ECE, seed 003's per-map ECE and the ECE's
  finite-sample floor) and
  the spread over maps of per-map scores (Fig. 7).
* ``README.md``: both as Markdown.

``aegisbench firespread-report`` writes them to a folder (atomically); ``aegisbench
leaderboard`` puts the same files under ``leaderboard/firespread/`` and on the page.

>>> var_order("var_z:0") < var_order("var_z:(0,1]") < var_order("var_z:>10000")
True
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from aegisbench.atomic import atomic_write_bytes, atomic_write_text

from aegisbench.staging import staged_dir
from aegisbench.errors import BadInput
from aegisbench.evaluation.firespread_scoring import VAR_EDGES
from aegisbench.leaderboard.markdown import md_code, md_escape
from aegisbench.leaderboard.results import check_strata
from aegisbench.metrics import label, selection
from aegisbench.results_schema import polars_schema
from aegisbench.vocab import FIRESPREAD, STRATA_FILE

log = logging.getLogger(__name__)

# the F2R-vs-F2S table's columns (registered names, checked on import; labels from the registry)
TABLE_METRICS = selection("f1", "precision", "recall", "average_precision", "auc_pr_trapezoid", "brier", "ece",
                          "ece_seed003", "ece_floor", "f1_sd_maps", "average_precision_sd_maps", "brier_sd_maps")


def var_order(stratum: str) -> float:
    """Sort key of a ``Var[Z_t]`` stratum label (``all`` first)."""
    if stratum == "all":
        return -2.0
    if stratum == "var_z:0":
        return -1.0
    if stratum.startswith("var_z:>"):
        return float(VAR_EDGES[-1]) + 1
    lo = stratum[len("var_z:("):].split(",")[0]
    return float(lo)


@dataclass(frozen=True)
class FirespreadReport:
    sd_zt: pl.DataFrame        # s_level, initial_condition, t, z_mean, sd_z
    strata: pl.DataFrame       # submission, stratum, metric, value, lo, hi, n
    figure: bytes              # PNG of Fig. 3
    figure_narrow: bytes = b""  # the same, panels stacked (what a 400 px screen shows at full size)

    def files(self) -> dict[str, bytes]:
        return {"sd_zt.csv": _csv(self.sd_zt), "sd_zt.png": self.figure,
                "f2r_vs_f2s.csv": _csv(self.strata), "README.md": render_markdown(self).encode()}


def _csv(df: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    df.write_csv(buf, float_precision=6)
    return buf.getvalue()


def sd_zt_table(dataset: str | Path, manifest: dict | None = None) -> pl.DataFrame:
    """``E[Z_t]`` and ``SD[Z_t]`` per (S-Level, test initial condition, frame)."""
    from aegisbench.dataset.verify import require_verified
    from aegisbench.dataset.firespread_truth import read_statistic
    manifest = manifest if manifest is not None else require_verified(dataset)
    stats, _task = read_statistic(dataset, manifest)
    cols: dict[str, list] = {"s_level": [], "initial_condition": [], "t": [], "z_mean": [], "sd_z": []}
    for (s, ic), st in sorted(stats.items()):
        n = len(st.z_var)
        cols["s_level"] += [s] * n
        cols["initial_condition"] += [ic] * n
        cols["t"] += list(range(n))
        cols["z_mean"] += st.z_mean.tolist()
        cols["sd_z"] += np.sqrt(st.z_var).tolist()
    return pl.DataFrame(cols, schema={"s_level": pl.Int32, "initial_condition": pl.Int32, "t": pl.Int32,
                                      "z_mean": pl.Float64, "sd_z": pl.Float64})


def max_sd_by_level(sd_zt: pl.DataFrame) -> pl.DataFrame:
    """Max over t of SD[Z_t] per S-Level: mean, min and max over the initial conditions."""
    per_ic = sd_zt.group_by("s_level", "initial_condition").agg(pl.col("sd_z").max().alias("max_sd"))
    return (per_ic.group_by("s_level").agg(pl.col("max_sd").mean().alias("mean"), pl.col("max_sd").min().alias("lo"),
                                           pl.col("max_sd").max().alias("hi")).sort("s_level"))


def fig3_png(sd_zt: pl.DataFrame, narrow: bool = False) -> bytes:
    """Seed 003 Fig. 3 from the statistic: SD[Z_t] over t per S-Level, and max_t SD[Z_t]
    (``narrow``: stacked, 4.2 in wide, instead of side by side)."""
    import matplotlib
    from matplotlib.figure import Figure

    levels = sorted(set(sd_zt["s_level"].to_list()))
    t_end = int(sd_zt["t"].max()) if sd_zt.height else 0
    with matplotlib.rc_context({"font.family": "DejaVu Sans", "font.size": 9, "axes.spines.top": False,
                                "axes.spines.right": False}):
        fig = Figure(figsize=(4.2, 6.4) if narrow else (9.5, 3.6), dpi=100)
        ax, ax2 = (fig.subplots(2, 1, gridspec_kw={"height_ratios": [1.3, 1], "hspace": 0.45}) if narrow else
                   fig.subplots(1, 2, gridspec_kw={"width_ratios": [2.2, 1], "wspace": 0.28}))
        for i, s in enumerate(levels):
            series = []
            for _, d in sorted(sd_zt.filter(pl.col("s_level") == s).group_by("initial_condition")):
                v = d.sort("t")["sd_z"].to_numpy()  # Z_t stays put once nothing burns: carry the last value
                series.append(np.concatenate([v, np.full(t_end + 1 - len(v), v[-1] if len(v) else 0.0)]))
            frac = i / max(1, len(levels) - 1)
            ax.plot(np.arange(t_end + 1), np.mean(series, axis=0), color=(0.85 * (1 - frac), 0.05, 0.05),
                    linewidth=1.4, label=f"S{s}")
        ax.set_xlabel("frame t")
        ax.set_ylabel("SD[Z_t] (unburnt trees)")
        ax.set_title("SD[Z_t] over t per S-Level\n(mean over test initial conditions)" if narrow else
                     "SD[Z_t] over t per S-Level (mean over test initial conditions)", fontsize=9)
        ax.legend(fontsize=7, ncol=2, frameon=False)
        ax.grid(color="#e5e5e5", linewidth=0.6)
        m = max_sd_by_level(sd_zt)
        x = m["s_level"].to_numpy()
        ax2.fill_between(x, m["lo"].to_numpy(), m["hi"].to_numpy(), color="#c0392b", alpha=0.18, linewidth=0)
        ax2.plot(x, m["mean"].to_numpy(), color="#c0392b", marker="o", markersize=3.5)
        ax2.set_xlabel("S-Level")
        ax2.set_ylabel("max over t of SD[Z_t]")
        ax2.set_title("max over t (band: range over ICs)", fontsize=9)
        ax2.grid(color="#e5e5e5", linewidth=0.6)
        fig.subplots_adjust(**({"left": 0.17, "right": 0.96, "bottom": 0.08, "top": 0.92} if narrow else
                               {"left": 0.07, "right": 0.98, "bottom": 0.14, "top": 0.9}))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def strata_table(results: str | Path | Mapping[str, Path], submissions) -> pl.DataFrame:
    """The pooled ``Var[Z_t]``-stratified rows of the given fire-spread results (``results``:
    the folder holding ``<submission>/``, or each submission's own results folder by name)."""
    schema = polars_schema("submission", "stratum", "metric", "value", "lo", "hi", "n")
    frames = []
    for sub in sorted(submissions):
        path = (Path(results[sub]) if isinstance(results, Mapping) else Path(results) / sub) / STRATA_FILE
        if not path.is_file():
            raise BadInput(f"no {STRATA_FILE}: re-run `aegisbench evaluate` on this submission", where=str(path))
        try:
            df = pl.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is bad input
            raise BadInput(f"unreadable Parquet: {exc}", where=str(path)) from None
        df = check_strata(df, str(path))
        frames.append(df.filter(pl.col("metric").is_in(TABLE_METRICS))
                      .select(pl.lit(sub).alias("submission"), "stratum", "metric", "value", "lo", "hi",
                              pl.col("n").cast(schema["n"])))
    if not frames:
        return pl.DataFrame(schema=schema)
    df = pl.concat(frames)
    order = {m: i for i, m in enumerate(TABLE_METRICS)}
    return (df.with_columns(pl.col("stratum").map_elements(var_order, return_dtype=pl.Float64).alias("_s"),
                            pl.col("metric").replace_strict(order, return_dtype=pl.Int64).alias("_m"))
            .sort("submission", "_s", "_m").drop("_s", "_m"))


def build_report(dataset: str | Path, results: str | Path | Mapping[str, Path], submissions,
                 manifest: dict | None = None
                 ) -> FirespreadReport:
    sd = sd_zt_table(dataset, manifest)
    return FirespreadReport(sd_zt=sd, strata=strata_table(results, submissions), figure=fig3_png(sd),
                            figure_narrow=fig3_png(sd, narrow=True))


def _cell(row: dict | None) -> str:
    if row is None or row["value"] is None:
        return "n/a"
    v = f"{row['value']:.3f}"
    if row["lo"] is not None and row["hi"] is not None and np.isfinite(row["lo"]) and np.isfinite(row["hi"]):
        v += f" [{row['lo']:.3f}, {row['hi']:.3f}]"
    return v


def table_views(report: FirespreadReport) -> list[dict]:
    """Per submission: header labels and one row per stratum (pooled over S-Levels)."""
    out = []
    df = report.strata
    for sub in sorted(set(df["submission"].to_list())):
        d = df.filter(pl.col("submission") == sub)
        cells = {(r["stratum"], r["metric"]): r for r in d.iter_rows(named=True)}
        strata = sorted({r["stratum"] for r in d.iter_rows(named=True)}, key=var_order)
        metrics = [m for m in TABLE_METRICS if any((s, m) in cells for s in strata)]
        rows = []
        for s in strata:
            n = next((cells[(s, m)]["n"] for m in metrics if (s, m) in cells and not m.endswith("_sd_maps")), None)
            rows.append({"stratum": s, "n": n, "cells": [_cell(cells.get((s, m))) for m in metrics]})
        out.append({"submission": sub, "labels": [label(m, FIRESPREAD) for m in metrics], "rows": rows})
    return out


def render_markdown(report: FirespreadReport) -> str:
    m = max_sd_by_level(report.sd_zt)
    lines = ["# Fire-spread report (seed 003)", "",
             "## Fig. 3: spread of the macro variable Z_t (unburnt trees)", "",
             "![SD[Z_t] over t per S-Level](sd_zt.png)", "",
             "| S-Level | max over t of SD[Z_t] (mean over test ICs) | range over ICs |", "|---:|---:|---:|"]
    for r in m.iter_rows(named=True):
        lines.append(f"| {r['s_level']} | {r['mean']:.1f} | {r['lo']:.1f}–{r['hi']:.1f} |")
    lines += ["", "## F2R vs F2S, stratified by Var[Z_t] (all S-Levels pooled; 95% intervals over initial "
              "conditions)", "",
              "The ECE floor is the ECE of the statistic against as many realizations of its own ensemble: "
              "an ECE inside the floor's range is finite-sample noise, not miscalibration.", ""]
    for view in table_views(report):
        lines += [f"### {md_code(view['submission'])}", "", "| Var[Z_t] stratum | pixels | " + " | ".join(view["labels"]) + " |",
                  "|---|---:|" + "---:|" * len(view["labels"])]
        for r in view["rows"]:
            lines.append(f"| {md_escape(r['stratum'])} | {'' if r['n'] is None else r['n']} | " + " | ".join(r["cells"]) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def write_report(dataset: str | Path, results: str | Path, out: str | Path, submissions=None) -> list[Path]:
    """Write the report files into ``out`` (swapped in whole); ``submissions``: result ids
    (default: every ``results/*`` folder holding a ``strata.parquet``)."""
    results = Path(results)
    if submissions is None:
        submissions = sorted(p.parent.name for p in results.glob(f"*/{STRATA_FILE}")) if results.is_dir() else []
    report = build_report(dataset, results, submissions)
    out = Path(out)
    with staged_dir(out) as staging:
        for name, data in report.files().items():
            if name.endswith(".md"):
                atomic_write_text(staging / name, data.decode())
            else:
                atomic_write_bytes(staging / name, data)
    return [out / n for n in sorted(report.files())]
