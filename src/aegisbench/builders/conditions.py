"""Which configs a build materializes, and the pixel transform of each.

``clean`` always; then ``build.conditions`` from ``params.yaml`` (names such as
``low_light_s3``, or ``all`` for every single condition) and compound conditions
(``low_light_s2+inundation_s2`` -> config ``low_light_s2__inundation_s2``). WARP (seed
000) is not built: ``aegisbench warp-detect`` runs its noise sweep and patch test on the
clean frames. Each config carries ``meta`` written to the manifest, so nothing downstream
parses names, and the sensor ``modalities`` it is physical for (every part of a compound
must hold; ``clean`` holds for all): a source of another modality gets no split of it
(:func:`not_physical`).

>>> from aegisbench.params import Params
>>> p = Params.from_dict({"benchmark_version": "0.1.0", "sources": {},
...                       "build": {"conditions": ["low_light_s3"]}})
>>> [(s.name, s.meta["kind"]) for s in config_specs(p)]
[('clean', 'clean'), ('low_light_s3', 'corruption')]
>>> [s.physical_for("thermal") for s in config_specs(p)]
[True, False]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

from aegisbench.errors import BadInput
from aegisbench.params import Params
from aegisbench.vocab import (CLEAN, COMPOUND, COMPOUND_FAMILY, CORRUPTION, DETECTION_TRACKS, MODALITIES,
                              corruption_config)

CLEAN_META = {"kind": CLEAN, "corruption": None, "family": None, "severity": 0,
              "components": [], "warp_level": None}


@dataclass(frozen=True)
class ConfigSpec:
    """One config of the repo. ``meta`` (kind, corruption, family, severity, components,
    warp_level) is written to the manifest so evaluators never parse config names;
    ``modalities``: the sensors it is physical for."""

    name: str
    description: str
    include_val: bool = False
    tracks: tuple[str, ...] = DETECTION_TRACKS
    condition: str | None = None  # condition applied to pixels; None keeps the clean bytes
    meta: dict = field(default_factory=lambda: dict(CLEAN_META), compare=False)
    modalities: tuple[str, ...] = MODALITIES

    def __post_init__(self) -> None:
        if not self.modalities or not set(self.modalities) <= set(MODALITIES):
            raise ValueError(f"{self.name}: modalities must be values of {MODALITIES}, got {self.modalities!r}")

    def physical_for(self, modality: str) -> bool:
        """Whether the config's physics holds for a source of sensor ``modality``."""
        return modality in self.modalities

    def transform(self, params: Params):
        if self.condition is None:
            return None
        return ConditionTransform(self.condition, params.benchmark_version, params.build.geometry,
                                  params.build.severity_table)


@lru_cache(maxsize=4)
def _table(path: str | None, version: str):
    from aegisbench.corruptions import SeverityTable, load_table
    return load_table(path, expected_version=version) if path else SeverityTable()


class ConditionTransform:
    """Picklable per-image transform applying one condition with its stable key."""

    def __init__(self, condition: str, version: str, geometry: str, table: str | None = None):
        self.condition, self.version, self.geometry, self.table = condition, version, geometry, table

    def __call__(self, rec, image):
        from aegisbench.corruptions import apply_condition
        key = (self.version, rec.source, rec.image_id)
        return apply_condition(self.condition, image, key=key, boxes=rec.boxes,
                               geometry=self.geometry, table=_table(self.table, self.version))


def _corruption_spec(condition: str, table) -> ConfigSpec:
    from aegisbench.corruptions import get_spec, parse_condition, to_config_name
    steps = parse_condition(condition)
    if not steps:
        raise BadInput("`clean` is always built; do not list it", where="params.yaml: build.conditions")
    parts = [{"corruption": c, "family": get_spec(c).family, "severity": s} for c, s in steps]
    modalities = tuple(m for m in MODALITIES if all(m in get_spec(c).modalities for c, _ in steps))
    if len(parts) == 1:
        (p,) = parts
        spec = get_spec(p["corruption"])
        meta = {"kind": CORRUPTION, **p, "components": [condition], "warp_level": None}
        values = dataclasses.asdict(table.params(p["corruption"], p["severity"]))
        text = (f"`{p['corruption']}` ({p['family']}) at severity {p['severity']}: "
                f"{(spec.summary or spec.statistic).rstrip('.')}; "
                + ", ".join(f"{k} {v:g}" for k, v in values.items())
                + ". Test splits only; boxes as in `clean`.")
    else:
        meta = {"kind": COMPOUND, "corruption": condition, "family": COMPOUND_FAMILY,
                "severity": max(p["severity"] for p in parts),
                "components": [corruption_config(p["corruption"], p["severity"]) for p in parts],
                "warp_level": None}
        text = ("Compound condition, applied left to right: "
                + " then ".join(f"`{c}`" for c in meta["components"]) + ".")
    return ConfigSpec(to_config_name(condition), text, condition=condition, meta=meta, modalities=modalities)


def not_physical(params: Params, specs: list[ConfigSpec]) -> dict[str, dict[str, str]]:
    """``{config: {source: modality}}``: the sources of a config's tracks that get no split
    of it because its physics does not hold for their sensor (configs without any: absent)."""
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        skipped = {s.name: s.modality for s in params.sources
                   if s.track in spec.tracks and not spec.physical_for(s.modality)}
        if skipped:
            out[spec.name] = skipped
    return out


def config_specs(params: Params) -> list[ConfigSpec]:
    """``clean`` plus every condition config the params ask for, in a stable order."""
    specs = [ConfigSpec("clean", "Unmodified images: clean validation (`<source>_val`, used "
                        "to freeze thresholds) and clean test (`<source>`).", include_val=True)]
    b = params.build
    conditions = list(b.conditions)
    if "all" in conditions:
        from aegisbench.corruptions import list_conditions
        conditions = list_conditions() + [c for c in conditions if c != "all"]
    table = _table(b.severity_table, params.benchmark_version)
    for cond in dict.fromkeys([*conditions, *b.compound]):
        specs.append(_corruption_spec(cond, table))
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise BadInput(f"config(s) listed twice: {dup}", where="params.yaml: build")
    return specs
