"""The corruption registry and the severity table.

One corruption = one pure function ``fn(image, rng, *, px_per_kpx=None, **params)``
plus a frozen parameter dataclass, a declared statistic with three target values,
the ONE physical parameter that calibration may retune, and the default table of
parameters for severities 1..3. The :func:`corruption` decorator registers it and
rejects duplicate names.

Pixel-unit parameters are given per 1000 px ("kpx") and multiplied at run time by
``px_per_kpx`` (by default the longer image side / 1000; see
:func:`aegisbench.corruptions.conditions.px_per_kpx` for target-relative geometry).

Default table: fitted with ``calibrate(..., fit=True)`` on procedural aerial-like
scenes (:func:`aegisbench.corruptions.samples.synthetic_scene`, 640 px to 2000 px)
so that the sample means land on the reference means (DESIGN.md), then rounded.
Two ladders keep the reference's physical values instead: ``low_light`` (2.26 /
3.62 / 4.47 stops: s3 is the reference's 4.47-stop loss, s1 and s2 reproduce the
reference luminance ratios s1/s3 and s2/s3 under gamma 2.2) and ``motion_blur``
(10 / 17 / 25 px per 1000 px: s3 is the reference's 2.5 % of the frame, s1 and s2
reproduce the reference Sobel ratios); their absolute statistics depend on the
imagery, so refit them on a real sample. ``rain_streaks`` targets (streak coverage
0.04 / 0.09 / 0.17) are ours: the reference ladder was not monotone.

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
    lo, hi = fit_bounds
    if not lo < hi:
        raise ValueError(f"{name}: fit bounds must satisfy lo < hi")


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
            check_image(image)
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
        return SeverityTable(new, self.benchmark_version)

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
                "targets": {f"s{s}": spec.targets[s - 1] for s in SEVERITIES},
                "severities": {f"s{s}": dataclasses.asdict(self.params(n, s)) for s in SEVERITIES},
            }
        return out

    @classmethod
    def from_dict(cls, data: Mapping, benchmark_version: str | None = None,
                  where: str = "severity table") -> "SeverityTable":
        overrides: dict[str, dict[int, Any]] = {}
        if not isinstance(data, Mapping):
            raise BadInput("expected a mapping of corruption names", where=where)
        for n, entry in data.items():
            if n not in _REGISTRY:
                raise BadInput(f"unknown corruption {n!r}", where=where)
            spec = _REGISTRY[n]
            sev = entry.get("severities") if isinstance(entry, Mapping) else None
            if not isinstance(sev, Mapping):
                raise BadInput("missing 'severities' mapping", where=f"{where}: {n}")
            for key, values in sev.items():
                num = str(key)[1:] if str(key).startswith("s") else str(key)
                if not num.isdigit() or int(num) not in SEVERITIES:
                    raise BadInput(f"unknown severity {key!r}", where=f"{where}: {n}")
                s = int(num)
                if not isinstance(values, Mapping):
                    raise BadInput("parameters must be a mapping", where=f"{where}: {n}.{key}")
                try:
                    overrides.setdefault(n, {})[s] = spec.params_type(**values)
                except (TypeError, ValueError) as exc:
                    raise BadInput(f"invalid parameters: {exc}", where=f"{where}: {n}.{key}") from None
        return cls(overrides, benchmark_version)


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
