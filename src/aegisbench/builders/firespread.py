"""The builder's half of the fire-spread family (seed 003): the ensembles simulated into shards.

The configs, their rows and their descriptions are declared in
:mod:`aegisbench.dataset.family_firespread`. A :class:`FirespreadTask` is one shard: a block of
realizations of one initial condition (or, for the statistic, every test/train IC at one
S-level). The random stream is keyed by ``(version, initial condition, S-level, realization,
step, cell)``, so blocks are independent and can run anywhere in any order.

>>> from aegisbench.params.firespread import FirespreadParams
>>> p = FirespreadParams.from_dict({"grid": [12, 12], "realizations": 6, "s_levels": [0, 20],
...     "initial_conditions": 2, "test_initial_conditions": [1], "realizations_per_shard": 4})
>>> tasks = firespread_tasks(p, "0.1.0")
>>> sorted({t.config for t in tasks}), tasks[0].relpath
(['firespread_s0', 'firespread_s20', 'firespread_statistic'], 'firespread_s0/firespread-00000-of-00002.parquet')
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import datasets
import numpy as np

from aegisbench.atomic import atomic_write_text
from aegisbench.builders.families import PLANNERS, FamilyPlan
from aegisbench.firespread.ensemble import burn_counts, z_moments
from aegisbench.firespread.layout import InitialCondition, make_initial_condition
from aegisbench.firespread.model import Ensemble, SeedModel, simulate
from aegisbench.params import Params
from aegisbench.params.firespread import FirespreadParams
from aegisbench.hashing import bytes_sha256
from aegisbench.builders.hfrepo import ShardEntry, write_rows_shard
from aegisbench.dataset.families import features_of, row_kind, schema_of
from aegisbench.dataset.family_firespread import (FIRESPREAD_SOURCE, SOURCE, SPLITS, STATISTIC_CONFIG,
                                                  config_descriptions, config_metas, firespread_params, layout_digest)
from aegisbench.vocab import FIRESPREAD, firespread_config

log = logging.getLogger(__name__)

def stream_parts(version: str, ic: int, s_level: int) -> tuple:
    """The stable key of the random stream of one ensemble."""
    return (version, SOURCE, "ic", int(ic), "s", int(s_level))


def run_ensemble(params: FirespreadParams, version: str, ic: InitialCondition, s_level: int,
                 start: int = 0, stop: int | None = None) -> Ensemble:
    """Realizations ``start..stop-1`` of the ensemble of ``(ic, s_level)``."""
    stop = params.realizations if stop is None else stop
    return simulate(ic, SeedModel.from_params(params), params.p_ignite(s_level),
                    stream_parts(version, ic.index, s_level), np.arange(start, stop))


def _common_row(ic: InitialCondition, s_level: int, p: float) -> dict:
    h, w = ic.shape
    return {"initial_condition": ic.index, "s_level": int(s_level), "p_ignite": p, "height": h, "width": w,
            "n_trees": ic.n_trees, "tree": list(ic.tree), "seeds": ic.seeds.astype(np.int32).tolist()}


def _ic_digest(ic: InitialCondition) -> str:
    return layout_digest(ic.tree, ic.seeds)


@dataclass(frozen=True)
class FirespreadTask:
    """One shard of a fire-spread config (picklable; ``run`` computes and writes it)."""

    config: str
    split: str
    source_split: str  # "train" or "test": the role of the split's initial conditions
    params: FirespreadParams
    version: str
    s_level: int | None  # None for the statistic (s_levels come from ``ics``/index)
    ics: tuple[int, ...]
    start: int
    stop: int
    index: int
    n_shards: int

    source = SOURCE
    #: its rows carry no boxes (nothing a build may withhold)
    labels = False
    #: it reads no file: the simulation is its input
    inputs = ()

    @property
    def relpath(self) -> str:
        return f"{self.config}/{self.split}-{self.index:05d}-of-{self.n_shards:05d}.parquet"

    @property
    def kind(self) -> str:
        return row_kind(self.config)

    @property
    def features(self) -> datasets.Features:
        return features_of(self.config)

    def run(self, root: Path, transform: None = None) -> ShardEntry:
        """Simulate this block and write its shard (atomic) plus a resume sidecar."""
        root = Path(root)
        rows, content = (self._statistic_rows() if self.kind == "statistic" else self._realization_rows())
        entry = write_rows_shard(root, self.relpath, rows, schema_of(self.config), content=content)
        side = root / ".shards" / (self.relpath.replace("/", "__") + ".json")
        atomic_write_text(side, json.dumps(asdict(entry), sort_keys=True))
        log.debug("wrote %s (%d rows)", self.relpath, entry.rows)
        return entry

    def _realization_rows(self) -> tuple[list[dict], list]:
        p, s = self.params, int(self.s_level)
        ic = make_initial_condition(p, self.version, self.ics[0])
        ens = run_ensemble(p, self.version, ic, s, self.start, self.stop)
        common, icd = _common_row(ic, s, p.p_ignite(s)), _ic_digest(ic)
        rows, content = [], []
        for j, r in enumerate(range(self.start, self.stop)):
            tau = ens.ignition_time[j]
            rows.append({**common, "realization": r, "ignition_time": list(tau), "n_steps": int(ens.n_steps[j]),
                         "truncated": bool(ens.truncated[j]), "burnt_cells": int((tau >= 0).sum())})
            content.append([self.config, ic.index, r, s, icd, int(ens.n_steps[j]), bool(ens.truncated[j]),
                            bytes_sha256(tau.astype("<i2").tobytes())])
        return rows, content

    def _statistic_rows(self) -> tuple[list[dict], list]:
        p = self.params
        s = int(p.s_levels[self.index])
        fc = p.forecast
        rows, content = [], []
        for i in self.ics:
            ic = make_initial_condition(p, self.version, i)
            held = fc.eval_realizations  # realizations 0..held-1 are scored: never in the statistic
            ens = run_ensemble(p, self.version, ic, s, held, p.realizations)
            t_max = max(ens.t_max, fc.observe + fc.horizon)
            counts = burn_counts(ens.ignition_time, t_max)
            zm, zv = z_moments(ens.ignition_time, ic.n_trees, t_max + 1)
            rows.append({**_common_row(ic, s, p.p_ignite(s)), "n_realizations": p.realizations - held,
                         "held_out_realizations": held, "n_frames": t_max + 1, "burn_counts": [list(c) for c in counts],
                         "z_mean": zm, "z_var": zv, "max_steps_reached": ens.t_max,
                         "truncated_realizations": int(ens.truncated.sum()),
                         "forecast_observe": fc.observe, "forecast_horizon": fc.horizon,
                         "forecast_threshold": fc.threshold, "eval_realizations": fc.eval_realizations,
                         "ece_bins": fc.ece_bins})
            content.append([STATISTIC_CONFIG, i, s, p.realizations - held, held, _ic_digest(ic), t_max,
                            bytes_sha256(counts.astype("<i4").tobytes()),
                            bytes_sha256(zm.astype("<f8").tobytes() + zv.astype("<f8").tobytes())])
        return rows, content


def firespread_tasks(fs_params: FirespreadParams | dict | None, version: str) -> list[FirespreadTask]:
    """Every shard of the fire-spread configs, realization blocks first."""
    p = firespread_params(fs_params)
    tasks: list[FirespreadTask] = []
    rps = p.realizations_per_shard
    blocks = [(a, min(p.realizations, a + rps)) for a in range(0, p.realizations, rps)]
    for s in p.s_levels:
        for role in ("test", "train"):
            ics = p.initial_conditions_of(role)
            n = len(ics) * len(blocks)
            for k, (ic, (a, b)) in enumerate((ic, blk) for ic in ics for blk in blocks):
                tasks.append(FirespreadTask(firespread_config(s), SPLITS[role], role, p, version, int(s),
                                            (ic,), a, b, k, n))
    for role in ("test", "train"):
        ics = p.initial_conditions_of(role)
        if ics:
            tasks += [FirespreadTask(STATISTIC_CONFIG, SPLITS[role], role, p, version, None, ics, 0,
                                     p.realizations, i, len(p.s_levels)) for i in range(len(p.s_levels))]
    return tasks


@PLANNERS.register(FIRESPREAD)
def plan_firespread(params: Params, sources_dir: Path) -> FamilyPlan:
    """The fire-spread family's part of a build: nothing without a ``firespread:`` section."""
    if params.firespread is None:
        return FamilyPlan()
    return FamilyPlan(tasks=firespread_tasks(params.firespread, params.benchmark_version),
                      metas=config_metas(params.firespread), descriptions=config_descriptions(params.firespread),
                      sources=[FIRESPREAD_SOURCE],
                      manifest_sources={SOURCE: {"track": FIRESPREAD_SOURCE["track"], "kind": FIRESPREAD_SOURCE["kind"]}})


def build_firespread_repo(fs_params: FirespreadParams | dict | None, version: str, out: str | Path,
                          workers: int = 1) -> dict:
    """A dataset repo holding only the fire-spread configs: ``build_repo`` with no image
    sources (same shards, manifest, card and ``verify``); returns the manifest."""
    from aegisbench.builders.build import build_repo

    p = firespread_params(fs_params)
    params = Params.from_dict({"benchmark_version": version, "sources": {}, "firespread": p.to_dict(),
                               "paths": {"dataset": str(out)}})
    return build_repo(params, out=out, workers=workers, progress=False)
