"""The reference forecasters' submissions of the fire-spread track (``firespread-baselines``).

Each is written as an ordinary submission folder (``submission.yaml`` +
``forecasts.parquet``) and scored like any other by ``aegisbench evaluate``.

>>> sorted(DESCRIPTIONS) == sorted(F.BASELINES)
True
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from aegisbench.errors import BadInput
from aegisbench.forecasters import simple as F
from aegisbench.forecasters.submission import Key, write_submission
from aegisbench.dataset.firespread_truth import TRAIN_SPLIT, TaskSpec, firespread_levels, read_realizations, read_test_truth
from aegisbench.kernels import describe as describe_kernels

log = logging.getLogger(__name__)


def load_dataset_truth(dataset: str | Path) -> tuple[dict, dict, TaskSpec]:
    """``(manifest, truth, task)`` of a verified dataset repo."""
    from aegisbench.dataset.verify import require_verified
    manifest = require_verified(dataset)
    truth, task = read_test_truth(dataset, manifest)
    return manifest, truth, task


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
                       convlstm_cfg=None, dtype: str = "float32") -> tuple[list[Key], np.ndarray]:
    """Keys and ``(n, H, W)`` maps of one reference forecaster over every test key, rounded
    to float32 and then to ``dtype`` (the dtype they are written in)."""
    if name not in F.BASELINES:
        raise BadInput(f"unknown baseline {name!r}; expected one of {F.BASELINES}", where="--only")
    net = None
    if name == "convlstm":
        from aegisbench.forecasters.convlstm import ConvLSTMConfig, train_convlstm
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
            probs = F.oracle(inp, truth, dtype)
        elif name == "persistence":
            probs = F.persistence(inp.observed, task.horizon)
        elif name == "spread_heuristic":
            probs = F.spread_heuristic(inp.tree, inp.observed, task.horizon)
        else:
            from aegisbench.forecasters.convlstm import predict_convlstm
            probs = predict_convlstm(net, inp.tree, inp.observed, inp.p_ignite, task.horizon)
        config, frames = f"firespread_s{s}", [int(f) for f in inp.frames]
        keys += [(config, ic, r, f) for ic, r in zip(inp.ics.tolist(), inp.realizations.tolist()) for f in frames]
        if probs.dtype != np.dtype(dtype) or probs.dtype.itemsize > 4:  # float32 first, then dtype
            probs = np.asarray(probs, np.float32).astype(dtype, copy=False)
        maps.append(probs.reshape(-1, *probs.shape[-2:]))
    return keys, np.concatenate(maps)


def _convlstm_kernels(cfg) -> str:
    """The kernels the ConvLSTM of ``cfg`` (None: the default config) trains and rolls out on."""
    from aegisbench.forecasters.convlstm import ConvLSTMConfig, device_of

    cfg = cfg or ConvLSTMConfig()
    return describe_kernels(1, device=str(device_of(cfg)), gemm=cfg.gemm)


def write_baselines(dataset: str | Path, out_dir: str | Path, names=F.BASELINES, convlstm_cfg=None,
                    dtype: str = "float32") -> list[Path]:
    """Write ``<out_dir>/firespread_<name>/`` submissions of the reference forecasters."""
    manifest, truth, task = load_dataset_truth(dataset)
    folders = []
    for name in names:
        keys, maps = baseline_forecasts(name, dataset, truth, task, manifest, convlstm_cfg, dtype)
        meta = {"name": f"firespread_{name}", "team": "AegisBench reference", "track": "firespread",
                "model": name, "contact": "maintainers", "license": "mit", "description": DESCRIPTIONS[name],
                "dataset_version": manifest["benchmark_version"], "dataset_digest": manifest["dataset_digest"]}
        if name == "convlstm":  # the one torch model: trained and rolled out on these kernels
            meta["kernels"] = _convlstm_kernels(convlstm_cfg)
        folders.append(write_submission(Path(out_dir) / f"firespread_{name}", meta, keys, maps, dtype))
        log.info("wrote %s (%d maps)", folders[-1], len(keys))
    return folders
