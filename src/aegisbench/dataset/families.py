"""Config families: what kinds of configs a dataset repo holds, declared once.

A *family* is a set of configs whose rows share a layout and a purpose: the image conditions
(``clean``, ``low_light_s3``, ``warp_noise_100``: frames with boxes, for the detection tracks)
and the fire-spread ensembles (``firespread_s20``, ``firespread_statistic``). Its declaration
(:class:`ConfigFamily`) says which condition kinds of the config-name grammar
(:func:`aegisbench.vocab.config_kind`) it owns and what kind of rows each holds (the key of
:data:`~aegisbench.dataset.schema.KIND_FEATURES`), how a row's content key is recomputed from a
decoded row (``verify``), and what the card says of it (Hub task categories and ids). The
families live in :data:`FAMILIES` (a :class:`~aegisbench.registry.Registry`, one module each);
how a family's shards are made is the builder's half (:mod:`aegisbench.builders.families`).
The card, the shard reader and the build ask a family, never a config name.

Adding a family: a module that declares a :class:`ConfigFamily` and ``FAMILIES.add``\\ s it,
named in :data:`FAMILIES`' plug-ins, its row features in :mod:`aegisbench.dataset.schema`, and
its builder half registered in :mod:`aegisbench.builders.families`.

>>> [f.name for f in families()]
['image', 'firespread']
>>> row_kind("clean"), row_kind("low_light_s3"), row_kind("firespread_s20"), row_kind("firespread_statistic")
('image', 'image', 'realizations', 'statistic')
>>> family_of("warp_noise_100").name, "objects" in features_of("clean"), "objects" in features_of("firespread_s0")
('image', True, False)
>>> row_kind("no such config!")
Traceback (most recent call last):
...
ValueError: config 'no such config!' belongs to no config family (image, firespread)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import datasets
import pyarrow as pa

from aegisbench.dataset.schema import KIND_FEATURES, features_schema
from aegisbench.registry import Registry
from aegisbench.vocab import config_kind

#: ``(row kind, config, decoded row, where) -> (content key, {image id: pixel SHA-256}, problems)``
RowKey = Callable[[str, str, dict, str], tuple[list, dict[str, str | None], list[str]]]


@dataclass(frozen=True)
class ConfigFamily:
    """The declaration of one config family.

    ``kinds``: condition kind (:func:`aegisbench.vocab.config_kind` of a config name) -> the
    kind of rows such a config holds; ``row_key``: the content key of one decoded row, as the
    builder hashed it, with the pixel hashes it recomputed and the row's problems; ``tracks``:
    the tracks its configs serve; ``rank``: its place in a build (its tasks, sources and card
    entries come in this order, whatever order the modules were imported in);
    ``task_categories`` / ``task_ids`` (track -> id): the card's Hub task metadata."""

    name: str
    kinds: Mapping[str, str]
    row_key: RowKey
    tracks: tuple[str, ...]
    rank: int
    task_categories: tuple[str, ...] = ()
    task_ids: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.kinds.values()) - set(KIND_FEATURES))
        if unknown:
            raise ValueError(f"config family {self.name!r}: row kinds {unknown} have no features in "
                             "aegisbench.dataset.schema.KIND_FEATURES")


FAMILIES: Registry[ConfigFamily] = Registry(
    "config family", plugins=("aegisbench.dataset.family_image", "aegisbench.dataset.family_firespread"))


def families() -> list[ConfigFamily]:
    """Every registered family, in build order (``rank``, then name)."""
    return sorted((FAMILIES.get(n) for n in FAMILIES.names()), key=lambda f: (f.rank, f.name))


def family_of(config: str) -> ConfigFamily:
    """The family that owns ``config`` (ValueError for a name no family declares)."""
    kind = config_kind(config)
    found = families()
    for family in found:
        if kind in family.kinds:
            return family
    raise ValueError(f"config {config!r} belongs to no config family ({', '.join(f.name for f in found)})")


def row_kind(config: str) -> str:
    """The kind of rows ``config`` holds (``"image"``, ``"realizations"``, ``"statistic"``):
    the one dispatcher on a config name, used by the build, the card and the shard reader."""
    return family_of(config).kinds[config_kind(config)]


def features_of(config: str) -> datasets.Features:
    """The declared features of the rows of ``config``."""
    return KIND_FEATURES[row_kind(config)]


def schema_of(config: str) -> pa.Schema:
    """The Arrow schema a shard of ``config`` is written with (:func:`features_schema`)."""
    return _SCHEMAS[row_kind(config)]


_SCHEMAS = {kind: features_schema(features) for kind, features in KIND_FEATURES.items()}
