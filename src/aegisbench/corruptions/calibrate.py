"""Severity calibration: measure each ladder's declared statistic, optionally fit it.

For every corruption the declared statistic is measured at s1..s3 on a fixed sample
(the same per-image seeds every time: ``rng_for(version, "calibration", image_id,
corruption, severity)``). Each ladder gets two verdicts, never merged into one:
``monotone`` (the means move strictly in the declared direction) and ``on_target``
(every mean within the declared tolerance ``rtol``, 2 %, of its target; the targets are
the reference release's means on HERIDAL, see :data:`TARGET_SOURCE`). Measuring
(``fit=False``) fails only a ladder that is not monotone: synthetic or thermal frames
are not HERIDAL, and a miss of the HERIDAL target is reported, not refused. With
``fit=True`` each severity's ONE physical parameter is solved by Brent's method on its
declared bracket so that the sample mean hits the target within ``rtol``, and a miss
fails. The fitted table is saved as a versioned YAML file.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> imgs = {"a": (rng.random((64, 64, 3)) * 255).astype(np.uint8)}
>>> rep = calibrate(imgs, ["low_light"])
>>> rep.ladders["low_light"].monotone
True
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import brentq

import aegisbench
from aegisbench.atomic import atomic_write_text
from aegisbench.corruptions.conditions import px_per_kpx
from aegisbench.corruptions.optics import check_image
from aegisbench.corruptions.registry import SEVERITIES, SeverityTable, get_spec, names
from aegisbench.corruptions.statistics import measure
from aegisbench.errors import BadInput
from aegisbench.fields import check_int
from aegisbench.readers import read_yaml
from aegisbench.vocab import severity_key
from aegisbench.hashing import key_digest, pixel_sha256, rng_for

log = logging.getLogger(__name__)

TABLE_FORMAT = 1
DEFAULT_TABLE_PATH = Path("calibration/severities.yaml")
CALIBRATION_SALT = "calibration"
#: where the registry's targets come from (the statistic definitions are the reference's too)
TARGET_SOURCE = ("HERIDAL: the reference release's 20-image calibration sample "
                 "(Altis-2026/AegisBench results/phase3/calibration.csv)")
#: ladders whose registry targets are not the reference's, and why
OWN_TARGETS = {"rain_streaks": "AegisBench's own (streak coverage): the reference ladder (0.134 / 0.091 / 0.129) "
                               "is not monotone"}


def target_source(name: str, table: SeverityTable | None = None) -> str:
    """Where the targets of ``name``'s ladder come from: a severity table's own, ours, or HERIDAL's."""
    if table is not None and name in table.targets:
        return "the severity table's own targets"
    return OWN_TARGETS.get(name, TARGET_SOURCE)


@dataclass(frozen=True)
class LadderReport:
    """Measured ladder of one corruption."""

    corruption: str
    statistic: str
    direction: int
    targets: tuple[float, float, float]
    means: tuple[float, float, float]
    stds: tuple[float, float, float]
    clean_mean: float
    params: dict
    fit_param: str
    fitted: bool
    within_tolerance: tuple[bool, bool, bool]
    messages: tuple[str, ...] = ()
    target_source: str = TARGET_SOURCE

    @property
    def monotone(self) -> bool:
        """The means move strictly in the declared direction (what the ladder must do)."""
        return bool(np.all(np.diff(self.means) * self.direction > 0))

    @property
    def on_target(self) -> bool:
        """Every severity's mean is within the tolerance of its target."""
        return all(self.within_tolerance)

    @property
    def rel_errors(self) -> tuple[float, ...]:
        return tuple(abs(m - t) / abs(t) for m, t in zip(self.means, self.targets))

    @property
    def passed(self) -> bool:
        """What the run requires: monotone; and, when fitted, on target."""
        return self.monotone and (not self.fitted or self.on_target)

    def to_dict(self) -> dict:
        sev = {severity_key(s): {"target": self.targets[s - 1], "measured": self.means[s - 1],
                                 "std": self.stds[s - 1],
                                 "diff_pct": 100.0 * (self.means[s - 1] - self.targets[s - 1]) / abs(self.targets[s - 1]),
                                 "on_target": self.within_tolerance[s - 1],
                                 self.fit_param: self.params[s][self.fit_param]} for s in SEVERITIES}
        return {"statistic": self.statistic, "direction": self.direction, "clean": self.clean_mean,
                "monotone": self.monotone, "on_target": self.on_target, "fitted": self.fitted,
                "target_source": self.target_source, "fit_param": self.fit_param, "severities": sev,
                "messages": list(self.messages)}


@dataclass(frozen=True)
class CalibrationReport:
    """Result of :func:`calibrate`: per-corruption ladders and the table they used."""

    benchmark_version: str
    sample_ids: tuple[str, ...]
    ladders: dict[str, LadderReport]
    table: SeverityTable
    fit: bool
    rtol: float
    geometry: str = "frame"
    extra: dict = field(default_factory=dict)

    @property
    def monotone(self) -> bool:
        return all(lad.monotone for lad in self.ladders.values())

    @property
    def on_target(self) -> bool:
        return all(lad.on_target for lad in self.ladders.values())

    def failures(self) -> list[str]:
        out = []
        for name, lad in self.ladders.items():
            if not lad.monotone and not (lad.fitted and not all(lad.within_tolerance)):
                out.append(f"{name}: {lad.statistic} not strictly monotone "
                           f"({', '.join(f'{m:.4g}' for m in lad.means)})")
            if lad.fitted and not all(lad.within_tolerance):  # (a failed fit explains the order)
                if lad.messages:
                    out.extend(f"{name} {m}" for m in lad.messages)
                bad = [s for s in SEVERITIES if not lad.within_tolerance[s - 1]
                       and not any(m.startswith(f"s{s}:") for m in lad.messages)]
                out.extend(f"{name} s{s}: fit ended at {lad.statistic} {lad.means[s - 1]:.4g}, "
                           f"{lad.rel_errors[s - 1]:.1%} off the target {lad.targets[s - 1]:.4g}"
                           for s in bad)
        return out

    def to_dict(self) -> dict:
        """The report: what was measured (``measured_on``: the source and frames), against which
        targets (each ladder's ``target_source``), the difference in % per severity and the two
        verdicts, ``monotone`` and ``on_target`` (within ``tolerance``), per ladder and overall."""
        ladders = self.ladders.values()
        return {"benchmark_version": self.benchmark_version, "fit": self.fit, "tolerance": self.rtol,
                "geometry": self.geometry, "sample_size": len(self.sample_ids),
                "measured_on": {"frames": len(self.sample_ids), **self.extra.get("measured_on", {})},
                "monotone": self.monotone, "on_target": self.on_target,
                "ladders_monotone": sum(lad.monotone for lad in ladders),
                "cells_on_target": sum(sum(lad.within_tolerance) for lad in ladders),
                "cells": 3 * len(self.ladders), "sample_ids": list(self.sample_ids),
                "corruptions": {n: lad.to_dict() for n, lad in self.ladders.items()}}


def select_sample(ids: Sequence[str], n: int, benchmark_version: str,
                  salt: str = CALIBRATION_SALT) -> list[str]:
    """Deterministic sample of ``n`` ids: rank by SHA-256 of (version, salt, id).

    Independent of the order of ``ids``.

    >>> select_sample(["c", "a", "b"], 2, "0.1.0") == select_sample(["b", "c", "a"], 2, "0.1.0")
    True
    """
    check_int(n, "sample size", lo=1, error=BadInput, where="--sample")
    unique = sorted(set(ids))
    return sorted(unique, key=lambda i: key_digest(benchmark_version, salt, i))[:n]


def _as_mapping(images, image_ids) -> dict[str, np.ndarray]:
    if isinstance(images, Mapping):
        items = {str(k): v for k, v in images.items()}
    else:
        images = list(images)
        if image_ids is not None:
            if len(image_ids) != len(images):
                raise BadInput("image_ids and images differ in length", where="calibration sample")
            items = {str(k): v for k, v in zip(image_ids, images)}
        else:
            items = {}
            for img in images:
                check_image(img, where="calibration sample")
                items[pixel_sha256(img)[:16]] = img
    if not items:
        raise BadInput("calibration sample is empty", where="calibration sample")
    for k, img in items.items():
        check_image(img, where=f"calibration image {k}")
    return items


class _Ladder:
    """Evaluates mean statistics of one corruption on the sample with fixed seeds."""

    def __init__(self, name, sample, version, geometry, boxes):
        self.spec = get_spec(name)
        self.sample = sample
        self.version = version
        self.scales = {k: px_per_kpx(img.shape, geometry, (boxes or {}).get(k)) for k, img in sample.items()}
        self.evaluations = 0

    def values(self, params, severity: int) -> np.ndarray:
        self.evaluations += 1
        fields = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
        out = []
        for k, img in self.sample.items():
            rng = rng_for(self.version, CALIBRATION_SALT, k, self.spec.name, severity)
            corrupted = self.spec.fn(img, rng, px_per_kpx=self.scales[k], **fields)
            out.append(measure(self.spec.statistic, corrupted, img))
        return np.asarray(out, float)

    def fit(self, params, severity: int, target: float, rtol: float):
        """Solve the fit parameter for ``target``; returns (params, message or "")."""
        name = self.spec.fit_param
        lo, hi = self.spec.fit_bounds

        def f(x: float) -> float:
            return float(self.values(dataclasses.replace(params, **{name: x}), severity).mean()) - target

        found = _bracket(f, float(getattr(params, name)), lo, hi)
        if isinstance(found, str):
            return params, (f"s{severity}: target {self.spec.statistic} {target:.4g} is unreachable: "
                            f"{name} {found}")
        a, b, root = found
        x = root if root is not None else brentq(f, a, b, xtol=1e-6 * (hi - lo), rtol=1e-6,
                                                  maxiter=60)
        return dataclasses.replace(params, **{name: float(f"{x:.6g}")}), ""


def _bracket(f, x0: float, lo: float, hi: float, max_steps: int = 24):
    """Walk from ``x0`` toward the root of ``f`` with doubling steps until the sign
    changes. Returns (a, b, exact_root_or_None) or a message if the bounds are hit."""
    x0 = min(max(x0, lo), hi)
    f0 = f(x0)
    if f0 == 0.0:
        return x0, x0, x0
    step = max(abs(x0) * 0.2, (hi - lo) * 1e-3)
    direction = 1.0 if x0 + step <= hi else -1.0
    x1 = min(max(x0 + direction * step, lo), hi)
    f1 = f(x1)
    if abs(f1) > abs(f0) and np.sign(f1) == np.sign(f0):
        direction, x1, f1 = -direction, x0, f0  # walk the other way
    def at_bound(x: float, fx: float) -> str:
        side = "lower" if x == lo else "upper"
        return f"stops at its {side} bound {x:g} (declared range [{lo:g}, {hi:g}]), {fx:+.4g} from it"

    for _ in range(max_steps):
        if f1 == 0.0:
            return x1, x1, x1
        if np.sign(f1) != np.sign(f0):
            return min(x0, x1), max(x0, x1), None
        if x1 in (lo, hi) and x1 != x0:
            return at_bound(x1, f1)
        x0, f0 = x1, f1
        step *= 2.0
        x1 = min(max(x0 + direction * step, lo), hi)
        if x1 == x0:
            return at_bound(x1, f1)
        f1 = f(x1)
    return f"finds no sign change in [{lo:g}, {hi:g}] after {max_steps} steps"


def calibrate(images, corruptions: Sequence[str] | None = None, fit: bool = False, *,
              image_ids: Sequence[str] | None = None, benchmark_version: str | None = None,
              table: SeverityTable | None = None, rtol: float = 0.02, geometry: str = "frame",
              boxes: Mapping[str, np.ndarray] | None = None,
              measured_on: Mapping | None = None) -> CalibrationReport:
    """Measure (and with ``fit=True`` solve) every requested severity ladder.

    ``images`` is a list of RGB uint8 arrays (keyed by their pixel hash) or a mapping
    ``image_id -> array``; ``boxes`` optionally maps ids to xyxy boxes for
    target-relative geometry; ``measured_on`` says what the frames are (the report's
    ``measured_on``: source, table, splits).
    """
    sample = _as_mapping(images, image_ids)
    version = benchmark_version or aegisbench.__version__
    chosen = list(corruptions) if corruptions is not None else names()
    for name in chosen:
        get_spec(name)
    table = table or SeverityTable(benchmark_version=version)
    ladders = {}
    for name in chosen:
        ladder = _Ladder(name, sample, version, geometry, boxes)
        spec = ladder.spec
        clean = float(np.mean([measure(spec.statistic, img, img) for img in sample.values()]))
        messages, used = [], {}
        targets = table.targets_for(name)
        for s in SEVERITIES:
            params = table.params(name, s)
            if fit:
                params, msg = ladder.fit(params, s, targets[s - 1], rtol)
                if msg:
                    messages.append(msg)
                table = table.with_params(name, s, params)
            used[s] = params
        vals = [ladder.values(used[s], s) for s in SEVERITIES]
        means = tuple(float(v.mean()) for v in vals)
        within = tuple(abs(m - t) <= rtol * abs(t) for m, t in zip(means, targets))
        lad = LadderReport(
            corruption=name, statistic=spec.statistic, direction=spec.direction,
            targets=targets, means=means, stds=tuple(float(v.std()) for v in vals),
            clean_mean=clean, params={s: dataclasses.asdict(used[s]) for s in SEVERITIES},
            fit_param=spec.fit_param, fitted=fit, within_tolerance=within,
            messages=tuple(messages), target_source=target_source(name, table))
        log.info("%s: %s %s (targets %s)%s", name, spec.statistic,
                 " ".join(f"{m:.4g}" for m in means), " ".join(f"{t:.4g}" for t in targets),
                 f" after {ladder.evaluations} evaluations" if fit else "")
        if not lad.monotone:
            log.warning("%s: ladder is not strictly monotone", name)
        ladders[name] = lad
    return CalibrationReport(benchmark_version=version, sample_ids=tuple(sample), ladders=ladders,
                             table=SeverityTable(table.overrides, version, table.targets), fit=fit, rtol=rtol,
                             geometry=geometry, extra={"measured_on": dict(measured_on or {})})


def save_table(path: str | Path, table: SeverityTable | CalibrationReport,
               benchmark_version: str | None = None) -> Path:
    """Write a severity table (or a report's table plus its measurements) as YAML, atomically."""
    report = table if isinstance(table, CalibrationReport) else None
    tbl = report.table if report else table
    version = benchmark_version or tbl.benchmark_version or aegisbench.__version__
    chosen = list(report.ladders) if report else names()
    body = tbl.to_dict(chosen)
    doc: dict = {"format": TABLE_FORMAT, "benchmark_version": str(version)}
    if report:
        doc["calibration"] = {"fit": report.fit, "rtol": report.rtol, "geometry": report.geometry,
                              "sample_size": len(report.sample_ids),
                              "sample_ids": list(report.sample_ids)}
        for name, lad in report.ladders.items():
            body[name]["measured"] = {severity_key(s): round(lad.means[s - 1], 6) for s in SEVERITIES}
    doc["corruptions"] = body
    path = Path(path)
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    return path


def load_table(path: str | Path, expected_version: str | None = None) -> SeverityTable:
    """Read a table written by :func:`save_table`; corruptions it omits keep their defaults."""
    path = Path(path)
    doc = read_yaml(path, "severity table")
    if not isinstance(doc, Mapping) or doc.get("format") != TABLE_FORMAT:
        raise BadInput(f"not a severity table (format must be {TABLE_FORMAT})", where=str(path))
    version = doc.get("benchmark_version")
    if not isinstance(version, str) or not version:
        raise BadInput("missing benchmark_version", where=str(path))
    if expected_version is not None and version != expected_version:
        raise BadInput(f"table is for benchmark version {version}, expected {expected_version}",
                       where=str(path))
    body = doc.get("corruptions")
    try:
        return SeverityTable.from_dict(body or {}, version, where=str(path))
    except BadInput as exc:
        raise BadInput(exc.message, where=exc.where or str(path)) from None
