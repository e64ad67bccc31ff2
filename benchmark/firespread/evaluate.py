"""Validate and score fire-spread submissions; write the reference forecasters' submissions.

``results/<id>/metrics.parquet`` is long format, one row per (config, frame, stratum,
metric) with the project's columns ``submission, track, source, config, corruption,
family, severity, metric, value, lo, hi, n`` plus ``t`` (frame, null = all forecast
frames pooled), ``stratum`` (``all``, ``var_z:<bin>``, ``dice:<bin>``) and ``n_units``
(initial conditions with data: the bootstrap units). For this track ``track`` and
``source`` are ``firespread``, ``config`` is ``firespread_s<level>``, ``corruption``
is ``stochasticity``, ``family`` is ``firespread`` and ``severity`` the S-level; ``n`` is
the number of scored pixels (maps for ``*_sd_maps``). ``calibration.parquet`` holds the
calibration curve of every config and ``calibration.png`` draws them.
``strata.parquet`` (same columns) holds the all-frames cells pooled over every S-level
(config ``firespread_pooled``, severity null): stratum ``all`` and each ``Var[Z_t]``
stratum, the table behind seed 003's F2R-vs-F2S finding (Figs. 6-7).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_path
from aegisbench.errors import BadInput
from aegisbench.firespread import forecasters as F
from aegisbench.firespread.ensemble import burnt_masks, dice
from aegisbench.firespread.scoring import MapSet, ScoreConfig, score_mapset, score_pooled
from aegisbench.firespread.submission import (FORECASTS, Key, expected_keys, read_forecasts, read_meta,
                                              write_submission)
from aegisbench.firespread.truth import TRAIN_SPLIT, EnsembleTruth, TaskSpec, firespread_levels, \
    read_realizations, read_test_truth

log = logging.getLogger(__name__)

RESULT_SCHEMA = pa.schema([
    ("submission", pa.string()), ("track", pa.string()), ("source", pa.string()), ("config", pa.string()),
    ("corruption", pa.string()), ("family", pa.string()), ("severity", pa.int32()), ("metric", pa.string()),
    ("value", pa.float64()), ("lo", pa.float64()), ("hi", pa.float64()), ("n", pa.int64()),
    ("t", pa.int32()), ("stratum", pa.string()), ("n_units", pa.int32())])
POOLED_CONFIG = "firespread_pooled"
STRATA_FILE = "strata.parquet"
CALIBRATION_SCHEMA = pa.schema([("submission", pa.string()), ("config", pa.string()), ("severity", pa.int32()),
                                ("prob_pred", pa.float64()), ("prob_true", pa.float64()), ("count", pa.int64())])


def load_dataset_truth(dataset: str | Path) -> tuple[dict, dict[tuple[int, int], EnsembleTruth], TaskSpec]:
    from aegisbench.builders.manifest import require_verified
    manifest = require_verified(dataset)
    truth, task = read_test_truth(dataset, manifest)
    return manifest, truth, task


def all_keys(truth: dict[tuple[int, int], EnsembleTruth], task: TaskSpec) -> list[Key]:
    levels = sorted({s for s, _ in truth})
    ics = sorted({ic for _, ic in truth})
    return expected_keys(levels, ics, task.eval_realizations, task.frames)


def validate_submission(submission: str | Path, dataset: str | Path) -> dict:
    """Check a submission folder against a dataset repo; returns a short summary."""
    sub = Path(submission)
    if not sub.is_dir():
        raise BadInput("submission folder not found", where=str(sub))
    manifest, truth, task = load_dataset_truth(dataset)
    meta = read_meta(sub)
    if meta["dataset_digest"] != manifest["dataset_digest"]:
        raise BadInput(f"dataset_digest {meta['dataset_digest']} does not match the dataset "
                       f"({manifest['dataset_digest']})", where=f"{sub / 'submission.yaml'}: field dataset_digest")
    shape = next(iter(truth.values())).tree.shape
    forecasts = read_forecasts(sub / FORECASTS, shape, all_keys(truth, task))
    return {"submission": sub.name, "name": meta["name"], "forecasts": len(forecasts), "meta": meta,
            "manifest": manifest, "truth": truth, "task": task, "maps": forecasts}


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


def score_submission(submission: str | Path, dataset: str | Path, out: str | Path | None = None,
                     n_boot: int = 1000, n_bins: int | None = None, threshold: float | None = None) -> pa.Table:
    """Validate, score every config and (if ``out``) write ``metrics.parquet``,
    ``calibration.parquet`` and ``calibration.png``; returns the metrics table."""
    v = validate_submission(submission, dataset)
    truth, task = v["truth"], v["task"]
    cfg = ScoreConfig(threshold=task.threshold if threshold is None else threshold,
                      n_bins=task.ece_bins if n_bins is None else n_bins, n_boot=n_boot)
    rows, cal_rows = [], []
    pooled: dict = {}
    common = {"submission": v["submission"], "track": "firespread", "source": "firespread",
              "corruption": "stochasticity", "family": "firespread"}
    for s in sorted({s for s, _ in truth}):
        config = f"firespread_s{s}"
        ms = mapset_for(s, v["maps"], truth, task)
        cell_rows, calib = score_mapset(ms, cfg, (config,), collect=pooled)
        rows += [{**common, "config": config, "severity": s, **r} for r in cell_rows]
        for pp, pt, c in zip(calib.get("prob_pred", []), calib.get("prob_true", []), calib.get("count", [])):
            cal_rows.append({"submission": v["submission"], "config": config, "severity": s,
                             "prob_pred": float(pp), "prob_true": float(pt), "count": int(c)})
        log.info("scored %s: %d maps", config, len(ms.p))
        del ms  # one S-level's maps in memory at a time
    table = pa.Table.from_pylist(rows, schema=RESULT_SCHEMA)
    strata = pa.Table.from_pylist([{**common, "config": POOLED_CONFIG, "severity": None, **r}
                                   for r in score_pooled(pooled, cfg, (POOLED_CONFIG,))], schema=RESULT_SCHEMA)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        _write(table, out / "metrics.parquet")
        _write(strata, out / STRATA_FILE)
        cal = pa.Table.from_pylist(cal_rows, schema=CALIBRATION_SCHEMA)
        _write(cal, out / "calibration.parquet")
        plot_calibration(cal, out / "calibration.png", title=f"{v['name']}: calibration (all forecast frames)")
    return table


def _write(table: pa.Table, path: Path) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def plot_calibration(cal: pa.Table, path: str | Path, title: str = "calibration") -> Path:
    """Calibration curves (one line per S-level) with the diagonal, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = cal.to_pydict()
    fig, ax = plt.subplots(figsize=(5, 5), dpi=100)
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfect")
    levels = sorted(set(d["severity"]))
    cmap = plt.get_cmap("inferno")
    for i, s in enumerate(levels):
        idx = [j for j, v in enumerate(d["severity"]) if v == s]
        ax.plot([d["prob_pred"][j] for j in idx], [d["prob_true"][j] for j in idx], marker="o", markersize=3,
                color=cmap(0.1 + 0.75 * i / max(1, len(levels) - 1)), label=f"S{s}")
    ax.set_xlabel("forecast probability (bin mean)")
    ax.set_ylabel("observed burn frequency")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return Path(path)


# ---------------------------------------------------------------- reference forecasters

DESCRIPTIONS = {
    "oracle": "Ensemble oracle: the statistic ground truth (burn frequency over the realizations of the "
              "initial condition that are not scored); ignores the observation. Its Brier is the floor of unconditional forecasts.",
    "persistence": "Persistence: the last observed burnt mask, repeated for every forecast frame.",
    "spread_heuristic": "Geodesic-front heuristic: fire advances from the active front through trees at the "
                        "speed observed so far, as a linear ramp in probability.",
    "convlstm": "ConvLSTM-CA (3x3 encoder, 3x3 ConvLSTM cell, 1x1 decoder, no spatial bottleneck), trained "
                "with BCE on the train split, CPU-sized config, autoregressive rollout.",
}


def baseline_forecasts(name: str, dataset: str | Path, truth, task: TaskSpec, manifest: dict,
                       convlstm_cfg=None) -> tuple[list[Key], np.ndarray]:
    """Keys and ``(n, H, W)`` maps of one reference forecaster over every test key."""
    if name not in F.BASELINES:
        raise BadInput(f"unknown baseline {name!r}; expected one of {F.BASELINES}", where="--only")
    net = None
    if name == "convlstm":
        from aegisbench.firespread.convlstm import ConvLSTMConfig, train_convlstm
        cfg = convlstm_cfg or ConvLSTMConfig()
        train = {}
        for s in firespread_levels(manifest):
            reals = read_realizations(dataset, manifest, s, TRAIN_SPLIT, max_realization=cfg.realizations_per_ensemble)
            train[s] = {ic: (tau, tree) for ic, (_, tau, tree) in reals.items()}
        net = train_convlstm(train, task.observe, cfg)
    keys: list[Key] = []
    maps = []
    for s in sorted({s for s, _ in truth}):
        inp = F.inputs_for(truth, task, s)
        if name == "oracle":
            probs = F.oracle(inp, truth)
        elif name == "persistence":
            probs = F.persistence(inp.observed, task.horizon)
        elif name == "spread_heuristic":
            probs = F.spread_heuristic(inp.tree, inp.observed, task.horizon)
        else:
            from aegisbench.firespread.convlstm import predict_convlstm
            probs = predict_convlstm(net, inp.tree, inp.observed, inp.p_ignite, task.horizon)
        for i in range(len(inp.ics)):
            for j, f in enumerate(inp.frames):
                keys.append((f"firespread_s{s}", int(inp.ics[i]), int(inp.realizations[i]), int(f)))
        maps.append(np.asarray(probs, np.float32).reshape(-1, *probs.shape[-2:]))
    return keys, np.concatenate(maps)


def write_baselines(dataset: str | Path, out_dir: str | Path, names=F.BASELINES, convlstm_cfg=None,
                    dtype: str = "float32") -> list[Path]:
    """Write ``<out_dir>/firespread_<name>/`` submissions of the reference forecasters."""
    manifest, truth, task = load_dataset_truth(dataset)
    folders = []
    for name in names:
        keys, maps = baseline_forecasts(name, dataset, truth, task, manifest, convlstm_cfg)
        meta = {"name": f"firespread_{name}", "team": "AegisBench reference", "track": "firespread",
                "model": name, "contact": "maintainers", "license": "mit", "description": DESCRIPTIONS[name],
                "dataset_version": manifest["benchmark_version"], "dataset_digest": manifest["dataset_digest"]}
        folders.append(write_submission(Path(out_dir) / f"firespread_{name}", meta, keys, maps, dtype))
        log.info("wrote %s (%d maps)", folders[-1], len(keys))
    return folders
