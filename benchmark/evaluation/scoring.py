"""Metric rows of one source: every condition scored against the model's own clean run.

:class:`ConditionScorer` turns :class:`~aegisbench.evaluation.evaluator.SplitScore`
objects into long-format rows (``source, config, corruption, family, severity,
metric, value, lo, hi, n``) and remembers what later conditions are compared with.
Metric names (one snake_case name per quantity):

* counts and rates at the frozen threshold: ``tp fp fn recall precision f1``; size
  bands ``recall_tiny recall_small recall_medium recall_large``;
* threshold-free: ``map50 map50_95``;
* against clean: ``relative_drop_<recall|precision|f1|map50|map50_95>``, ``loc_iou``
  (localization stability), ``loc_center_shift``, ``loc_n_both``, ``silent_failure``
  (1 = flagged), ``effectiveness`` and ``effectiveness_size_<band>`` (seed 002);
  ``warp_map_loss`` (mAP50-95 % loss against clean, positive = worse, as seed 000 reports it)
  on WARP global-noise configs;
* clean only: ``frozen_threshold val_f1 val_recall val_precision``;
* smoke: ``image_precision image_recall image_f1``, ``time_to_detect_min``,
  ``time_to_detect_min_sd``, ``time_to_detect_frames``, ``time_to_detect_frames_sd``,
  ``sequences_detected``; config ``warp_patch``: ``alpha beta gamma``.

>>> family_of({"corruption": "low_light", "family": "storm"}), family_of({"family": "warp"})
('storm', None)
"""

from __future__ import annotations

import logging
import math

import numpy as np

from aegisbench.evaluation.bootstrap import Resamples, condition_intervals, count_intervals, percentile_interval
from aegisbench.evaluation.smoke_eval import delay_summary, image_level, sequence_delays
from aegisbench.hashing import rng_for
from aegisbench.metrics import (SIZE_BANDS, effectiveness_breakdown, effectiveness_interval, effectiveness_score,
                                f1, image_positive, localization_stability, map_percent_loss, precision, recall,
                                recall_by_size, relative_drop, silent_failure)

log = logging.getLogger(__name__)

FAMILIES = ("flood", "wildfire", "storm", "earthquake")
DROP_METRICS = ("recall", "precision", "f1", "map50", "map50_95")


def family_of(meta: dict) -> str | None:
    """The disaster family of a config, or None when it has none of the four."""
    fam = meta.get("family")
    return fam if fam in FAMILIES else None


def _num(v) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else float(v)


def _size_band(boxes: np.ndarray) -> str:
    area = float(np.median((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])))
    return next(name for name, lo, hi in SIZE_BANDS if lo <= area < hi)


class ConditionScorer:
    """Scores the configs of one source of one submission (clean first)."""

    def __init__(self, sub, index, source: str, threshold: float, params, resamples: Resamples, key: tuple):
        self.sub, self.index, self.source, self.thr = sub, index, source, threshold
        self.params, self.resamples, self.key = params, resamples, key
        self.rows: list[dict] = []
        self.degenerate: list[dict] = []
        self.values: dict[str, dict] = {}
        self.eff: dict[str, dict] = {}

    # --------------------------------------------------------------- rows

    def _meta(self, config: str) -> dict:
        if config == "warp_patch":
            return {"corruption": "cloud_patch", "family": None, "severity": 0}
        meta = self.index.meta(config)
        sev = meta.get("severity") if config != "clean" else 0
        corruption = meta.get("corruption") if config != "clean" else None
        corruption = corruption if isinstance(corruption, str) and corruption else None
        return {"corruption": corruption, "family": family_of(meta) if corruption else None,
                "severity": int(sev) if isinstance(sev, (int, np.integer)) and not isinstance(sev, bool) else 0}

    def add(self, config: str, metric: str, value, interval=None, n: int | None = None) -> None:
        lo, hi = (None, None) if interval is None else (_num(interval[0]), _num(interval[1]))
        if lo is None or hi is None:
            lo = hi = None
        row = {"submission": self.sub.id, "track": self.sub.meta.track, "source": self.source, "config": config,
               **self._meta(config), "metric": metric, "value": _num(value), "lo": lo, "hi": hi,
               "n": None if n is None else int(n)}
        self.rows.append(row)
        if lo is not None and lo == hi:
            self.degenerate.append({"source": self.source, "config": config, "metric": metric,
                                    "value": row["value"], "lo": lo, "hi": hi})

    def _resamples_for(self, config: str, n: int) -> Resamples:
        if n == self.resamples.n_images:
            return self.resamples
        return Resamples.draw(n, (*self.key, config), self.params.bootstrap.n_resamples)

    # --------------------------------------------------------- conditions

    def add_validation_rows(self, val, vf1: float) -> None:
        c = val.match.counts(self.thr)
        n = len(val.dets)
        self.add("clean", "frozen_threshold", self.thr, n=n)
        self.add("clean", "val_f1", vf1, n=n)
        self.add("clean", "val_recall", recall(c), n=int(c[:, 0].sum() + c[:, 2].sum()))
        self.add("clean", "val_precision", precision(c), n=int(c[:, 0].sum() + c[:, 1].sum()))

    def score_config(self, score, clean) -> None:
        """Rows of one config; ``clean`` is the clean SplitScore when the images pair up."""
        config, m, thr = score.config, score.match, self.thr
        c = m.counts(thr)
        tp, fp, fn = (int(v) for v in c.sum(axis=0))
        n_img = len(score.dets)
        res = self._resamples_for(config, n_img)
        ci = condition_intervals(m, thr, params=self.params.bootstrap, resamples=res) if n_img else {}
        coco = score.coco(self.params.max_dets)
        vals = {"recall": recall(c), "precision": precision(c), "f1": f1(c),
                "map50": coco["map50"], "map50_95": coco["map50_95"]}
        for name, v in (("tp", tp), ("fp", fp), ("fn", fn)):
            self.add(config, name, v, n=n_img)
        self.add(config, "recall", vals["recall"], ci.get("recall"), tp + fn)
        self.add(config, "precision", vals["precision"], ci.get("precision"), tp + fp)
        self.add(config, "f1", vals["f1"], ci.get("f1"), n_img)
        self.add(config, "map50", vals["map50"], ci.get("map50"), n_img)
        self.add(config, "map50_95", vals["map50_95"], None, n_img)
        for band, r in recall_by_size(m.gt_xyxy, m.gt_detected(thr)).items():
            if r["n_gt"]:
                self.add(config, f"recall_{band}", r["recall"], n=r["n_gt"])
        self.values[config] = vals
        if config == "clean":
            return
        base = self.values["clean"]
        for name in DROP_METRICS:
            self.add(config, f"relative_drop_{name}", relative_drop(base[name], vals[name]), n=n_img)
        if self.index.meta(config).get("kind") == "warp_noise":
            self.add(config, "warp_map_loss", map_percent_loss(vals["map50_95"], base["map50_95"]), n=n_img)
        if clean is None:
            log.warning("%s/%s: images differ from clean; no stability or effectiveness", config, self.source)
            return
        try:
            loc = localization_stability(clean.match, m, thr)
        except ValueError as exc:
            log.warning("%s/%s: %s; no localization stability", config, self.source, exc)
            return
        self.add(config, "loc_iou", loc["stability"], n=loc["n_both"])
        self.add(config, "loc_center_shift", loc["center_shift"], n=loc["n_both"])
        self.add(config, "loc_n_both", loc["n_both"], n=loc["n_clean_detected"])
        flag = silent_failure(base["recall"], vals["recall"], loc["stability"], loc["n_both"], self.params.silent)
        self.add(config, "silent_failure", float(flag), n=n_img)
        self._effectiveness(config, clean, score)

    def _effectiveness(self, config: str, clean, score) -> None:
        n_gt = clean.gt.n_gt()
        env = np.flatnonzero(n_gt > 0)
        if not len(env):
            return
        b = clean.match.counts(self.thr)[env, 0]
        a = score.match.counts(self.thr)[env, 0]
        n = n_gt[env]
        s = effectiveness_score(b, a, n)
        lo, hi = effectiveness_interval(b, a, n, (*self.key, config, "effectiveness"),
                                        self.params.bootstrap.n_resamples, self.params.bootstrap.percentiles)
        self.add(config, "effectiveness", s, (lo, hi), len(env))
        levels = [_size_band(clean.gt.boxes[i]) for i in env]
        size = effectiveness_breakdown(b, a, n, {"size": levels})["size"]
        for band, v in size.items():
            self.add(config, f"effectiveness_size_{band}", v, n=levels.count(band))
        meta = self._meta(config)
        self.eff[config] = {"value": s, "lo": lo, "hi": hi, "n_environments": len(env), "size": size, **meta}

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
        """Image-level P/R/F1 and time to detect of one config; returns the per-sequence columns."""
        config, gt, thr = score.config, score.gt, self.thr
        il = image_level(gt, score.match, thr)
        g, p = gt.n_gt() > 0, image_positive(score.match, thr)
        counts = np.stack([g & p, ~g & p, g & ~p], axis=1).astype(np.int64)
        ci = {}
        if len(counts):
            res = self._resamples_for(config, len(counts))
            ci = count_intervals(counts, (*self.key, config, "image"), percentiles=self.params.bootstrap.percentiles,
                                 weights=res.weights_t.T)
        for name in ("precision", "recall", "f1"):
            self.add(config, f"image_{name}", il[name], ci.get(name), len(counts))
        delays = sequence_delays(gt, score.match, thr)
        if delays:
            s = delay_summary(delays)
            self.add(config, "time_to_detect_min", s["mean_minutes"], n=s["n_detected"])
            self.add(config, "time_to_detect_min_sd", s["sd_minutes"], n=s["n_detected"])
            self.add(config, "time_to_detect_frames", s["mean_frames"], n=s["n_detected"])
            self.add(config, "time_to_detect_frames_sd", s["sd_frames"], n=s["n_detected"])
            self.add(config, "sequences_detected", s["n_detected"] / s["n_sequences"], n=s["n_sequences"])
        k = len(delays)
        return {"submission": [self.sub.id] * k, "source": [self.source] * k, "config": [config] * k,
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
        idx = rng_for(*self.key, "warp_patch").integers(0, n, (self.params.bootstrap.n_resamples, n))
        for name in ("alpha", "beta", "gamma"):
            v = np.asarray(res[name], np.float64)
            interval = percentile_interval(v[idx].mean(axis=1), self.params.bootstrap.percentiles)
            self.add("warp_patch", name, float(v.mean()), interval, n)
            doc[name] = float(v.mean())
        return doc
