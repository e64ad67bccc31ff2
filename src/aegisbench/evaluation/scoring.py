"""Metric rows of one source: every condition scored against the model's own clean run.

:class:`ConditionScorer` builds one :class:`~aegisbench.metrics.ConditionContext` per
config and writes a long-format row (``source, config, corruption, family, severity,
metric, value, lo, hi, n``) for every registered per-condition metric of the track
(:func:`aegisbench.metrics.condition_cells`, in registration order), plus the clean
validation rows and the WARP patch rates. Every row names a registered metric; the
names, directions and units are in :mod:`aegisbench.metrics` (``aegisbench.metrics.REGISTRY``),
not here.

>>> family_of({"corruption": "low_light", "family": "storm"}), family_of({"family": "warp"})
('storm', None)
"""

from __future__ import annotations

import functools
import logging
import math

import numpy as np

from aegisbench.fields import is_int
from aegisbench.evaluation.bootstrap import Resamples, condition_intervals, count_intervals, percentile_interval
from aegisbench.stats import resample_indices
from aegisbench.metrics.declared import LABEL_MATCH_IOU
from aegisbench.metrics import (REGISTRY, ZERO_DIVISION, ConditionBootstrap, ConditionContext, condition_cells,
                                effectiveness_of, precision, recall, sequence_delays_of)
from aegisbench.vocab import CLEAN, CLOUD_PATCH, WARP_NOISE, WARP_PATCH, config_kind, disaster_family

log = logging.getLogger(__name__)


def family_of(meta: dict) -> str | None:
    """The disaster family of a config, or None when it has none of the four."""
    return disaster_family(meta.get("family"))


def _num(v) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


class ConditionScorer:
    """Scores the configs of one source of one submission (clean first)."""

    def __init__(self, sub, index, source: str, threshold: float, params, resamples: Resamples, key: tuple):
        self.sub, self.index, self.source, self.thr = sub, index, source, threshold
        self.params, self.resamples, self.key = params, resamples, key
        self.track = sub.meta.track
        self.rows: list[dict] = []
        self.degenerate: list[dict] = []
        self.eff: dict[str, dict] = {}
        self.contexts: dict[str, ConditionContext] = {}  # clean and the config scored last
        self.stratum: str | None = None  # "COLUMN=value" on the rows of a stratum's scorer

    # --------------------------------------------------------------- rows

    def _meta(self, config: str) -> dict:
        if config == WARP_PATCH:
            return {"corruption": CLOUD_PATCH, "family": None, "severity": 0}
        if config_kind(config) == WARP_NOISE:  # a level of the WARP noise sweep (results only)
            return {"corruption": WARP_NOISE, "family": None, "severity": 0}
        meta = self.index.meta(config)
        sev = meta.get("severity") if config != CLEAN else 0
        corruption = meta.get("corruption") if config != CLEAN else None
        corruption = corruption if isinstance(corruption, str) and corruption else None
        return {"corruption": corruption, "family": family_of(meta) if corruption else None,
                "severity": int(sev) if is_int(sev) else 0}

    def add(self, config: str, metric: str, value, interval=None, n: int | None = None,
            note: str | None = None) -> None:
        """One row; ``metric`` must be registered (``ValueError`` otherwise). An undefined
        value (None / NaN) is null with no interval and ``note`` (default "0/0")."""
        REGISTRY.require([metric], where=f"{self.source}/{config}")
        value = _num(value)
        lo, hi = (None, None) if interval is None or value is None else (_num(interval[0]), _num(interval[1]))
        if lo is None or hi is None:
            lo = hi = None
        row = {"submission": self.sub.id, "track": self.track, "source": self.source, "config": config,
               **self._meta(config), "metric": metric, "value": value, "lo": lo, "hi": hi,
               "n": None if n is None else int(n), "note": (note or ZERO_DIVISION) if value is None else None}
        if self.stratum is not None:
            row["stratum"] = self.stratum
        self.rows.append(row)
        if lo is not None and lo == hi:
            self.degenerate.append({"source": self.source, "config": config, "metric": metric,
                                    "value": row["value"], "lo": lo, "hi": hi,
                                    **({} if self.stratum is None else {"stratum": self.stratum})})

    def _resamples_for(self, config: str, n: int) -> Resamples:
        if n == self.resamples.n_images:
            return self.resamples
        return Resamples.draw(n, (*self.key, config), self.params.bootstrap.n_resamples)

    # --------------------------------------------------------- conditions

    def add_validation_rows(self, val, vf1: float) -> None:
        c = val.match.counts(self.thr)
        n = len(val.dets)
        self.add(CLEAN, "frozen_threshold", self.thr, n=n)
        self.add(CLEAN, "val_f1", vf1, n=n)
        self.add(CLEAN, "val_recall", recall(c), n=int(c[:, 0].sum() + c[:, 2].sum()))
        self.add(CLEAN, "val_precision", precision(c), n=int(c[:, 0].sum() + c[:, 1].sum()))

    def add_label_match_row(self, clean) -> None:
        """The share of the kept clean test boxes that copy the GT box they are matched to
        (IoU >= :data:`~aegisbench.metrics.declared.LABEL_MATCH_IOU`)."""
        m = clean.match
        kept = m.kept(self.thr)
        copies = kept & (m.pred_iou >= LABEL_MATCH_IOU)
        n = int(kept.sum())
        self.add(CLEAN, "label_match", copies.sum() / n if n else None, n=n)

    def _bootstrap(self, config: str, match, n_img: int, counts: np.ndarray) -> ConditionBootstrap:
        boot = self.params.bootstrap
        res = self._resamples_for(config, n_img) if n_img else self.resamples
        shared = functools.partial(condition_intervals, match, self.thr, params=boot, resamples=res, counts=counts)
        counts = functools.partial(_count_intervals, key=(*self.key, config, "image"), percentiles=boot.percentiles,
                                   weights=res.weights_t)
        return ConditionBootstrap(res.weights_t, self.key, boot.n_resamples, boot.percentiles, shared, counts)

    def context(self, score, clean) -> ConditionContext:
        """The :class:`~aegisbench.metrics.ConditionContext` of one config's SplitScore
        (``clean``: the clean SplitScore when the images pair up, else None)."""
        config, m = score.config, score.match
        is_clean = config == CLEAN
        kind = CLEAN if is_clean else config_kind(config) if config_kind(config) == WARP_NOISE \
            else self.index.meta(config).get("kind")  # a WARP noise level: results only, not in the manifest
        counts = m.counts(self.thr)
        return ConditionContext(
            track=self.track, source=self.source, config=config, kind=kind, threshold=self.thr,
            counts=counts, match=m, gt=score.gt, coco=score.coco(self.params.max_dets),
            clean=None if is_clean else self.contexts[CLEAN], paired=is_clean or clean is not None,
            silent=self.params.silent, bootstrap=self._bootstrap(config, m, len(score.dets), counts))

    def score_config(self, score, clean) -> None:
        """Rows of every registered per-condition metric of one config; ``clean`` is the
        clean SplitScore when the images pair up (stability and effectiveness need it)."""
        config = score.config
        if config != CLEAN and clean is None:
            log.warning("%s/%s: images differ from clean; no stability or effectiveness", config, self.source)
        ctx = self.context(score, clean)
        self.contexts = {CLEAN: self.contexts.get(CLEAN, ctx), config: ctx}
        for name, cell in condition_cells(ctx):
            self.add(config, name, cell.value, cell.interval, cell.n, cell.note)
        eff = effectiveness_of(ctx) if "effectiveness" in REGISTRY else None
        if eff is not None:
            self.eff[config] = {**{k: eff[k] for k in ("value", "lo", "hi", "n_environments", "size")},
                                **self._meta(config)}

    def effectiveness_summary(self) -> dict:
        """S per condition, and averaged over the conditions of each family and severity."""
        by_family: dict[str, list] = {}
        by_severity: dict[str, list] = {}
        for e in self.eff.values():
            by_family.setdefault(e["family"] or "other", []).append(e["value"])
            by_severity.setdefault(str(e["severity"]), []).append(e["value"])
        mean = lambda d: {k: float(np.mean(v)) for k, v in sorted(d.items())}  # noqa: E731
        return {"definition": "S(P,E) = mean over environments e (test images with GT) of "
                "(TP_clean,e - TP_condition,e) / n_gt,e at the frozen threshold (seed 002)",
                "by_condition": self.eff, "by_family": mean(by_family), "by_severity": mean(by_severity)}

    # ----------------------------------------------------------------- smoke

    def smoke_rows(self, score) -> dict[str, list]:
        """The per-sequence time-to-detect columns of one config already scored by
        :meth:`score_config` (its image-level and time-to-detect rows are written there)."""
        ctx = self.contexts[score.config]
        delays = sequence_delays_of(ctx)
        k = len(delays)
        return {"submission": [self.sub.id] * k, "source": [self.source] * k, "config": [score.config] * k,
                "group_id": [d["group_id"] for d in delays],
                "fire_start_frame": [d["fire_start_frame"] for d in delays],
                "n_frames": [d["n_frames"] for d in delays], "detected": [d["detected"] for d in delays],
                "frames": [d["frames"] for d in delays], "minutes": [d["minutes"] for d in delays]}

    def patch_rows(self, res: dict) -> dict:
        """alpha / beta / gamma rows (config ``warp_patch``) and the JSON document."""
        n = len(res["image_ids"])
        patch = self.sub.warp_patch
        doc = {"grid": patch.grid, "patch_px": patch.patch_px, "n_images": n, "threshold": self.thr,
               "images": "smoke-positive images of the clean test split"
               + (" listed under warp_patch.images" if patch.images is not None else ""),
               "gamma_count_table": [{"deceptions": d, "gamma": g, "images": k}
                                     for d, g, k in res["gamma_count_table"]],
               "heatmap": np.asarray(res["heatmap"]).tolist()}
        if not n:
            return doc
        idx = resample_indices(n, (*self.key, WARP_PATCH), self.params.bootstrap.n_resamples)
        for name in ("alpha", "beta", "gamma", "gamma_positions"):
            v = np.asarray(res[name], np.float64)
            interval = percentile_interval(v[idx].mean(axis=1), self.params.bootstrap.percentiles)
            self.add(WARP_PATCH, name, float(v.mean()), interval, n)
            doc[name] = float(v.mean())
        return doc


    def noise_rows(self, curve: dict) -> dict:
        """The L(a) rows (metric ``warp_map_loss``, config ``warp_noise_<a>``) of the WARP noise
        sweep's curve (:func:`~aegisbench.evaluation.warp_noise_eval.sweep_curve`); returns the
        curve. Each level's other rows are those of any condition (:meth:`score_config`)."""
        n = curve["n_images"]
        for level in curve["levels"]:
            self.add(level["config"], "warp_map_loss", level["loss"], (level["lo"], level["hi"]), n)
        for step in curve["decreasing_steps"]:
            log.info("%s: L(a) falls from a = %g to %g by %.2f points, interval [%.2f, %.2f]: %s", self.source,
                     step["from"], step["to"], -step["change"], -step["hi"], -step["lo"],
                     "within noise" if step["within_noise"] else "beyond noise")
        return curve


def _count_intervals(counts: np.ndarray, key: tuple, percentiles, weights: np.ndarray) -> dict:
    """recall / precision / F1 intervals of per-image counts on the split's shared weights."""
    return count_intervals(counts, key, percentiles=percentiles, weights=weights.T)
