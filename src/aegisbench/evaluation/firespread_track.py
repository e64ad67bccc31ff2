"""The fire-spread track as a plug-in: its submissions are burn-probability maps
(``forecasts.parquet``, see :mod:`aegisbench.forecasters.submission`), scored against
the built ensembles (F2R against each held-out realization, F2S against the ensemble
statistic, stratified by ``Var[Z_t]`` and Dice; seed 003).

Rows of ``metrics.parquet`` use the shared results schema: ``track`` and ``source``
are ``firespread``, ``config`` is ``firespread_s<level>``, ``corruption`` is
``stochasticity``, ``family`` is ``firespread`` and ``severity`` the S-level; ``n`` is
the number of scored pixels (maps for ``*_sd_maps`` and ``ece_seed003``), ``n_units`` the initial
conditions with data (the bootstrap units). ``calibration.parquet`` holds the
calibration curve of every config and ``calibration.png`` draws them;
``strata.parquet`` (same columns) holds the all-frames cells pooled over every
S-level (config ``firespread_pooled``, severity null): the table behind seed 003's
F2R-vs-F2S finding (Figs. 6-7).

>>> get_track("firespread").kind
'forecast'
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from aegisbench.errors import BadInput
from aegisbench.evaluation.results import Evaluation, png_bytes, provenance, results_table
from aegisbench.evaluation.tracks import Track, get_track, register_track
from aegisbench.firespread.ensemble import burnt_masks, dice
from aegisbench.evaluation.firespread_scoring import MapSet, ScoreConfig, score_mapset, score_pooled
from aegisbench.forecasters.submission import FORECASTS, Key, expected_keys, read_forecasts
from aegisbench.dataset.firespread_truth import EnsembleTruth, TaskSpec, read_test_truth
from aegisbench.metrics.forecast import SEED003_ECE_BINS
from aegisbench.vocab import FIRESPREAD, STRATA_FILE

log = logging.getLogger(__name__)

POOLED_CONFIG = "firespread_pooled"
CALIBRATION_FILE = "calibration.parquet"
CALIBRATION_SCHEMA = pa.schema([("submission", pa.string()), ("config", pa.string()), ("severity", pa.int32()),
                                ("prob_pred", pa.float64()), ("prob_true", pa.float64()), ("count", pa.int64())])
ROW_COMMON = {"track": FIRESPREAD, "source": FIRESPREAD, "corruption": "stochasticity", "family": FIRESPREAD}


@dataclass(frozen=True, eq=False)
class Forecasts:
    """A validated fire-spread submission's maps with the dataset's truth and task."""

    maps: dict[Key, np.ndarray]
    truth: dict[tuple[int, int], EnsembleTruth]
    task: TaskSpec

    def __len__(self) -> int:
        return len(self.maps)

    def levels(self) -> list[int]:
        return sorted({s for s, _ in self.truth})


def all_keys(truth: dict[tuple[int, int], EnsembleTruth], task: TaskSpec) -> list[Key]:
    """Every forecast a complete submission holds."""
    levels = sorted({s for s, _ in truth})
    ics = sorted({ic for _, ic in truth})
    return expected_keys(levels, ics, task.eval_realizations, task.frames)


def read_forecast_predictions(folder: Path, meta, index, limits, warp_grid: int, problems
                              ) -> tuple[str, Forecasts | None, dict]:
    """The fire-spread ``Track.read``: ``forecasts.parquet`` checked against every test
    key of the dataset (the first problem is recorded; the maps are not read twice)."""
    path = folder / FORECASTS
    if not path.is_file():
        problems.add(str(path), None, None, f"{FORECASTS} not found (a fire-spread submission holds its maps there)")
        return "forecasts", None, {}
    if path.stat().st_size > limits.max_file_bytes:
        problems.add(str(path), None, None, f"file is {path.stat().st_size} bytes, larger than the limit of "
                     f"{limits.max_file_bytes} bytes")
        return "forecasts", None, {}
    truth, task = read_test_truth(index.repo, index.manifest)
    shape = next(iter(truth.values())).tree.shape
    try:
        maps = read_forecasts(path, shape, all_keys(truth, task))
    except BadInput as exc:
        problems.add(exc.where or str(path), None, None, exc.message)
        return "forecasts", None, {}
    return "forecasts", Forecasts(maps, truth, task), {}


def mapset_for(s_level: int, maps: dict[Key, np.ndarray], truth: dict[tuple[int, int], EnsembleTruth],
               task: TaskSpec) -> MapSet:
    """The scored maps of one S-level: forecast, observed realization, oracle, strata."""
    ics = sorted(ic for s, ic in truth if s == s_level)
    p, y, o, unit, t, var, dc, yf = [], [], [], [], [], [], [], []
    frames = task.frames
    for u, ic in enumerate(ics):
        et = truth[(s_level, ic)]
        prob = et.probability(frames)
        vz = et.variance(frames)
        floor = et.floor_ignition_time
        for j, r in enumerate(et.realizations):
            masks = burnt_masks(et.ignition_time[j], np.r_[frames[0] - 1, frames])
            if floor is not None:
                yf.extend(burnt_masks(floor[j], frames))
            d = dice(masks[:-1], masks[1:])
            for i, f in enumerate(frames):
                p.append(maps[(f"firespread_s{s_level}", ic, int(r), int(f))])
                y.append(masks[i + 1])
                o.append(prob[i])
                unit.append(u)
                t.append(int(f))
                var.append(vz[i])
                dc.append(d[i])
    return MapSet(p=np.array(p), y=np.array(y), unit=np.array(unit), t=np.array(t), var_z=np.array(var),
                  dice=np.array(dc), oracle=np.array(o), floor_y=np.array(yf) if yf else None)


def score_forecasts(sub, index, params, executor=None, progress: bool = False) -> Evaluation:
    """The fire-spread ``Track.score``: every S-level (one level's maps in memory at a
    time), the pooled strata and the calibration curves."""
    fc: Forecasts = sub.predictions
    task = fc.task
    cfg = ScoreConfig(threshold=task.threshold, n_bins=task.ece_bins, n_boot=params.bootstrap.n_resamples)
    rows, cal_rows, pooled, configs = [], [], {}, []
    common = {"submission": sub.id, **ROW_COMMON}
    for s in fc.levels():
        config = f"firespread_s{s}"
        configs.append(config)
        ms = mapset_for(s, fc.maps, fc.truth, task)
        cell_rows, calib = score_mapset(ms, cfg, (config,), collect=pooled)
        rows += [{**common, "config": config, "severity": s, **r} for r in cell_rows]
        for pp, pt, c in zip(calib.get("prob_pred", []), calib.get("prob_true", []), calib.get("count", [])):
            cal_rows.append({"submission": sub.id, "config": config, "severity": s,
                             "prob_pred": float(pp), "prob_true": float(pt), "count": int(c)})
        log.info("scored %s: %d maps", config, len(ms.p))
        del ms
    strata = results_table([{**common, "config": POOLED_CONFIG, "severity": None, **r}
                            for r in score_pooled(pooled, cfg, (POOLED_CONFIG,))])
    cal = pa.Table.from_pylist(cal_rows, schema=CALIBRATION_SCHEMA)
    blobs = {"calibration.png": calibration_png(cal, f"{sub.meta.name}: calibration (all forecast frames)")}
    tables = {STRATA_FILE: strata, CALIBRATION_FILE: cal}
    prov = provenance(sub, index, params, sorted([*tables, *blobs]), **{
        "frozen_threshold": None,
        "f2r_threshold": {"value": task.threshold, "rule": "declared by the dataset (burnt iff p > threshold); "
                          "the same for every submission and S-level"},
        "ece_bins": task.ece_bins,
        "ece_seed003": {"bins": SEED003_ECE_BINS, "rule": "seed 003's code (calibration.get_ece per sample): each "
                        "map's ECE over equal-width bins, averaged over the maps holding both outcomes"},
        "bootstrap": {"n_resamples": params.bootstrap.n_resamples, "percentiles": list(params.bootstrap.percentiles),
                      "unit": "initial condition", "method": "percentile"},
        "configs": {FIRESPREAD: configs}})
    return Evaluation(sub, results_table(rows), None, prov, tables, {}, blobs)


def calibration_png(cal: pa.Table, title: str = "calibration") -> bytes:
    """Calibration curves (one line per S-level) with the diagonal, as PNG bytes; ``title``
    is plain text (a submission's name: ``$...$`` is not mathtext)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure  # no pyplot: the caller's backend and figures are left alone

    d = cal.to_pydict()
    fig = Figure(figsize=(5, 5), dpi=100)
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
    levels = sorted(set(d["severity"]))
    cmap = colormaps["inferno"]
    for i, s in enumerate(levels):
        idx = [j for j, v in enumerate(d["severity"]) if v == s]
        ax.plot([d["prob_pred"][j] for j in idx], [d["prob_true"][j] for j in idx], marker="o", markersize=3,
                color=cmap(0.1 + 0.75 * i / max(1, len(levels) - 1)), label=f"S{s}")
    ax.set_xlabel("forecast probability (bin mean)")
    ax.set_ylabel("observed burn frequency")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9, parse_math=False)  # submitter text: shown as written, never mathtext
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    return png_bytes(fig)


def _summary(sub) -> str:
    fc: Forecasts = sub.predictions
    return f"{sub.id}: OK (track firespread, {len(fc)} forecast maps, {len(fc.levels())} configs)"


register_track(Track(name=FIRESPREAD, kind="forecast",
                     contents="burn-probability maps for every (S-level, initial condition, realization, frame) "
                              "of the fire-spread test split in forecasts.parquet",
                     read=read_forecast_predictions, score=score_forecasts, summary=_summary))
