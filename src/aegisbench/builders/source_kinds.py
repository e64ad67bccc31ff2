"""The kinds of source: what ``kind:`` of a ``params.yaml`` source (and ``--source-format``)
may name. Two :class:`~aegisbench.registry.Registry` instances, each unit registered by its own
module (declared here by module name, imported on first read):

* :data:`SOURCE_FORMATS`: a local folder's format -> its reader ``(folder, class mapper, spec)
  -> ParseResult`` (:mod:`~aegisbench.builders.adapters` turns the result into records);
* :data:`SYNTHETIC_KINDS`: an embedded generator -> :class:`SyntheticKind` (its options
  dataclass and ``generate(config, version) -> records``).

>>> SYNTHETIC_KINDS.names(), SOURCE_FORMATS.names()
(('synthetic_sar', 'synthetic_smoke'), ('voc', 'yolo', 'coco', 'visdrone'))
>>> try:
...     check_source_kind("cocoo", where="params.yaml: sources.demo.kind")
... except BadInput as exc:
...     print(exc)
params.yaml: sources.demo.kind: must be one of ('synthetic_sar', 'synthetic_smoke', 'voc', 'yolo', 'coco', 'visdrone'), got 'cocoo' (did you mean 'coco'?)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from aegisbench.errors import BadInput
from aegisbench.fields import check_choice
from aegisbench.registry import Registry


@dataclass(frozen=True)
class SyntheticKind:
    """An embedded generator: ``generate(config(**options), version)`` yields its records;
    ``private``: it accepts ``private: true`` (its draws keyed by a secret of ``private/``)."""

    config: type
    generate: Callable[[Any, str], Iterator[Any]]
    private: bool = False


#: Folder format -> reader ``(folder, class mapper, SourceSpec) -> ParseResult``.
SOURCE_FORMATS: Registry[Callable] = Registry(
    "source format", plugins=("aegisbench.builders.adapters_formats", "aegisbench.builders.adapters_coco"))
#: Generator name -> :class:`SyntheticKind`.
SYNTHETIC_KINDS: Registry[SyntheticKind] = Registry(
    "synthetic kind", plugins=("aegisbench.builders.synthetic_sar", "aegisbench.builders.synthetic_smoke"))


def source_kinds() -> tuple[str, ...]:
    """Every source kind: the synthetic generators, then the folder formats."""
    synthetic, formats = SYNTHETIC_KINDS.names(), SOURCE_FORMATS.names()
    both = sorted(set(synthetic) & set(formats))
    if both:
        raise ValueError(f"{both} registered both as a synthetic kind and as a source format")
    return synthetic + formats


def check_source_kind(kind: object, where: str) -> str:
    """``kind`` if it is a registered source kind; else BadInput at ``where`` naming the closest."""
    return check_choice(kind, "kind", source_kinds(), error=BadInput, where=where)
