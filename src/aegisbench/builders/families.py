"""The builder's half of a config family: the shards it makes and what the manifest and the
card record of it.

A family's declaration (its configs' row kinds and features) is the contract
(:mod:`aegisbench.dataset.families`); here each family registers a *planner*,
``plan(params, sources_dir) -> FamilyPlan``: its shard tasks (picklable, each with
``run(root, transform) -> ShardEntry``, ``labels`` and ``inputs``), its configs' manifest metas
and card descriptions, its sources as the card and the manifest record them, and the image
transforms and cells not built for a sensor. :func:`plan_build` asks every family, in the order
of :func:`aegisbench.dataset.families.families` (rank order), and joins their plans: the build itself knows
no family.

>>> [name for name, _ in planners()]
['image', 'firespread']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aegisbench.dataset.families import families
from aegisbench.params import Params
from aegisbench.registry import Registry


@dataclass
class FamilyPlan:
    """What one family (or, joined, a whole build) contributes to a build."""

    tasks: list = field(default_factory=list)
    metas: dict[str, dict] = field(default_factory=dict)  # config -> manifest meta
    descriptions: dict[str, str] = field(default_factory=dict)  # config -> card description
    sources: list[dict] = field(default_factory=list)  # as the card records them
    manifest_sources: dict[str, dict] = field(default_factory=dict)  # name -> {track, kind[, modality]}
    transforms: dict = field(default_factory=dict)  # config -> image transform
    not_physical: dict[str, dict[str, str]] = field(default_factory=dict)  # config -> {source: modality}

    def join(self, other: "FamilyPlan") -> "FamilyPlan":
        """This plan followed by ``other`` (tasks and sources in order; a config of both is refused)."""
        both = sorted(set(self.metas) & set(other.metas))
        if both:
            raise ValueError(f"configs {both} are planned by two config families")
        return FamilyPlan(self.tasks + other.tasks, {**self.metas, **other.metas},
                          {**self.descriptions, **other.descriptions}, self.sources + other.sources,
                          {**self.manifest_sources, **other.manifest_sources},
                          {**self.transforms, **other.transforms}, {**self.not_physical, **other.not_physical})


Planner = Callable[[Params, Path], FamilyPlan]

#: family name -> its planner (the names of :data:`aegisbench.dataset.families.FAMILIES`)
PLANNERS: Registry[Planner] = Registry(
    "config family planner", plugins=("aegisbench.builders.family_image", "aegisbench.builders.firespread"))


def planners() -> list[tuple[str, Planner]]:
    """Every family's planner, in the order of the declared families (each must have one)."""
    names = [f.name for f in families()]
    missing = [n for n in names if n not in PLANNERS]
    if missing:
        raise ValueError(f"config families {missing} have no planner in aegisbench.builders.families.PLANNERS")
    return [(n, PLANNERS.get(n)) for n in names]


def plan_build(params: Params, sources_dir: Path) -> FamilyPlan:
    """Every family's plan for ``params``, joined in family order."""
    plan = FamilyPlan()
    for _, planner in planners():
        plan = plan.join(planner(params, sources_dir))
    return plan
