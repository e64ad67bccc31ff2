"""Read the fire-spread configs of a built dataset repo (Parquet via pyarrow, no copies
of Python lists): realizations, the statistic ground truth and the forecast task.

>>> TaskSpec(observe=10, horizon=50, threshold=0.5, eval_realizations=4, ece_bins=10).frames.tolist()[:3]
[11, 12, 13]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.errors import BadInput
from aegisbench.vocab import FIRESPREAD_STATISTIC_CONFIG, firespread_config, parse_firespread_config

log = logging.getLogger(__name__)

STATISTIC_CONFIG = FIRESPREAD_STATISTIC_CONFIG
TEST_SPLIT, TRAIN_SPLIT = "firespread", "firespread_train"


@dataclass(frozen=True)
class TaskSpec:
    """Forecast task: observe frames ``1..observe``, forecast ``observe+1..observe+horizon``."""

    observe: int
    horizon: int
    threshold: float       # burnt iff p > threshold (seed 003)
    eval_realizations: int  # realizations 0..n-1 are scored; the statistic counts the others
    ece_bins: int = 10

    @property
    def frames(self) -> np.ndarray:
        return np.arange(self.observe + 1, self.observe + self.horizon + 1)


@dataclass(frozen=True, eq=False)
class EnsembleTruth:
    """One (S-level, initial condition): layout, the statistic and the realizations read."""

    s_level: int
    ic: int
    tree: np.ndarray            # (H, W) bool
    seeds: np.ndarray           # (n, 2)
    counts: np.ndarray          # (n_frames, H, W) int32 burn counts
    n_realizations: int
    z_mean: np.ndarray
    z_var: np.ndarray
    realizations: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # indices read
    ignition_time: np.ndarray | None = None  # (len(realizations), H, W) int16
    # as many realizations of the statistic itself (n..2n-1): the outcomes of the ECE floor
    floor_ignition_time: np.ndarray | None = None

    def probability(self, frames) -> np.ndarray:
        """Statistic ground truth ``counts / N`` at ``frames`` (frames past the end repeat the last)."""
        f = np.minimum(np.asarray(frames), len(self.counts) - 1)
        return self.counts[f].astype(np.float64) / self.n_realizations

    def variance(self, frames) -> np.ndarray:
        f = np.minimum(np.asarray(frames), len(self.z_var) - 1)
        return self.z_var[f]


def _shards(repo: Path, manifest: dict, config: str, split: str) -> list[Path]:
    info = manifest["configs"].get(config, {}).get("splits", {}).get(split)
    return [] if info is None else [repo / s["path"] for s in info["shards"]]


def _grid(col: pa.ChunkedArray, n: int, h: int, w: int, dtype) -> np.ndarray:
    """A list<list<x>> column as an (n, h, w) array."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    flat = arr.flatten().flatten().to_numpy(zero_copy_only=False)
    if flat.size != n * h * w:
        raise BadInput(f"map column holds {flat.size} values, expected {n}x{h}x{w}")
    return flat.astype(dtype, copy=False).reshape(n, h, w)


def firespread_levels(manifest: dict) -> list[int]:
    """S-levels of the ``firespread_s<level>`` configs in a manifest."""
    return sorted(s for s in map(parse_firespread_config, manifest["configs"]) if s is not None)


def read_statistic(repo: str | Path, manifest: dict, split: str = TEST_SPLIT
                   ) -> tuple[dict[tuple[int, int], EnsembleTruth], TaskSpec]:
    """``{(s_level, ic): EnsembleTruth}`` (without realizations) and the task of the split."""
    repo = Path(repo)
    paths = _shards(repo, manifest, STATISTIC_CONFIG, split)
    if not paths:
        raise BadInput(f"dataset has no {STATISTIC_CONFIG}/{split}: build the fire-spread configs", where=str(repo))
    out: dict[tuple[int, int], EnsembleTruth] = {}
    task = None
    for path in paths:
        t = pq.read_table(path)
        for i in range(t.num_rows):
            row = t.slice(i, 1)
            h, w, nf = (int(row.column(c)[0].as_py()) for c in ("height", "width", "n_frames"))
            counts = _grid(row.column("burn_counts").combine_chunks().flatten(), nf, h, w, np.int32)
            tree = _grid(row.column("tree"), 1, h, w, bool)[0]
            s, ic = int(row.column("s_level")[0].as_py()), int(row.column("initial_condition")[0].as_py())
            out[(s, ic)] = EnsembleTruth(
                s_level=s, ic=ic, tree=tree, seeds=np.asarray(row.column("seeds")[0].as_py(), np.int64),
                counts=counts, n_realizations=int(row.column("n_realizations")[0].as_py()),
                z_mean=np.asarray(row.column("z_mean")[0].as_py(), np.float64),
                z_var=np.asarray(row.column("z_var")[0].as_py(), np.float64))
            held = int(row.column("held_out_realizations")[0].as_py())
            spec = TaskSpec(*(row.column(c)[0].as_py() for c in
                              ("forecast_observe", "forecast_horizon", "forecast_threshold", "eval_realizations",
                               "ece_bins")))
            if held != spec.eval_realizations:
                raise BadInput(f"statistic of s_level={s} initial_condition={ic} holds out {held} realizations "
                               f"but {spec.eval_realizations} are scored: truth would leak into the statistic",
                               where=str(path))
            if task is not None and spec != task:
                raise BadInput("statistic rows disagree on the forecast task", where=str(path))
            task = spec
    return out, task


def read_realizations(repo: str | Path, manifest: dict, s_level: int, split: str,
                      max_realization: int | None = None) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{ic: (realization indices, ignition times (n, H, W) int16, tree (H, W))}`` of one
    ``firespread_s<level>`` split, keeping realizations ``< max_realization`` if given."""
    repo = Path(repo)
    cols = ["initial_condition", "realization", "height", "width", "ignition_time", "tree"]
    parts: dict[int, list] = {}
    trees: dict[int, np.ndarray] = {}
    for path in _shards(repo, manifest, firespread_config(s_level), split):
        pf = pq.ParquetFile(path)
        for rg in range(pf.num_row_groups):
            t = pf.read_row_group(rg, columns=cols)
            real = t.column("realization").to_numpy()
            if max_realization is not None:
                keep = real < max_realization
                if not keep.any():
                    continue
                t = t.filter(pa.array(keep))
                real = real[keep]
            n = t.num_rows
            h, w = int(t.column("height")[0].as_py()), int(t.column("width")[0].as_py())
            tau = _grid(t.column("ignition_time"), n, h, w, np.int16)
            ics = t.column("initial_condition").to_numpy()
            for ic in np.unique(ics):
                sel = ics == ic
                parts.setdefault(int(ic), []).append((real[sel], tau[sel]))
                if int(ic) not in trees:
                    trees[int(ic)] = _grid(t.column("tree").filter(pa.array(sel)), int(sel.sum()), h, w, bool)[0]
    out = {}
    for ic, chunks in sorted(parts.items()):
        real = np.concatenate([c[0] for c in chunks])
        tau = np.concatenate([c[1] for c in chunks])
        order = np.argsort(real, kind="stable")
        out[ic] = (real[order], tau[order], trees[ic])
    return out


def read_test_truth(repo: str | Path, manifest: dict) -> tuple[dict[tuple[int, int], EnsembleTruth], TaskSpec]:
    """Statistic and evaluation realizations of every test (S-level, initial condition), with
    as many realizations of the statistic itself for the ECE floor."""
    stats, task = read_statistic(repo, manifest, TEST_SPLIT)
    out = {}
    n = task.eval_realizations
    for s in firespread_levels(manifest):
        reals = read_realizations(repo, manifest, s, TEST_SPLIT, max_realization=2 * n)
        for ic, (idx, tau, _tree) in reals.items():
            if (s, ic) not in stats:
                raise BadInput(f"no statistic row for s_level={s} initial_condition={ic}", where=str(repo))
            st = stats[(s, ic)]
            if len(idx) != 2 * n or not (idx == np.arange(2 * n)).all():
                raise BadInput(f"{firespread_config(s)} ic {ic}: realizations 0..{2 * n - 1} (scored and ECE floor) "
                               "incomplete", where=str(repo))
            out[(s, ic)] = EnsembleTruth(st.s_level, st.ic, st.tree, st.seeds, st.counts, st.n_realizations,
                                         st.z_mean, st.z_var, idx[:n], tau[:n], tau[n:])
    if not out:
        raise BadInput("dataset has no fire-spread test realizations", where=str(repo))
    return out, task
