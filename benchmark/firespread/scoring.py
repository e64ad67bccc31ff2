"""Scores of probabilistic fire-spread forecasts: F2R and F2S side by side, stratified,
with 95% bootstrap intervals that resample whole units (initial conditions for the
synthetic track, fire events for Next Day Wildfire Spread), never pixels.

Cells scored for one config (S-level): all forecast frames pooled (``t`` null,
stratum ``all``), each frame ``t`` (stratum ``all``), each macro-variance stratum
``var_z:<bin>`` (``Var[Z_t]`` of the ensemble at the map's frame; seed 003 Fig. 7),
and each Dice stratum ``dice:<bin>`` (Dice between the successive observed masks
``t-1`` and ``t``; two empty masks count as Dice 1 — no progression; seed 003 Table 3).

Metrics (pixels pooled within a cell; a map is ``H x W`` pixels):

* F2R: ``precision``, ``recall``, ``f1`` at the declared threshold (burnt iff
  ``p >= threshold``, 0/0 = 0), ``average_precision`` (scikit-learn's step-wise AP)
  and, separately, ``auc_pr_trapezoid`` (the trapezoid AUC-PR of the paper);
* F2S: ``brier`` with ``brier_reliability``, ``brier_resolution``,
  ``brier_uncertainty`` and ``brier_residual`` (within-bin spread), ``ece``
  (uniform right-closed bins), and, where the ensemble statistic is known,
  ``oracle_brier`` (the statistic's Brier against the same realizations) and
  ``excess_brier`` = ``brier - oracle_brier``;
* per stratum, the spread over maps of per-map scores (Fig. 7): ``<metric>_sd_maps``
  (no interval).

Everything is computed from per-unit sufficient statistics of the pooled pixels:
TP/FP/FN counts (``metrics.precision`` / ``recall`` / ``f1``), the calibration-bin state
of ``metrics._calibration_update`` (``metrics._calibration_compute`` gives Brier, its
decomposition and ECE), and per-unit tables of positives/negatives per distinct score
(AP and AUC-PR in the layout of ``metrics._pr_curve``; equal to
``metrics.average_precision`` / ``metrics.auc_pr_trapezoid`` and scikit-learn, which the
tests check). A bootstrap resample re-weights the units, which equals re-scoring the
resampled pixels exactly. One multiplicity matrix
per config (key ``("firespread", config)``) is shared by all its cells and by every
submission, so comparisons are paired.

>>> rng = np.random.default_rng(0)
>>> p = rng.random((6, 16)); y = rng.random((6, 16)) < p
>>> ms = MapSet(p=p, y=y, unit=np.array([0, 0, 1, 1, 2, 2]), t=np.array([1, 2] * 3))
>>> rows, cal = score_mapset(ms, ScoreConfig(n_boot=50), ("doc",))
>>> r = next(r for r in rows if r["metric"] == "brier" and r["stratum"] == "all" and r["t"] is None)
>>> r["lo"] <= r["value"] <= r["hi"], r["n"], r["n_units"]
(True, 96, 3)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# evaluation before metrics: metrics imports evaluation.bootstrap, whose package imports metrics back
from aegisbench.evaluation.bootstrap import (count_statistics, multiplicities, percentile_interval,
                                             resample_indices)
from aegisbench import metrics as M  # noqa: E402,I001

log = logging.getLogger(__name__)

VAR_EDGES = (0.0, 1.0, 10.0, 100.0, 1000.0, 10000.0)
DICE_EDGES = tuple(np.round(np.arange(0, 11) / 10, 1))
SD_METRICS = ("precision", "recall", "f1", "average_precision", "brier")


@dataclass(frozen=True)
class ScoreConfig:
    threshold: float = 0.5
    n_bins: int = 10
    n_boot: int = 1000
    percentiles: tuple[float, float] = (2.5, 97.5)

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {self.threshold}")
        if self.n_bins < 1 or self.n_boot < 1:
            raise ValueError("n_bins and n_boot must be positive")


@dataclass(frozen=True, eq=False)
class MapSet:
    """Forecast maps of one config: ``p`` (n, P) in [0, 1], observed ``y`` (n, P) bool,
    optional ``valid`` pixel mask, optional ensemble ``oracle`` (n, P); per map its bootstrap
    ``unit``, frame ``t``, ``var_z`` (NaN if unknown) and ``dice`` (NaN if unknown)."""

    p: np.ndarray
    y: np.ndarray
    unit: np.ndarray
    t: np.ndarray | None = None
    var_z: np.ndarray | None = None
    dice: np.ndarray | None = None
    valid: np.ndarray | None = None
    oracle: np.ndarray | None = None

    def __post_init__(self) -> None:
        p = np.asarray(self.p)
        p = p.astype(np.float64 if p.dtype != np.float32 else np.float32).reshape(len(p), -1)
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "y", np.asarray(self.y, bool).reshape(p.shape))
        if self.valid is not None:
            object.__setattr__(self, "valid", np.asarray(self.valid, bool).reshape(p.shape))
        if self.oracle is not None:
            object.__setattr__(self, "oracle", np.asarray(self.oracle, np.float64).reshape(p.shape))
        unit = np.asarray(self.unit, np.int64)
        if unit.shape != (len(p),):
            raise ValueError("unit needs one entry per map")
        object.__setattr__(self, "unit", unit)


def var_label(v: float) -> str:
    """Macro-variance stratum of ``Var[Z_t]``: ``var_z:0``, ``var_z:(0,1]``, ..., ``var_z:>10000``."""
    if v <= 0:
        return "var_z:0"
    for lo, hi in zip(VAR_EDGES[:-1], VAR_EDGES[1:]):
        if v <= hi:
            return f"var_z:({lo:g},{hi:g}]"
    return f"var_z:>{VAR_EDGES[-1]:g}"


def dice_label(d: float) -> str:
    """Dice stratum as in seed 003 Table 3: ``dice:[0.0,0.1)`` ... ``dice:[0.9,1.0]``."""
    k = min(int(np.floor(d * 10 + 1e-9)), 9)
    return f"dice:[{k / 10:.1f},{(k + 1) / 10:.1f}{']' if k == 9 else ')'}"


def ap_rows(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Average precision (scikit-learn definition, ties grouped) of every row, vectorised."""
    p = np.asarray(p, np.float64)
    y = np.asarray(y, bool)
    order = np.argsort(-p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, 1)
    ys = np.take_along_axis(y, order, 1).astype(np.float64)
    tps = np.cumsum(ys, axis=1)
    n = p.shape[1]
    fps = np.arange(1, n + 1)[None, :] - tps
    end = np.ones_like(ps, bool)
    end[:, :-1] = ps[:, :-1] != ps[:, 1:]
    pos = tps[:, -1:]
    prec = np.where(end, tps / np.maximum(tps + fps, 1), 0.0)
    tp_end = np.where(end, tps, 0.0)
    prev = np.concatenate([np.zeros((len(p), 1)), np.maximum.accumulate(tp_end, axis=1)[:, :-1]], axis=1)
    gain = np.where(end, tps - prev, 0.0)
    return np.where(pos[:, 0] > 0, (gain * prec).sum(axis=1) / np.maximum(pos[:, 0], 1), 0.0)


class _Cell:
    """Per-unit sufficient statistics of the pixels of one cell."""

    def __init__(self, p: np.ndarray, y: np.ndarray, u: np.ndarray, o: np.ndarray | None,
                 n_units: int, cfg: ScoreConfig):
        self.cfg, self.n_units = cfg, n_units
        self.n = len(p)
        self.n_u = np.bincount(u, minlength=n_units).astype(np.float64)
        pred = p >= cfg.threshold
        self.counts = np.stack([np.bincount(u, weights=pred & y, minlength=n_units),
                                np.bincount(u, weights=pred & ~y, minlength=n_units),
                                np.bincount(u, weights=~pred & y, minlength=n_units)], axis=1)
        self.states = np.zeros((n_units, 5, cfg.n_bins))
        for k in np.flatnonzero(self.n_u):
            sel = u == k
            self.states[k] = M._calibration_update(None, p[sel], y[sel], cfg.n_bins)
        self.sse_o = None if o is None else np.bincount(u, weights=(o - y) ** 2, minlength=n_units)
        scores, inv = np.unique(p, return_inverse=True)
        U = len(scores)
        self.pos = np.bincount(u * U + inv, weights=y, minlength=n_units * U).reshape(n_units, U)[:, ::-1]
        self.neg = np.bincount(u * U + inv, weights=~y, minlength=n_units * U).reshape(n_units, U)[:, ::-1]

    def point(self) -> dict[str, float]:
        c = self.counts.sum(axis=0)
        out = {"precision": M.precision(c), "recall": M.recall(c), "f1": M.f1(c)}
        # AP / AUC-PR from the pooled score table (one sort per cell; equal to metrics.average_precision
        # and metrics.auc_pr_trapezoid on the pixels, which the tests check)
        out["average_precision"], out["auc_pr_trapezoid"] = weighted_pr_areas(self.pos.sum(0), self.neg.sum(0))
        cal = M._calibration_compute(self.states.sum(axis=0))
        out["ece"] = cal["ece"]
        out["brier"] = cal["brier"]
        out.update({f"brier_{k}": cal[k] for k in ("reliability", "resolution", "uncertainty", "residual")})
        if self.sse_o is not None:
            out["oracle_brier"] = float(self.sse_o.sum() / self.n)
            out["excess_brier"] = out["brier"] - out["oracle_brier"]
        return out

    def resampled(self, w: np.ndarray) -> dict[str, float]:
        """The same metrics with unit ``k`` counted ``w[k]`` times."""
        n = float(w @ self.n_u)
        if n == 0:
            return {}
        out = {k: float(v) for k, v in count_statistics(w @ self.counts).items()}
        c = M._calibration_compute(np.tensordot(w, self.states, axes=1))
        out.update({"ece": c["ece"], "brier": c["brier"], "brier_reliability": c["reliability"],
                    "brier_resolution": c["resolution"], "brier_uncertainty": c["uncertainty"],
                    "brier_residual": c["residual"]})
        if self.sse_o is not None:
            out["oracle_brier"] = float(w @ self.sse_o) / n
            out["excess_brier"] = out["brier"] - out["oracle_brier"]
        out.update(zip(("average_precision", "auc_pr_trapezoid"), weighted_pr_areas(w @ self.pos, w @ self.neg)))
        return out


def weighted_pr_areas(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float]:
    """(AP, trapezoid AUC-PR) from positive/negative weights per distinct score, highest score
    first — the layout of ``metrics._pr_curve`` with repeated samples."""
    keep = (pos + neg) > 0
    pos, neg = pos[keep], neg[keep]
    tps, fps = np.cumsum(pos), np.cumsum(neg)
    prec = np.divide(tps, tps + fps, out=np.zeros(tps.size), where=(tps + fps) != 0)
    rec = np.ones(tps.size) if tps[-1] == 0 else tps / tps[-1]
    prec_c, rec_c = np.r_[prec[::-1], 1.0], np.r_[rec[::-1], 0.0]
    ap = float(max(0.0, -np.sum(np.diff(rec_c) * prec_c[:-1])))
    return ap, float(abs(np.trapezoid(prec_c, rec_c)))


def _per_map_scores(ms: MapSet, cfg: ScoreConfig) -> dict[str, np.ndarray]:
    """Per-map precision, recall, F1, AP and Brier (for the ``*_sd_maps`` spreads of Fig. 7)."""
    p, y = ms.p, ms.y
    v = np.ones_like(y) if ms.valid is None else ms.valid
    pred = p >= cfg.threshold
    f = count_statistics(np.stack([(pred & y & v).sum(1), (pred & ~y & v).sum(1), (~pred & y & v).sum(1)], axis=1))
    brier = (((p.astype(np.float64) - y) ** 2) * v).sum(1) / np.maximum(v.sum(1), 1)
    if ms.valid is None:
        ap = np.concatenate([ap_rows(p[a:a + 256], y[a:a + 256]) for a in range(0, len(p), 256)])
    else:
        ap = np.array([M.average_precision(p[i][v[i]], y[i][v[i]]) if v[i].any() else 0.0 for i in range(len(p))])
    return {"precision": f["precision"], "recall": f["recall"], "f1": f["f1"], "average_precision": ap, "brier": brier}


def _cells(ms: MapSet) -> list[tuple[int | None, str, np.ndarray]]:
    n = len(ms.p)
    cells = [(None, "all", np.arange(n))]
    if ms.t is not None:
        t = np.asarray(ms.t)
        cells += [(int(v), "all", np.flatnonzero(t == v)) for v in np.unique(t)]
    for attr, label in (("var_z", var_label), ("dice", dice_label)):
        vals = getattr(ms, attr)
        if vals is None:
            continue
        labels = np.array([label(float(v)) if np.isfinite(v) else "" for v in vals], dtype=object)
        for lab in sorted(set(labels) - {""}):
            cells.append((None, lab, np.flatnonzero(labels == lab)))
    return cells


def score_mapset(ms: MapSet, cfg: ScoreConfig, key: Sequence) -> tuple[list[dict], dict]:
    """Rows ``{t, stratum, metric, value, lo, hi, n, n_units}`` for every cell of a map set,
    and the pooled calibration curve ``{prob_true, prob_pred, count}``."""
    n_units = int(ms.unit.max()) + 1 if len(ms.unit) else 0
    W = multiplicities(resample_indices(n_units, ("firespread", *key), cfg.n_boot), n_units)
    Wu, inv = np.unique(W, axis=0, return_inverse=True)
    inv = np.asarray(inv).reshape(-1)
    hw = ms.p.shape[1]
    rows: list[dict] = []
    calib: dict = {}
    per_map = None
    for t, stratum, sel in _cells(ms):
        if sel.size == 0:
            continue
        mask = np.ones((len(sel), hw), bool) if ms.valid is None else ms.valid[sel]
        if not mask.any():
            continue
        p, y = ms.p[sel][mask], ms.y[sel][mask]
        u = np.broadcast_to(ms.unit[sel][:, None], mask.shape)[mask]
        o = None if ms.oracle is None else ms.oracle[sel][mask]
        cell = _Cell(p, y, u, o, n_units, cfg)
        point = cell.point()
        samples = [cell.resampled(w.astype(np.float64)) for w in Wu]
        n_present = int((cell.n_u > 0).sum())
        for name, value in point.items():
            boot = np.array([s.get(name, np.nan) for s in samples])[inv]
            lo, hi = percentile_interval(boot, cfg.percentiles)
            rows.append({"t": t, "stratum": stratum, "metric": name, "value": float(value), "lo": lo, "hi": hi,
                         "n": int(mask.sum()), "n_units": n_present})
        if t is None:
            per_map = per_map if per_map is not None else _per_map_scores(ms, cfg)
            for name in SD_METRICS:
                rows.append({"t": t, "stratum": stratum, "metric": f"{name}_sd_maps",
                             "value": float(np.std(per_map[name][sel])), "lo": float("nan"), "hi": float("nan"),
                             "n": int(len(sel)), "n_units": n_present})
        if t is None and stratum == "all":
            c = M._calibration_compute(cell.states.sum(axis=0))
            calib = {"prob_true": c["prob_true"], "prob_pred": c["prob_pred"], "count": c["count"]}
    return rows, calib
