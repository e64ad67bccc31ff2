"""Named conditions, compound conditions, geometry and deterministic seeding.

A condition is ``clean``, ``<corruption>_s<k>`` (k in 1..3), or a compound of
several joined by ``+`` and applied left to right (``low_light_s2+inundation_s2``).
The Hugging Face config name of a compound joins the parts with ``__`` instead
(``low_light_s2__inundation_s2``); the mapping is a bijection because corruption
names never contain a double underscore.

Every step draws from ``rng_for(*key, corruption, severity)`` with
``key = (benchmark_version, source, image_id)``, so the same key gives the same
bytes and the first step of a compound equals the single condition.

Geometry: pixel-unit parameters are per 1000 px. With ``geometry="frame"`` one unit
is the longer image side / 1000; with ``geometry="target-relative"`` it is the median
target size (sqrt of box area) / ``REFERENCE_TARGET_PX``, i.e. a frame is treated
as if its median target were 40 px per 1000 px of frame. An image without boxes
falls back to frame geometry.

>>> to_config_name("low_light_s2+inundation_s2")
'low_light_s2__inundation_s2'
>>> from_config_name("low_light_s2__inundation_s2")
'low_light_s2+inundation_s2'
>>> len(list_conditions()) == len(SEVERITIES) * len(names())
True
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from aegisbench.corruptions.optics import check_image
from aegisbench.corruptions.registry import SEVERITIES, SeverityTable, get_spec, names
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for
from aegisbench.vocab import (CLEAN, GEOMETRIES, WARP, WARP_NOISE, compound_parts, condition_to_config,
                              config_to_condition, corruption_config, parse_corruption_config,
                              parse_warp_noise_config)

log = logging.getLogger(__name__)

#: In target-relative geometry a median target of this many px counts as 1000 px of frame.
REFERENCE_TARGET_PX = 40.0


def condition_name(corruption: str, severity: int) -> str:
    """``condition_name("low_light", 3) == "low_light_s3"`` (validated)."""
    get_spec(corruption)
    if severity not in SEVERITIES:
        raise BadInput(f"unknown severity {severity!r} of {corruption!r}", where="condition")
    return corruption_config(corruption, severity)


def list_conditions() -> list[str]:
    """Every single condition ``<corruption>_s<k>`` (each registered corruption at each severity), corruption-major."""
    return [corruption_config(n, s) for n in names() for s in SEVERITIES]


def _parse_single(part: str, whole: str) -> tuple[str, int]:
    parsed = parse_corruption_config(part)
    if parsed is None:
        raise BadInput(f"unknown condition {part!r} in {whole!r} (expected clean or "
                       f"<corruption>_s<1|2|3>, e.g. low_light_s3)", where="condition")
    corruption, severity = parsed
    try:
        get_spec(corruption)
    except BadInput:
        raise BadInput(f"unknown condition {part!r} in {whole!r}: no corruption named "
                       f"{corruption!r} (known: {', '.join(names())})", where="condition") from None
    if severity not in SEVERITIES:
        raise BadInput(f"unknown condition {part!r} in {whole!r}: severity {severity} is not "
                       f"one of {SEVERITIES}", where="condition")
    return corruption, severity


def parse_condition(name: str) -> tuple[tuple[str, int], ...]:
    """Condition name -> ((corruption, severity), ...); ``clean`` -> ().

    >>> parse_condition("low_light_s2+inundation_s2")
    (('low_light', 2), ('inundation', 2))
    """
    if not isinstance(name, str) or not name.strip():
        raise BadInput(f"condition name must be a non-empty string, got {name!r}", where="condition")
    if name == CLEAN:
        return ()
    steps = tuple(_parse_single(part, name) for part in compound_parts(name))
    seen = [c for c, _ in steps]
    dup = sorted({c for c in seen if seen.count(c) > 1})
    if dup:
        raise BadInput(f"compound condition {name!r} repeats {', '.join(dup)}", where="condition")
    return steps


def to_config_name(name: str) -> str:
    """Condition name -> Hugging Face config name (``+`` becomes ``__``)."""
    parse_condition(name)
    return condition_to_config(name)


def from_config_name(config: str) -> str:
    """Hugging Face config name -> condition name (validated)."""
    if not isinstance(config, str):
        raise BadInput(f"config name must be a string, got {config!r}", where="config")
    name = config_to_condition(config)
    parse_condition(name)
    return name


def median_target_size(boxes) -> float | None:
    """Median of sqrt(w * h) over xyxy boxes; None when there are none."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if not len(b):
        return None
    side = np.sqrt(np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None))
    return float(np.median(side))


def px_per_kpx(shape: tuple[int, ...], geometry: str = "frame", boxes=None,
               target_size: float | None = None) -> float:
    """Pixels per parameter unit for an image of ``shape`` under ``geometry``.

    >>> px_per_kpx((3000, 4000, 3))
    4.0
    >>> px_per_kpx((640, 640, 3), "target-relative", target_size=60.0)
    1.5
    """
    if geometry not in GEOMETRIES:
        raise BadInput(f"unknown geometry {geometry!r} (expected one of {GEOMETRIES})",
                       where="geometry")
    frame = max(shape[:2]) / 1000.0
    if geometry == "frame":
        return frame
    size = target_size if target_size is not None else (
        median_target_size(boxes) if boxes is not None else None)
    if size is None:
        log.debug("no targets: target-relative geometry falls back to frame geometry")
        return frame
    if not np.isfinite(size) or size <= 0:
        raise BadInput(f"median target size must be positive, got {size!r}", where="boxes")
    return float(size) / REFERENCE_TARGET_PX


def apply_condition(name: str, image: np.ndarray, *, key: tuple, boxes=None,
                    geometry: str = "frame", table: SeverityTable | None = None,
                    target_size: float | None = None) -> np.ndarray:
    """Apply a (possibly compound) condition to an RGB uint8 image; returns a new image.

    ``key`` is ``(benchmark_version, source, image_id)``; boxes are only read (for
    target-relative geometry) and never changed: the corruptions are appearance-only.
    A WARP noise config (``warp_noise_100``: a = 0.1) applies the registry's ``warp_noise``
    with ``rng_for(*key, "warp_noise", name)`` (frame geometry, no severity table).

    >>> import numpy as np
    >>> img = np.full((64, 64, 3), 120, np.uint8)
    >>> a = apply_condition("smoke_haze_s2", img, key=("0.1.0", "demo", "a"))
    >>> b = apply_condition("smoke_haze_s2", img, key=("0.1.0", "demo", "a"))
    >>> bool((a == b).all()) and a.shape == img.shape
    True
    """
    level = parse_warp_noise_config(name)
    steps = parse_condition(name) if level is None else ()
    check_image(image, where=f"condition {name}: image")
    if not isinstance(key, (tuple, list)) or not key:
        raise BadInput(f"key must be a non-empty tuple (version, source, image_id), got {key!r}",
                       where="key")
    if level is not None:
        return get_spec(WARP_NOISE, kind=WARP).fn(image, rng_for(*key, WARP_NOISE, name), a=level)
    table = table if table is not None else SeverityTable()
    scale = px_per_kpx(image.shape, geometry, boxes, target_size)
    out = image.copy() if not steps else image
    for corruption, severity in steps:
        spec = get_spec(corruption)
        params = table.params(corruption, severity)
        rng = rng_for(*key, corruption, severity)
        out = spec.fn(out, rng, px_per_kpx=scale, **_fields(params))
    return out


def _fields(params) -> dict:
    return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
