"""What a per-condition detection metric sees, and how the evaluator runs them all.

The evaluator builds one :class:`ConditionContext` per (source, config) and calls
:func:`condition_cells`, which runs every per-condition function registered for the
track (:func:`aegisbench.metrics.metric` / :func:`~aegisbench.metrics.metric_group`, in
registration order) and returns ``(metric name, Cell)`` pairs, one row each.

A function returns a number, a :class:`Cell` or None (no row for this condition). An
undefined value (None or NaN: a 0/0 ratio, a mean over nothing) becomes a null value with
no interval and the note :data:`ZERO_DIVISION` unless the cell names its own reason. A
:class:`Cell` is taken as it is otherwise; a bare number gets ``n`` = the condition's images and,
when the spec declares ``interval=True``, a percentile bootstrap interval: the function
is re-run on the condition re-weighted by each resample of the split's one shared draw
(:meth:`ConditionContext.reweighted`; only ``counts`` and the clean condition's
``counts`` are resampled, so such a metric must be a function of those).

>>> import numpy as np
>>> ctx = ConditionContext(track="sar", source="demo", config="clean", kind="clean", threshold=0.5,
...                        counts=np.array([[2, 1, 0], [0, 0, 1]]))
>>> ctx.n_images, ctx.pooled.tolist(), ctx.reweighted(np.array([2, 0])).pooled.tolist()
(2, [2, 1, 1], [4.0, 2.0, 0.0])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from aegisbench.stats import percentile_interval
from aegisbench.metrics.detection import SilentFailureParams
from aegisbench.metrics.registry import REGISTRY, MetricRegistry, Producer

#: ``note`` of a row whose value is undefined because a denominator is zero (a 0/0 ratio:
#: precision without a kept detection, recall without a GT box, a mean over no boxes).
ZERO_DIVISION = "0/0"


@dataclass(frozen=True)
class Cell:
    """The numbers of one row: ``value``, ``interval`` ``(lo, hi)`` or None, ``n`` (None: the
    number of images of the condition) and ``note``: why the value is undefined (null)."""

    value: float | None
    interval: tuple[float, float] | None = None
    n: int | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        if self.note is not None and (not isinstance(self.note, str) or not self.note.strip()):
            raise ValueError(f"note must be a non-empty string or None, got {self.note!r}")
        if self.interval is not None and len(self.interval) != 2:
            raise ValueError(f"interval must be (lo, hi) or None, got {self.interval!r}")
        if self.n is not None and (isinstance(self.n, bool) or int(self.n) != self.n or self.n < 0):
            raise ValueError(f"n must be a non-negative integer or None, got {self.n!r}")


@dataclass(frozen=True, eq=False)
class ConditionBootstrap:
    """The condition's share of the split's one bootstrap draw.

    ``weights``: (n_images, B) image multiplicities; ``key``: the split's rng key (a metric
    that draws its own resamples extends it); ``shared()``: the intervals of recall,
    precision, F1 and AP50 on ``weights`` (computed once, vectorised); ``counts(c)``: the
    recall / precision / F1 intervals of other per-image (TP, FP, FN) counts on ``weights``.
    """

    weights: np.ndarray
    key: tuple
    n_resamples: int
    percentiles: tuple[float, float]
    shared: Callable[[], Mapping[str, tuple[float, float]]]
    counts: Callable[[np.ndarray], Mapping[str, tuple[float, float]]]


@dataclass(frozen=True, eq=False)
class ConditionContext:
    """One condition of one source at the frozen ``threshold``.

    ``counts``: (n_images, 3) per-image TP / FP / FN; ``match``: the shared matcher's
    :class:`~aegisbench.evaluation.matching.BatchMatch` (GT in the clean split's image
    order when ``paired``); ``gt``: the split's ground truth (``n_gt()``, ``boxes``, smoke
    sequence columns); ``coco``: ``{"map50", "map50_95"}``; ``kind``: the config's
    condition kind; ``clean``: the clean condition (None on clean itself); ``paired``:
    its images are the clean split's. ``cache`` holds what several metrics share.
    """

    track: str
    source: str
    config: str
    kind: str | None
    threshold: float
    counts: np.ndarray
    match: object = None
    gt: object = None
    coco: Mapping[str, float] | None = None
    clean: ConditionContext | None = None
    paired: bool = False
    silent: SilentFailureParams = SilentFailureParams()
    bootstrap: ConditionBootstrap | None = None
    cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        counts = np.asarray(self.counts)
        if counts.ndim != 2 or counts.shape[1] != 3:
            raise ValueError(f"counts must be (n_images, 3) TP/FP/FN, got shape {counts.shape}")
        object.__setattr__(self, "counts", counts)

    @property
    def n_images(self) -> int:
        return len(self.counts)

    @property
    def fp_per_image(self) -> float:
        """False positives per image at the frozen threshold (0 without images)."""
        return float(self.pooled[1]) / self.n_images if self.n_images else 0.0

    @property
    def pooled(self) -> np.ndarray:
        """(3,) TP, FP, FN summed over the images."""
        return self.counts.sum(axis=0)

    @property
    def is_clean(self) -> bool:
        return self.clean is None

    def cached(self, key: str, compute: Callable[[], object]):
        """``compute()`` once per context (shared by the metrics that need it)."""
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def reweighted(self, w: np.ndarray) -> ConditionContext:
        """The condition with image ``i`` counted ``w[i]`` times: ``counts`` (and, when
        paired, the clean condition's) re-weighted; ``match``, ``gt``, ``coco`` and the
        bootstrap are dropped (they cannot be re-weighted)."""
        w = np.asarray(w, np.float64).reshape(-1, 1)
        if len(w) != self.n_images:
            raise ValueError(f"{len(w)} weights for {self.n_images} images")
        clean = self.clean.reweighted(w) if self.clean is not None and self.paired else None
        return replace(self, counts=self.counts * w, match=None, gt=None, coco=None, clean=clean,
                       paired=clean is not None, bootstrap=None, cache={})


def _value(v) -> float:
    """A sample's number: NaN for no row or no value."""
    v = v.value if isinstance(v, Cell) else v
    return float("nan") if v is None else float(v)


def resampled_interval(fn: Callable[[ConditionContext], object], ctx: ConditionContext
                       ) -> tuple[float, float] | None:
    """Percentile interval of ``fn`` over the resamples of ``ctx.bootstrap`` (resamples
    where it is undefined are left out; None without a bootstrap or images)."""
    boot = ctx.bootstrap
    if boot is None or ctx.n_images == 0:
        return None
    samples = np.array([_value(fn(ctx.reweighted(w))) for w in np.asarray(boot.weights).T])
    return percentile_interval(samples, boot.percentiles)


def defined(cell: Cell) -> Cell:
    """``cell`` as written: an undefined value (None or not finite) is null, without an
    interval, noted :data:`ZERO_DIVISION` unless the cell gives its own reason; a defined
    value carries no note."""
    v = cell.value
    if v is not None and np.isfinite(v):
        return replace(cell, value=float(v), note=None)
    return replace(cell, value=None, interval=None, note=cell.note or ZERO_DIVISION)


def _member(prod: Producer, name: str) -> Callable[[ConditionContext], object]:
    if not prod.group:
        return prod.fn
    return lambda c: (prod.fn(c) or {}).get(name)


def condition_cells(ctx: ConditionContext, registry: MetricRegistry | None = None) -> list[tuple[str, Cell]]:
    """Every registered per-condition metric of ``ctx.track`` on ``ctx``, as
    ``(name, Cell)`` in registration order."""
    registry = REGISTRY if registry is None else registry
    out: list[tuple[str, Cell]] = []
    for prod in registry.producers(ctx.track):
        result = prod.fn(ctx)
        if result is None:
            continue
        for name, value in (result.items() if prod.group else [(prod.name, result)]):
            if name not in prod.names:
                raise ValueError(f"{prod.name} returned {name!r}, a metric it did not register")
            spec = registry[name]
            if isinstance(value, Cell):
                cell = value
            else:
                interval = resampled_interval(_member(prod, name), ctx) if spec.interval else None
                cell = Cell(None if value is None else float(value), interval, ctx.n_images)
            if cell.interval is not None and not spec.interval:
                raise ValueError(f"{name}: an interval for a metric registered with interval=False")
            out.append((name, defined(cell if cell.n is not None else replace(cell, n=ctx.n_images))))
    return out
