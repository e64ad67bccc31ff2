"""The metric registry: one :class:`MetricSpec` per name the evaluator writes.

A metric's snake_case name is its registry key, the ``metric`` value of its rows in
``results/<id>/metrics.parquet`` and, for a per-condition detection metric, the name of
the function that computes it. The spec says which tracks it applies to, its direction
(``higher`` / ``lower`` is better, or ``none``), its bounds and unit, a short label, a
one-line description and whether its rows carry an interval. Every output (leaderboard
colours, ranks and floors, Markdown, site, ``dvc metrics`` summary, fire-spread report)
reads them from here; the registry refuses a name twice.

Three ways in, all ending in :meth:`MetricRegistry.register`:

* :func:`metric` decorates ``fn(ctx) -> value | Cell | None``, a per-condition detection
  metric: the evaluator calls it on every condition of the detection tracks it names
  (see :mod:`aegisbench.metrics.condition`);
* :func:`metric_group` decorates ``fn(ctx) -> {name: value | Cell}`` that computes several
  registered names at once (an enumerable :func:`family` such as ``recall_<band>``);
* :func:`declare` registers names a track's scorer computes in bulk (fire-spread cells,
  the WARP patch test, the clean validation rows).

>>> spec = MetricSpec("toy_rate", tracks=("sar",), direction=HIGHER, label="Toy", description="A toy.",
...                   bounds=(0, 1))
>>> spec.sign, spec.within(0.5), spec.within(2.0)
(1, True, False)
>>> reg = MetricRegistry()
>>> _ = reg.register(spec)
>>> reg.register(spec)
Traceback (most recent call last):
...
ValueError: metric 'toy_rate' is already registered
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from aegisbench.registry import Registry
from aegisbench.vocab import DETECTION_TRACKS, TRACKS

HIGHER, LOWER, UNORDERED = "higher", "lower", "none"
DIRECTIONS = (HIGHER, LOWER, UNORDERED)
UNBOUNDED = (-math.inf, math.inf)
_NAME = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
_SIGN = {HIGHER: 1, LOWER: -1, UNORDERED: None}


def _check_text(name: str, what: str, value) -> None:
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ValueError(f"metric {name!r}: {what} must be a non-empty single line, got {value!r}")


@dataclass(frozen=True)
class MetricSpec:
    """What every output needs to know about one metric (see the module docstring).

    ``bounds``: the closed range a value can take (``-inf`` / ``inf`` for open ends);
    ``integer``: a count, shown without decimals; ``full_scale``: colour scales and plot
    axes span ``bounds`` instead of the data; ``track_labels``: the label on a track where
    the plain one would be ambiguous (``recall`` reads "F2R recall" on fire spread);
    ``family``: the family or group it belongs to (the per-condition function that computes
    it, if any: :meth:`MetricRegistry.producer_of`).
    """

    name: str
    tracks: tuple[str, ...]
    direction: str
    label: str
    description: str
    bounds: tuple[float, float] = UNBOUNDED
    unit: str = ""
    interval: bool = False
    integer: bool = False
    full_scale: bool = False
    track_labels: tuple[tuple[str, str], ...] = ()
    family: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"metric name must be snake_case, got {self.name!r}")
        tracks = (self.tracks,) if isinstance(self.tracks, str) else tuple(self.tracks)
        if not tracks or any(t not in TRACKS for t in tracks):
            raise ValueError(f"metric {self.name!r}: tracks must be a non-empty subset of {TRACKS}, got {tracks!r}")
        object.__setattr__(self, "tracks", tracks)
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name!r}: direction must be one of {DIRECTIONS}, got {self.direction!r}")
        _check_text(self.name, "label", self.label)
        _check_text(self.name, "description", self.description)
        lo, hi = (float(v) for v in self.bounds)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise ValueError(f"metric {self.name!r}: bounds must satisfy lo <= hi, got {self.bounds!r}")
        object.__setattr__(self, "bounds", (lo, hi))
        if self.full_scale and not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"metric {self.name!r}: full_scale needs finite bounds lo < hi")
        if not isinstance(self.unit, str):
            raise TypeError(f"metric {self.name!r}: unit must be a string")
        for flag in ("interval", "integer", "full_scale"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"metric {self.name!r}: {flag} must be a bool")
        labels = self.track_labels
        labels = tuple(labels.items()) if isinstance(labels, Mapping) else tuple(labels)
        for track, text in labels:
            if track not in tracks:
                raise ValueError(f"metric {self.name!r}: track label for {track!r}, a track it does not apply to")
            _check_text(self.name, f"label on {track}", text)
        object.__setattr__(self, "track_labels", labels)

    @property
    def sign(self) -> int | None:
        """+1 if higher is better, -1 if lower is better, None if unordered."""
        return _SIGN[self.direction]

    def label_for(self, track: str | None = None) -> str:
        """The label on ``track`` (the plain label when the track has no label of its own)."""
        return dict(self.track_labels).get(track, self.label)

    def within(self, value: float) -> bool:
        """True when ``value`` lies in the closed ``bounds``."""
        return self.bounds[0] <= value <= self.bounds[1]


@dataclass(frozen=True)
class Producer:
    """A per-condition function and the registered names it may return."""

    name: str
    fn: Callable
    names: tuple[str, ...]
    tracks: tuple[str, ...]
    group: bool  # True: fn returns {name: value}; False: fn returns the value of ``name``


@dataclass(frozen=True)
class Family:
    """An enumerable family of metrics (``recall_tiny`` ... ``recall_large``): ``member``
    -> spec, in declaration order."""

    name: str
    members: Mapping[str, MetricSpec] = field(repr=False)

    def __iter__(self) -> Iterator[MetricSpec]:
        return iter(self.members.values())

    def name_of(self, member: str) -> str:
        """The registered metric name of one member (``KeyError`` for an unknown member)."""
        return self.members[member].name

    @property
    def names(self) -> dict[str, str]:
        return {m: s.name for m, s in self.members.items()}


def family(name: str, template: str, members: Mapping[str, str], *, label: str, description: str,
           **common) -> Family:
    """Specs ``template.format(member)`` for every member; ``label`` and ``description``
    are formatted with ``{member}`` and ``{text}`` (the member's text in ``members``).

    >>> f = family("demo_by_size", "demo_{}", {"tiny": "under 16 px"}, label="Demo ({member})",
    ...            description="Demo of boxes {text}.", direction=HIGHER)
    >>> f.name_of("tiny"), f.members["tiny"].label, f.members["tiny"].description
    ('demo_tiny', 'Demo (tiny)', 'Demo of boxes under 16 px.')
    """
    specs = {m: MetricSpec(template.format(m), label=label.format(member=m, text=t),
                           description=description.format(member=m, text=t), family=name,
                           **{"tracks": DETECTION_TRACKS, **common})
             for m, t in members.items()}
    return Family(name, specs)


class MetricRegistry:
    """Specs by name (registration order) and the per-condition producers: two
    :class:`~aegisbench.registry.Registry` instances (``specs``, ``producer_registry``);
    ``plugins`` are the modules that register the metrics, imported on first read."""

    def __init__(self, plugins: Sequence[str] = ()) -> None:
        self.specs: Registry[MetricSpec] = Registry("metric", plugins=plugins)
        self.producer_registry: Registry[Producer] = Registry("per-condition function")

    def register(self, *specs: MetricSpec, producer: Producer | None = None) -> tuple[MetricSpec, ...]:
        """Add ``specs`` (all or none): a name registered before, or twice here, is refused."""
        names = [s.name for s in specs]
        for s in specs:
            if not isinstance(s, MetricSpec):
                raise TypeError(f"expected MetricSpec, got {type(s).__name__}")
            if self.specs.registered(s.name) or names.count(s.name) > 1:
                raise ValueError(f"metric {s.name!r} is already registered")
        if producer is not None:
            if self.producer_registry.registered(producer.name):
                raise ValueError(f"per-condition function {producer.name!r} is already registered")
            if set(producer.names) != set(names):
                raise ValueError(f"producer {producer.name!r} must name exactly the specs it registers")
            self.producer_registry.add(producer.name, producer)
        for s in specs:
            self.specs.add(s.name, s)
        return tuple(specs)

    def freeze(self) -> None:
        """Load the plug-ins, then refuse every later registration."""
        self.specs.freeze()
        self.producer_registry.freeze()

    def __contains__(self, name: object) -> bool:
        return name in self.specs

    def __getitem__(self, name: str) -> MetricSpec:
        if name not in self.specs:
            raise KeyError(f"metric {name!r} is not registered")
        return self.specs.get(name)

    def __iter__(self) -> Iterator[MetricSpec]:
        return iter([s for _, s in self.specs.items()])

    def __len__(self) -> int:
        return len(self.specs)

    def get(self, name: str) -> MetricSpec | None:
        return self.specs.get(name) if name in self.specs else None

    def names(self, track: str | None = None) -> list[str]:
        """Registered names (of ``track``), in registration order."""
        return [s.name for s in self if track is None or track in s.tracks]

    def producer_of(self, name: str) -> Producer | None:
        """The per-condition function that computes ``name`` (None: its track's scorer does)."""
        self.specs.load()
        return next((p for _, p in self.producer_registry.items() if name in p.names), None)

    def producers(self, track: str) -> list[Producer]:
        """The per-condition functions of ``track``, in registration order."""
        self.specs.load()
        return [p for _, p in self.producer_registry.items() if track in p.tracks]

    def unregistered(self, names: Iterable[str]) -> list[str]:
        """The given names that are not registered (sorted, each once)."""
        return sorted({n for n in names if n not in self.specs})

    def require(self, names: Iterable[str], where: str = "") -> None:
        """``ValueError`` naming every unregistered name in ``names``."""
        bad = self.unregistered(names)
        if bad:
            raise ValueError(f"{where + ': ' if where else ''}metric(s) {bad} are not registered "
                             "(register them in aegisbench.metrics)")

    @contextmanager
    def scoped(self):
        """Everything registered inside the block is removed again at its end (for tests
        and experiments).

        >>> with REGISTRY.scoped():
        ...     _ = declare(MetricSpec("scratch_metric", tracks=("sar",), direction=UNORDERED, label="x",
        ...                            description="x"))
        ...     "scratch_metric" in REGISTRY
        True
        >>> "scratch_metric" in REGISTRY
        False
        """
        with self.specs.scoped(), self.producer_registry.scoped():
            yield self


#: Every metric: the per-condition functions and the names scorers compute in bulk, from
#: their plug-in modules (declared by name, imported on first read).
REGISTRY = MetricRegistry(plugins=("aegisbench.metrics.per_condition", "aegisbench.metrics.declared"))


def _check_fn(fn: Callable) -> None:
    if not callable(fn) or not getattr(fn, "__name__", "").isidentifier():
        raise TypeError("a metric must be a named function")


def _detection_tracks(name: str, specs: Sequence[MetricSpec]) -> tuple[str, ...]:
    """The detection tracks a per-condition function runs on (the union of its specs')."""
    tracks = tuple(t for t in DETECTION_TRACKS if any(t in s.tracks for s in specs))
    if not tracks:
        raise ValueError(f"per-condition function {name!r} serves no detection track")
    return tracks


def metric(*, registry: MetricRegistry | None = None, **kw) -> Callable:
    """Register the decorated ``fn(ctx) -> value | Cell | None`` as the per-condition
    metric named ``fn.__name__`` (``kw``: the :class:`MetricSpec` fields; ``tracks``
    defaults to the detection tracks). None means no row for that condition."""
    def deco(fn: Callable) -> Callable:
        _check_fn(fn)
        spec = MetricSpec(fn.__name__, **{"tracks": DETECTION_TRACKS, **kw})
        tracks = _detection_tracks(fn.__name__, [spec])
        target = REGISTRY if registry is None else registry
        target.register(spec, producer=Producer(fn.__name__, fn, (spec.name,), tracks, False))
        fn.metric = spec
        return fn
    return deco


def metric_group(specs: Sequence[MetricSpec] | Family, *, registry: MetricRegistry | None = None) -> Callable:
    """Register the decorated ``fn(ctx) -> {name: value | Cell} | None`` as the per-condition
    function of ``specs`` (e.g. a :func:`family`); it may return any subset of them."""
    def deco(fn: Callable) -> Callable:
        _check_fn(fn)
        specs_ = tuple(specs)
        tracks = _detection_tracks(fn.__name__, specs_)
        target = REGISTRY if registry is None else registry
        target.register(*specs_, producer=Producer(fn.__name__, fn, tuple(s.name for s in specs_), tracks, True))
        fn.metrics = specs_
        return fn
    return deco


def declare(*specs: MetricSpec | Family, registry: MetricRegistry | None = None) -> tuple[MetricSpec, ...]:
    """Register names that a track's scorer computes in bulk (no per-condition function)."""
    flat = [s for item in specs for s in (item if isinstance(item, Family) else (item,))]
    return (REGISTRY if registry is None else registry).register(*flat)


def selection(*names: str) -> tuple[str, ...]:
    """``names`` as a tuple, each checked to be registered (``ValueError`` otherwise): the
    lists of which metrics a view shows are lists of registered names.

    >>> selection("recall", "fp")
    ('recall', 'fp')
    """
    REGISTRY.require(names, where="metric selection")
    return tuple(names)


def spec(name: str) -> MetricSpec | None:
    """The spec of ``name`` in the global registry, or None."""
    return REGISTRY.get(name)


def sign(name: str) -> int | None:
    """+1 / -1 / None (unordered or unregistered) for ``name``."""
    s = REGISTRY.get(name)
    return None if s is None else s.sign


def label(name: str, track: str | None = None) -> str:
    """The display label of ``name`` on ``track``; an unregistered name is shown as itself."""
    s = REGISTRY.get(name)
    return name if s is None else s.label_for(track)


def higher_is_better(metric_or_fn) -> bool | None:
    """True / False / None from the registry, for a metric name or its function."""
    name = metric_or_fn if isinstance(metric_or_fn, str) else getattr(metric_or_fn, "__name__", None)
    return {1: True, -1: False, None: None}[REGISTRY[name].sign]
