"""The corruption registry and the severity table.

One corruption = one pure function ``fn(image, rng, *, px_per_kpx=None, **params)``
plus a frozen parameter dataclass, a declared statistic with three target values,
the ONE physical parameter that calibration may retune, and the default table of
parameters for severities 1..3. The :func:`corruption` decorator registers it and
rejects duplicate names.

Pixel-unit parameters are given per 1000 px ("kpx") and multiplied at run time by
``px_per_kpx`` (by default the longer image side / 1000; see
:func:`aegisbench.corruptions.conditions.px_per_kpx` for target-relative geometry).

Default table: fitted with ``calibrate(..., fit=True)`` on the embedded default
source's calibration sample (the DVC ``calibrate`` stage: 20 test images of
``synthetic_sar``) so that the sample means land on the reference means (DESIGN.md),
then rounded to three significant figures. Two ladders keep the reference's
physical values instead: ``low_light`` (the reference's exposure gains 0.330 / 0.130 /
0.045 = 1.60 / 2.94 / 4.47 stops, with its noise magnitude) and ``motion_blur`` (10 /
17 / 25 px per 1000 px: s3 is the reference's 2.5 % of the frame); their statistics
depend on the imagery, so refit them on a real sample. Every parameter has a declared
physical range (``BOUNDS`` of its dataclass); a fit stays inside it and reports the
bound that stops it. ``rain_streaks`` targets (streak coverage 0.04 / 0.09 / 0.17) are
ours: the reference ladder was not monotone.

>>> import numpy as np
>>> import aegisbench.corruptions  # registers the nine corruptions
>>> spec = get_spec("motion_blur")
>>> (spec.family, spec.fit_param, len(spec.severities))
('storm', 'length', 3)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from aegisbench.corruptions.optics import check_image
from aegisbench.corruptions.statistics import STATISTICS
from aegisbench.errors import BadInput

SEVERITIES = (1, 2, 3)
FAMILIES = ("flood", "wildfire", "storm", "earthquake")


@dataclass(frozen=True)
class CorruptionSpec:
    """Everything the engine knows about one registered corruption."""

    name: str
    family: str
    fn: Callable[..., np.ndarray]
    params_type: type
    statistic: str
    targets: tuple[float, float, float]
    direction: int  # +1: statistic grows with severity, -1: it falls
    fit_param: str
    fit_bounds: tuple[float, float]
    severities: Mapping[int, Any]
    summary: str = ""
    spatial: tuple[str, ...] = field(default=())

    def params_for(self, severity: int) -> Any:
        return self.severities[severity]


_REGISTRY: dict[str, CorruptionSpec] = {}


def _validate_spec(name: str, family: str, params_type: type, severities: Mapping[int, Any],
                   targets, direction: int, fit_param: str, fit_bounds) -> None:
    if family not in FAMILIES:
        raise ValueError(f"{name}: family must be one of {FAMILIES}, got {family!r}")
    if not dataclasses.is_dataclass(params_type):
        raise TypeError(f"{name}: params must be a dataclass type")
    if tuple(sorted(severities)) != SEVERITIES:
        raise ValueError(f"{name}: severities must be exactly {SEVERITIES}")
    for s, p in severities.items():
        if not isinstance(p, params_type):
            raise TypeError(f"{name}: severity {s} params are not {params_type.__name__}")
    if len(targets) != 3 or direction not in (1, -1):
        raise ValueError(f"{name}: need three targets and direction +1 or -1")
    t = np.asarray(targets, float)
    if not np.all(np.diff(t) * direction > 0):
        raise ValueError(f"{name}: targets {tuple(targets)} are not strictly monotone")
    names = {f.name for f in dataclasses.fields(params_type)}
    if fit_param not in names:
        raise ValueError(f"{name}: fit parameter {fit_param!r} is not a field of {params_type.__name__}")
    declared = getattr(params_type, "BOUNDS", None)
    if not isinstance(declared, Mapping) or set(declared) != names:
        raise ValueError(f"{name}: {params_type.__name__}.BOUNDS must declare the physical range "
                         f"of every field ({', '.join(sorted(names))})")
    lo, hi = fit_bounds
    if not lo < hi:
        raise ValueError(f"{name}: fit bounds must satisfy lo < hi")
    plo, phi = declared[fit_param]
    if lo < plo or hi > phi:
        raise ValueError(f"{name}: fit bounds [{lo}, {hi}] leave the declared range "
                         f"[{plo}, {phi}] of {fit_param}")


def corruption(name: str, *, family: str, params: type, severities: Mapping[int, Any],
               statistic: str, targets: tuple[float, float, float], direction: int,
               fit_param: str, fit_bounds: tuple[float, float],
               spatial: tuple[str, ...] = ()) -> Callable:
    """Register ``impl(image, rng, params, px_per_kpx) -> uint8 image`` under ``name``.

    The registered (and returned) function has the public signature
    ``fn(image, rng, *, px_per_kpx=None, **params)``: it validates the image, builds
    the parameter dataclass (whose ``__post_init__`` validates the values), runs the
    model and returns a new uint8 image of the same shape. Raises ValueError on a
    duplicate name or an inconsistent declaration.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"{name}: unknown statistic {statistic!r}")
    _validate_spec(name, family, params, severities, targets, direction, fit_param, fit_bounds)

    def decorate(impl: Callable) -> Callable:
        if impl.__name__ != name:
            raise ValueError(f"function name {impl.__name__!r} must equal registry key {name!r}")
        if name in _REGISTRY:
            raise ValueError(f"corruption {name!r} is already registered")

        @functools.wraps(impl)
        def fn(image: np.ndarray, rng: np.random.Generator, *, px_per_kpx: float | None = None,
               **kw: Any) -> np.ndarray:
            check_image(image, where=f"{name}: image")
            if not isinstance(rng, np.random.Generator):
                raise TypeError("rng must be a numpy.random.Generator")
            p = params(**kw)
            scale = max(image.shape[:2]) / 1000.0 if px_per_kpx is None else float(px_per_kpx)
            if not np.isfinite(scale) or scale <= 0:
                raise ValueError(f"px_per_kpx must be positive, got {px_per_kpx!r}")
            out = impl(image, rng, p, scale)
            if out.shape != image.shape or out.dtype != np.uint8:  # pragma: no cover - guard
                raise RuntimeError(f"{name} returned {out.dtype} {out.shape}")
            return out

        doc = (impl.__doc__ or "").strip()
        _REGISTRY[name] = CorruptionSpec(
            name=name, family=family, fn=fn, params_type=params, statistic=statistic,
            targets=tuple(float(x) for x in targets), direction=int(direction),
            fit_param=fit_param, fit_bounds=(float(fit_bounds[0]), float(fit_bounds[1])),
            severities=MappingProxyType(dict(severities)), summary=doc.splitlines()[0] if doc else "",
            spatial=tuple(spatial))
        return fn

    return decorate


def unregister(name: str) -> None:
    """Remove a corruption (for tests that register throw-away entries)."""
    _REGISTRY.pop(name, None)


def names() -> list[str]:
    """Registered corruption names, grouped by family in declaration order."""
    return sorted(_REGISTRY, key=lambda n: (FAMILIES.index(_REGISTRY[n].family), _order(n)))


def _order(name: str) -> int:
    return list(_REGISTRY).index(name)


def get_spec(name: str) -> CorruptionSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise BadInput(f"unknown corruption {name!r} (known: {', '.join(names())})",
                       where="corruption") from None


def check_severity(severity: object) -> int:
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) \
            or int(severity) not in SEVERITIES:
        raise BadInput(f"unknown severity {severity!r} (expected one of {SEVERITIES})",
                       where="severity")
    return int(severity)


# ------------------------------------------------------------------ the table

@dataclass(frozen=True)
class SeverityTable:
    """Parameters of every (corruption, severity); defaults come from the registry.

    >>> import aegisbench.corruptions
    >>> t = SeverityTable()
    >>> t.params("low_light", 3).stops
    4.47
    >>> t.with_param("low_light", 3, "stops", 4.0).params("low_light", 3).stops
    4.0
    """

    overrides: Mapping[str, Mapping[int, Any]] = field(default_factory=dict)
    benchmark_version: str | None = None
    #: per-corruption target overrides (s1, s2, s3) of the declared statistic
    targets: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)

    def targets_for(self, name: str) -> tuple[float, float, float]:
        """The ladder's targets: the table's own, else the registry's."""
        return tuple(self.targets.get(name, get_spec(name).targets))

    def params(self, name: str, severity: int) -> Any:
        spec = get_spec(name)
        severity = check_severity(severity)
        return self.overrides.get(name, {}).get(severity, spec.severities[severity])

    def with_params(self, name: str, severity: int, params: Any) -> "SeverityTable":
        spec = get_spec(name)
        if not isinstance(params, spec.params_type):
            raise TypeError(f"{name}: expected {spec.params_type.__name__}")
        new = {k: dict(v) for k, v in self.overrides.items()}
        new.setdefault(name, {})[check_severity(severity)] = params
        return SeverityTable(new, self.benchmark_version, dict(self.targets))

    def with_param(self, name: str, severity: int, param: str, value: float) -> "SeverityTable":
        p = dataclasses.replace(self.params(name, severity), **{param: value})
        return self.with_params(name, severity, p)

    def to_dict(self, corruptions: list[str] | None = None) -> dict:
        out = {}
        for n in corruptions or names():
            spec = get_spec(n)
            out[n] = {
                "family": spec.family, "statistic": spec.statistic,
                "fit_param": spec.fit_param, "direction": spec.direction,
                "targets": {f"s{s}": self.targets_for(n)[s - 1] for s in SEVERITIES},
                "severities": {f"s{s}": dataclasses.asdict(self.params(n, s)) for s in SEVERITIES},
            }
        return out

    @classmethod
    def from_dict(cls, data: Mapping, benchmark_version: str | None = None,
                  where: str = "severity table") -> "SeverityTable":
        overrides: dict[str, dict[int, Any]] = {}
        targets: dict[str, tuple[float, float, float]] = {}
        if not isinstance(data, Mapping):
            raise BadInput("expected a mapping of corruption names", where=where)
        for n, entry in data.items():
            if n not in _REGISTRY:
                raise BadInput(f"unknown corruption {n!r}", where=where)
            spec = _REGISTRY[n]
            sev = entry.get("severities") if isinstance(entry, Mapping) else None
            if not isinstance(sev, Mapping):
                raise BadInput("missing 'severities' mapping", where=f"{where}: {n}")
            by_level = _by_severity(sev, f"{where}: {n}.severities")
            for s, values in by_level.items():
                at = f"{where}: {n}.s{s}"
                if not isinstance(values, Mapping):
                    raise BadInput("parameters must be a mapping", where=at)
                overrides.setdefault(n, {})[s] = _build_params(spec, values, at)
            if "targets" in entry:
                targets[n] = _check_targets(spec, entry["targets"], f"{where}: {n}.targets")
        return cls(overrides, benchmark_version, targets)


def _by_severity(mapping: Mapping, where: str) -> dict[int, Any]:
    """``{"s1": x, 2: y, ...}`` -> ``{1: x, 2: y, 3: z}``; all three severities required."""
    out: dict[int, Any] = {}
    for key, value in mapping.items():
        num = str(key)[1:] if str(key).startswith("s") else str(key)
        if not num.isdigit() or int(num) not in SEVERITIES:
            raise BadInput(f"unknown severity {key!r} (expected s1, s2, s3)", where=where)
        out[int(num)] = value
    missing = [f"s{s}" for s in SEVERITIES if s not in out]
    if missing:
        raise BadInput(f"missing severity {', '.join(missing)} (a ladder needs s1, s2 and s3)",
                       where=where)
    return dict(sorted(out.items()))


def _build_params(spec: CorruptionSpec, values: Mapping, where: str) -> Any:
    """The parameter dataclass from a mapping; one line naming the field on bad input."""
    known = {f.name for f in dataclasses.fields(spec.params_type)}
    for field_name, value in values.items():
        if field_name not in known:
            raise BadInput(f"unknown parameter (known: {', '.join(sorted(known))})",
                           where=f"{where}.{field_name}")
        lo, hi = spec.params_type.BOUNDS[field_name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadInput(f"must be a number, got {value!r}", where=f"{where}.{field_name}")
        if not (np.isfinite(value) and lo <= value <= hi):
            raise BadInput(f"{value!r} is outside the declared range [{lo}, {hi}]",
                           where=f"{where}.{field_name}")
    try:
        return spec.params_type(**values)
    except (TypeError, ValueError) as exc:
        raise BadInput(f"invalid parameters: {exc}", where=where) from None


def _check_targets(spec: CorruptionSpec, targets: object, where: str) -> tuple[float, float, float]:
    if not isinstance(targets, Mapping):
        raise BadInput("targets must be a mapping s1/s2/s3 -> value", where=where)
    values = _by_severity(targets, where)
    for s, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            raise BadInput(f"must be a finite number, got {v!r}", where=f"{where}.s{s}")
    for s in SEVERITIES[1:]:
        if (values[s] - values[s - 1]) * spec.direction <= 0:
            trend = "rise" if spec.direction > 0 else "fall"
            raise BadInput(f"{spec.statistic} target {values[s]!r} does not {trend} from "
                           f"s{s - 1} ({values[s - 1]!r}): targets must be strictly monotone",
                           where=f"{where}.s{s}")
    return tuple(float(values[s]) for s in SEVERITIES)


def default_table() -> SeverityTable:
    return SeverityTable()


def check_fields(obj: Any, **ranges: tuple[float, float]) -> None:
    """Validate numeric dataclass fields against closed ranges (for ``__post_init__``).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class P:
    ...     x: float = 1.0
    ...     def __post_init__(self):
    ...         check_fields(self, x=(0.0, 2.0))
    >>> P(3.0)
    Traceback (most recent call last):
    ...
    ValueError: P.x must lie in [0.0, 2.0], got 3.0
    """
    cls = type(obj).__name__
    for name, (lo, hi) in ranges.items():
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{cls}.{name} must be a number, got {type(v).__name__}")
        if not np.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"{cls}.{name} must lie in [{lo}, {hi}], got {v}")
        object.__setattr__(obj, name, float(v))
