"""The corruption registry and the severity table.

One corruption = one pure function ``fn(image, rng, *, px_per_kpx=None, **params)``
plus a frozen parameter dataclass, a declared statistic with three target values,
the ONE physical parameter that calibration may retune, and the default table of
parameters for severities 1..3. The :func:`corruption` decorator registers it in the one
:class:`~aegisbench.registry.Registry` (plug-ins: the family modules), which refuses a taken name.

Pixel-unit parameters are given per 1000 px ("kpx") and multiplied at run time by
``px_per_kpx`` (by default the longer image side / 1000; see
:func:`aegisbench.corruptions.conditions.px_per_kpx` for target-relative geometry).

Default table: fitted with ``calibrate(..., fit=True)`` on the embedded default
source's calibration sample (the DVC ``calibrate`` stage: 20 test images of
``synthetic_sar``) so that the sample means land on the reference means (DESIGN.md),
then rounded to three significant figures. Two ladders keep the reference's
physical values instead: ``low_light`` (the reference's exposure gains 0.330 / 0.130 /
0.045 = 1.60 / 2.94 / 4.47 stops, with its noise magnitude) and ``motion_blur`` (the
reference's kernels, 9 / 17 / 25 px per 1000 px: s3 is 2.5 % of the frame); their statistics
depend on the imagery, so refit them on a real sample. Every parameter has a declared
physical range (``BOUNDS`` of its dataclass); a fit stays inside it and reports the
bound that stops it. ``rain_streaks`` targets (streak coverage 0.04 / 0.09 / 0.17) are
ours: the reference ladder was not monotone.

Every entry has a ``kind`` (:data:`aegisbench.vocab.PERTURBATION_KINDS`): the
disaster corruptions are ``"corruption"``; the WARP perturbations (global noise, cloud
patch; :mod:`aegisbench.corruptions.warp`) are ``"warp"`` entries registered with
:func:`perturbation`: the same ``fn(image, rng, **params)`` contract and a validated
parameter dataclass, but no family ladder. :func:`names` and :func:`get_spec` see the
corruptions unless asked for another kind, so nothing that iterates over the corruptions meets
a WARP entry.

Every entry declares ``modalities`` (:data:`aegisbench.vocab.MODALITIES`), the sensors its
physics holds for, and a ``modality_note`` saying why (the card prints it); a build gives a
source no split of a config whose corruption (any part of a compound) does not hold for it.

>>> spec = get_spec("motion_blur")  # the first read imports the plug-in modules
>>> (spec.kind, spec.family, spec.fit_param, len(spec.severities), spec.modalities)
('corruption', 'storm', 'length', 3, ('rgb', 'thermal'))
>>> names()[0], names(kind="warp"), get_spec("warp_noise", kind="warp").family
('water_glare', ['warp_noise', 'cloud_patch'], 'warp')
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
from aegisbench.registry import Registry
from aegisbench.fields import FieldError, is_finite_number, is_int
from aegisbench.vocab import (CORRUPTION, FAMILIES, MODALITIES, PERTURBATION_KINDS, SEVERITIES, family_rank,
                              parse_severity_key, severity_key)

__all__ = ["FAMILIES", "SEVERITIES", "CorruptionSpec", "PerturbationSpec", "SeverityTable", "check_severity",
           "corruption", "corruption_families", "default_table", "get_spec", "names", "perturbation",
           "unregister"]


@dataclass(frozen=True)
class PerturbationSpec:
    """What the engine knows about one registered image perturbation of any kind."""

    name: str
    kind: str  # aegisbench.vocab.PERTURBATION_KINDS
    family: str
    fn: Callable[..., np.ndarray]
    params_type: type
    summary: str = ""
    spatial: tuple[str, ...] = field(default=())
    modalities: tuple[str, ...] = ()  # sensors the physics holds for (vocab.MODALITIES); required
    modality_note: str = ""  # why (printed on the dataset card)

    def __post_init__(self) -> None:
        m = self.modalities
        if not isinstance(m, tuple) or not m or len(set(m)) != len(m) or not set(m) <= set(MODALITIES):
            raise ValueError(f"{self.name}: modalities must be distinct values of {MODALITIES}, got {m!r}")
        if not isinstance(self.modality_note, str) or not self.modality_note.strip():
            raise ValueError(f"{self.name}: modality_note must say why the physics holds for {m}")


@dataclass(frozen=True, kw_only=True)
class CorruptionSpec(PerturbationSpec):
    """A disaster corruption: a perturbation with a family, a declared statistic and a
    calibrated three-step severity ladder."""

    statistic: str
    targets: tuple[float, float, float]
    direction: int  # +1: statistic grows with severity, -1: it falls
    fit_param: str
    fit_bounds: tuple[float, float]
    severities: Mapping[int, Any]

    def params_for(self, severity: int) -> Any:
        return self.severities[severity]


#: Every perturbation, registered by its module (declared here by name, imported on first read).
_REGISTRY: Registry[PerturbationSpec] = Registry("corruption", plugins=(
    "aegisbench.corruptions.flood", "aegisbench.corruptions.wildfire", "aegisbench.corruptions.storm",
    "aegisbench.corruptions.earthquake", "aegisbench.corruptions.warp"))


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


def _require_modalities(name: str, modalities) -> None:
    if not isinstance(modalities, tuple):
        raise TypeError(f"{name}: declare modalities=(...) from {MODALITIES}, the sensors its physics "
                        f"holds for (got {modalities!r})")


def _wrap(name: str, impl: Callable, params: type) -> Callable:
    """The public ``fn(image, rng, *, px_per_kpx=None, **params)`` around
    ``impl(image, rng, params, px_per_kpx) -> uint8 image``."""
    if impl.__name__ != name:
        raise ValueError(f"function name {impl.__name__!r} must equal registry key {name!r}")

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

    return fn


def _summary(impl: Callable) -> str:
    return ((impl.__doc__ or "").strip().splitlines() or [""])[0]


def corruption(name: str, *, family: str, params: type, severities: Mapping[int, Any],
               statistic: str, targets: tuple[float, float, float], direction: int,
               fit_param: str, fit_bounds: tuple[float, float], spatial: tuple[str, ...] = (),
               modalities: tuple[str, ...] | None = None, modality_note: str = "") -> Callable:
    """Register ``impl(image, rng, params, px_per_kpx) -> uint8 image`` under ``name``.

    The registered (and returned) function has the public signature
    ``fn(image, rng, *, px_per_kpx=None, **params)``: it validates the image, builds
    the parameter dataclass (whose ``__post_init__`` validates the values), runs the
    model and returns a new uint8 image of the same shape. ``modalities`` (with the
    ``modality_note`` saying why) is required. Raises ValueError on a duplicate name or
    an inconsistent declaration, TypeError when ``modalities`` is missing.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"{name}: unknown statistic {statistic!r}")
    _validate_spec(name, family, params, severities, targets, direction, fit_param, fit_bounds)
    _require_modalities(name, modalities)

    def decorate(impl: Callable) -> Callable:
        fn = _wrap(name, impl, params)
        _REGISTRY.add(name, CorruptionSpec(
            name=name, kind=CORRUPTION, family=family, fn=fn, params_type=params, statistic=statistic,
            targets=tuple(float(x) for x in targets), direction=int(direction),
            fit_param=fit_param, fit_bounds=(float(fit_bounds[0]), float(fit_bounds[1])),
            severities=MappingProxyType(dict(severities)), summary=_summary(impl),
            spatial=tuple(spatial), modalities=modalities, modality_note=modality_note))
        return fn

    return decorate


def perturbation(name: str, *, kind: str, family: str, params: type,
                 modalities: tuple[str, ...] | None = None, modality_note: str = "") -> Callable:
    """Register a perturbation that is not a disaster corruption (``kind="warp"``): the
    same public ``fn(image, rng, *, px_per_kpx=None, **params)`` around
    ``impl(image, rng, params, px_per_kpx)``, a validated parameter dataclass, no ladder;
    ``modalities`` and ``modality_note`` as for :func:`corruption` (required)."""
    if kind not in PERTURBATION_KINDS or kind == CORRUPTION:
        raise ValueError(f"{name}: kind must be one of {[k for k in PERTURBATION_KINDS if k != CORRUPTION]} "
                         f"(corruptions register with @corruption), got {kind!r}")
    if family in FAMILIES:
        raise ValueError(f"{name}: a {kind} perturbation is not in the disaster family {family!r}")
    if not dataclasses.is_dataclass(params):
        raise TypeError(f"{name}: params must be a dataclass type")
    _require_modalities(name, modalities)

    def decorate(impl: Callable) -> Callable:
        fn = _wrap(name, impl, params)
        _REGISTRY.add(name, PerturbationSpec(name=name, kind=kind, family=family, fn=fn, params_type=params,
                                             summary=_summary(impl), modalities=modalities,
                                             modality_note=modality_note))
        return fn

    return decorate


def unregister(name: str) -> None:
    """Remove a corruption (for tests that register throw-away entries)."""
    _REGISTRY.remove(name)


def names(kind: str | None = CORRUPTION) -> list[str]:
    """Registered names of one kind (default: the corruptions; None: every entry), grouped
    by family in declaration order."""
    units = _REGISTRY.items()
    order = {n: (family_rank(spec.family), i) for i, (n, spec) in enumerate(units)}
    return sorted((n for n, spec in units if kind is None or spec.kind == kind), key=order.__getitem__)


def get_spec(name: str, kind: str | None = CORRUPTION) -> PerturbationSpec:
    """The entry ``name`` of ``kind`` (default: a corruption, with its ladder; None: any)."""
    spec = _REGISTRY.get(name) if name in _REGISTRY else None
    if spec is None or (kind is not None and spec.kind != kind):
        what = "corruption" if kind == CORRUPTION else f"{kind or 'registered'} perturbation"
        raise BadInput(f"unknown {what} {name!r} (known: {', '.join(names(kind))})",
                       where="corruption" if kind == CORRUPTION else (kind or "perturbation"))
    return spec


def corruption_families() -> dict[str, str]:
    """``{corruption: disaster family}`` of the registered corruptions, in table order (the
    one source of which corruption belongs to which family).

    >>> corruption_families()["low_light"], list(corruption_families()) == names()
    ('storm', True)
    """
    return {n: _REGISTRY.get(n).family for n in names()}


def check_severity(severity: object) -> int:
    if not is_int(severity) or int(severity) not in SEVERITIES:
        raise BadInput(f"unknown severity {severity!r} (expected one of {SEVERITIES})",
                       where="severity")
    return int(severity)


# ------------------------------------------------------------------ the table

@dataclass(frozen=True)
class SeverityTable:
    """Parameters of every (corruption, severity); defaults come from the registry.

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
                "targets": {severity_key(s): self.targets_for(n)[s - 1] for s in SEVERITIES},
                "severities": {severity_key(s): dataclasses.asdict(self.params(n, s)) for s in SEVERITIES},
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
            if n not in names():
                raise BadInput(f"unknown corruption {n!r}", where=where)
            spec = _REGISTRY.get(n)
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
        num = parse_severity_key(key)
        if num not in SEVERITIES:
            raise BadInput(f"unknown severity {key!r} (expected s1, s2, s3)", where=where)
        out[num] = value
    missing = [severity_key(s) for s in SEVERITIES if s not in out]
    if missing:
        raise BadInput(f"missing severity {', '.join(missing)} (a ladder needs s1, s2 and s3)",
                       where=where)
    return dict(sorted(out.items()))


def _build_params(spec: CorruptionSpec, values: Mapping, where: str) -> Any:
    """The parameter dataclass from a mapping (its ``__post_init__`` checks the declared
    ranges); one line naming the field on bad input."""
    known = {f.name for f in dataclasses.fields(spec.params_type)}
    for field_name in values:
        if field_name not in known:
            raise BadInput(f"unknown parameter (known: {', '.join(sorted(known))})",
                           where=f"{where}.{field_name}")
    try:
        return spec.params_type(**values)
    except FieldError as exc:
        raise BadInput(exc.detail, where=f"{where}.{exc.field}") from None
    except (TypeError, ValueError) as exc:
        raise BadInput(f"invalid parameters: {exc}", where=where) from None


def _check_targets(spec: CorruptionSpec, targets: object, where: str) -> tuple[float, float, float]:
    if not isinstance(targets, Mapping):
        raise BadInput("targets must be a mapping s1/s2/s3 -> value", where=where)
    values = _by_severity(targets, where)
    for s, v in values.items():
        if not is_finite_number(v):
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
