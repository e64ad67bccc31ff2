"""The fire-spread family (seed 003): ensembles of the stochastic fire-spread model as configs.

* ``firespread_s<level>``: one ``realizations`` row per (initial condition, realization) with the
  layout, the seeds and the per-cell ignition-time map (int16, -1 = never); every fire map is
  derived from it (burnt at frame t iff ``0 <= ignition_time <= t``).
* ``firespread_statistic``: one ``statistic`` row per (initial condition, S-level) with the
  per-frame burn counts ``k`` out of ``n_realizations`` (the statistic ground truth as
  integers), the mean and variance of ``Z_t``, and the forecast task definition.

Splits: ``firespread`` holds the test initial conditions, ``firespread_train`` the others. This
module declares the family (its source, its configs' descriptions and manifest metas, the row
content keys ``verify`` recomputes); :mod:`aegisbench.builders.firespread` simulates the shards.

>>> from aegisbench.params.firespread import FirespreadParams
>>> p = FirespreadParams.from_dict({"grid": [12, 12], "realizations": 6, "s_levels": [0, 20],
...     "initial_conditions": 2, "test_initial_conditions": [1]})
>>> sorted(config_metas(p)), config_metas(p)["firespread_s20"]["kind"]
(['firespread_s0', 'firespread_s20', 'firespread_statistic'], 'firespread_ensemble')
"""

from __future__ import annotations

import numpy as np

from aegisbench.dataset.families import FAMILIES, ConfigFamily
from aegisbench.hashing import bytes_sha256
from aegisbench.params.firespread import FirespreadParams
from aegisbench.vocab import (FIRESPREAD, FIRESPREAD_ENSEMBLE, FIRESPREAD_FAMILY, FIRESPREAD_STATISTIC,
                              FIRESPREAD_STATISTIC_CONFIG, firespread_config)

SOURCE = "firespread"
#: the source of the fire-spread configs, as the manifest and the card record it
FIRESPREAD_SOURCE = {
    "name": SOURCE, "track": "firespread", "kind": "firespread_ca", "license": "MIT",
    "homepage": "https://github.com/harshitk11/evaluate_stochastic_process",
    "citation": "@article{kumar2024stochasticity,\n  title   = {Studying the Impact of Stochasticity on the Evaluation of "
                "Deep Neural Networks for Forest-Fire Prediction},\n  author  = {Kumar, Harshit and Chakraborty, "
                "Biswadeep and Kang, Beomseok and Mukhopadhyay, Saibal},\n  journal = {arXiv preprint "
                "arXiv:2402.15163},\n  year    = {2024}\n}",
    "description": "Embedded heat-accumulation cellular automaton of seed 003 (stochastic fire spread, Monte Carlo "
                   "ensembles per initial condition and S-level), reimplemented from the paper's model."}
STATISTIC_CONFIG = FIRESPREAD_STATISTIC_CONFIG
#: role of the initial conditions -> split name
SPLITS = {"test": "firespread", "train": "firespread_train"}


def firespread_params(fs_params: FirespreadParams | dict | None) -> FirespreadParams:
    """``fs_params`` as :class:`FirespreadParams` (a ``params.yaml`` section is checked)."""
    return fs_params if isinstance(fs_params, FirespreadParams) else FirespreadParams.from_dict(fs_params)


def config_descriptions(fs_params: FirespreadParams | dict | None) -> dict[str, str]:
    """Human description of every fire-spread config (for the dataset card)."""
    p = firespread_params(fs_params)
    out = {}
    for s in p.s_levels:
        out[firespread_config(s)] = (
            f"Fire-spread ensemble at S-Level {s} (p_ignite = {p.p_ignite(s):.2f}): {p.realizations} "
            f"Monte Carlo realizations per initial condition on a {p.height}x{p.width} grid, one row per "
            "(initial_condition, realization) with layout, seeds and the int16 ignition-time map "
            "(-1 = never burnt; burnt at frame t iff 0 <= ignition_time <= t).")
    out[STATISTIC_CONFIG] = (
        "Statistic ground truth of every (initial_condition, S-level): per-frame burn counts k out of "
        "n_realizations per cell, mean and variance of Z_t (unburnt trees), and the forecast task "
        f"(observe {p.forecast.observe} frames, forecast {p.forecast.horizon}).")
    return out


def config_metas(fs_params: FirespreadParams | dict | None) -> dict[str, dict]:
    """Manifest ``meta`` of every fire-spread config (kind, S-level), so nothing downstream
    parses config names."""
    p = firespread_params(fs_params)
    base = {"corruption": None, "family": FIRESPREAD_FAMILY, "components": [], "warp_level": None}
    out = {firespread_config(s): {**base, "kind": FIRESPREAD_ENSEMBLE, "severity": int(s), "s_level": int(s),
                                  "p_ignite": p.p_ignite(s)} for s in p.s_levels}
    out[STATISTIC_CONFIG] = {**base, "kind": FIRESPREAD_STATISTIC, "severity": 0, "s_level": None,
                             "p_ignite": None}
    return out


def layout_digest(tree: np.ndarray, seeds: np.ndarray) -> str:
    """The digest of an initial condition (forest layout and ignition cells) in a row's key."""
    return bytes_sha256(np.packbits(np.asarray(tree, dtype=bool)).tobytes()
                        + np.asarray(seeds).astype("<i8").tobytes())


def firespread_row_key(kind: str, config: str, row: dict, where: str) -> tuple[list, dict, list[str]]:
    """The content key of one decoded row, as :class:`~aegisbench.builders.firespread.FirespreadTask`
    hashed it (ids, the layout digest and the hashes of the ignition-time map, or of the burn
    counts and ``Z`` moments)."""
    layout = layout_digest(row["tree"], np.asarray(row["seeds"], dtype="<i8"))
    if kind == "statistic":
        counts = np.asarray(row["burn_counts"], dtype=np.int64)
        moments = np.asarray(row["z_mean"], dtype="<f8").tobytes() + np.asarray(row["z_var"], dtype="<f8").tobytes()
        return [config, row["initial_condition"], row["s_level"], row["n_realizations"], row["held_out_realizations"],
                layout, row["n_frames"] - 1, bytes_sha256(counts.astype("<i4").tobytes()), bytes_sha256(moments)], {}, []
    tau = np.asarray(row["ignition_time"], dtype=np.int16)
    return [config, row["initial_condition"], row["realization"], row["s_level"], layout, row["n_steps"],
            row["truncated"], bytes_sha256(tau.astype("<i2").tobytes())], {}, []


FAMILY = FAMILIES.add(FIRESPREAD, ConfigFamily(
    name=FIRESPREAD, kinds={FIRESPREAD_ENSEMBLE: "realizations", FIRESPREAD_STATISTIC: "statistic"},
    row_key=firespread_row_key, tracks=(FIRESPREAD,), rank=1, task_categories=("time-series-forecasting",),
    task_ids={FIRESPREAD: "wildfire-spread-forecasting"}))
