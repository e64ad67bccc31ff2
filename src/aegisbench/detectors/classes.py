"""Which classes of a wrapped model become the track's one target label.

``detect --classes`` names model classes (by name, case-insensitive, or by id); without
it a class named like the target label is taken, or the one class of a single-class
model; anything else is refused. Adapters keep only the mapped classes, before their
NMS and their per-window cap, and write the target label on every box.

>>> names = {0: "pedestrian", 1: "car", 2: "people"}
>>> resolve_classes(names, "pedestrian,2", "person").record()
{'pedestrian': 'person', 'people': 'person'}
>>> resolve_classes({0: "Person", 1: "car"}, None, "person").ids
(0,)
"""

from __future__ import annotations

from dataclasses import dataclass

from aegisbench.errors import BadInput
from aegisbench.fields import is_int

WHERE = "--classes"
_SHOWN = 100  # classes listed in an error line


@dataclass(frozen=True)
class ClassMap:
    """Model class ``ids`` (sorted) and their ``names``, all mapped to ``target``."""

    target: str
    ids: tuple[int, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target:
            raise ValueError("ClassMap.target must be a non-empty string")
        if not isinstance(self.ids, tuple) or not self.ids or not all(is_int(i) and i >= 0 for i in self.ids):
            raise ValueError("ClassMap.ids must be a non-empty tuple of class ids >= 0")
        if list(self.ids) != sorted(set(self.ids)):
            raise ValueError("ClassMap.ids must be sorted and distinct")
        if not isinstance(self.names, tuple) or len(self.names) != len(self.ids) or not all(
                isinstance(n, str) for n in self.names):
            raise ValueError("ClassMap.names must hold one string per id")

    def record(self) -> dict[str, str]:
        """``{model class name: target}``, as written to submission.yaml."""
        return {n: self.target for n in self.names}


def describe_classes(names: dict[int, str]) -> str:
    """``0=pedestrian, 1=car, ...`` (the first :data:`_SHOWN`)."""
    items = [f"{i}={n}" for i, n in sorted(names.items())]
    more = f", ... ({len(items) - _SHOWN} more)" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _find(names: dict[int, str], entry: str) -> int | None:
    """The id an entry names: an exact name, a unique case-insensitive name, else an id."""
    exact = [i for i, n in names.items() if n == entry]
    if len(exact) == 1:
        return exact[0]
    folded = [i for i, n in names.items() if n.lower() == entry.lower()]
    if len(folded) == 1:
        return folded[0]
    if len(exact) + len(folded) > 1:
        raise BadInput(f"class {entry!r} names several classes of the model ({describe_classes(names)}); "
                       "give their ids", where=WHERE)
    if entry.isascii() and entry.isdigit() and int(entry) in names:
        return int(entry)
    return None


def resolve_classes(names: dict[int, str], spec: str | None, target: str) -> ClassMap:
    """The :class:`ClassMap` of ``spec`` (``NAME_OR_ID[,NAME_OR_ID...]``) over the model's
    ``names`` (id -> name); without ``spec`` the class(es) named ``target``, else a
    single-class model's one class. Anything unresolved is BadInput naming the classes."""
    if not isinstance(names, dict) or not names:
        raise BadInput("the model declares no class names to map", where=WHERE)
    names = {int(i): str(n) for i, n in names.items()}
    if spec is not None:
        entries = [e.strip() for e in spec.split(",")]
        if not all(entries):
            raise BadInput(f"empty entry in {spec!r}; expected NAME_OR_ID[,NAME_OR_ID...]", where=WHERE)
        ids = set()
        for entry in entries:
            i = _find(names, entry)
            if i is None:
                raise BadInput(f"{entry!r} names no class of the model; its classes are {describe_classes(names)}",
                               where=WHERE)
            ids.add(i)
    else:
        ids = {i for i, n in names.items() if n.lower() == target.lower()}
        if not ids and len(names) == 1:
            ids = set(names)
        if not ids:
            raise BadInput(f"the model has {len(names)} classes and none is named {target!r}: pass --classes with "
                           f"the ones that are the target (names or ids of {describe_classes(names)})", where=WHERE)
    ordered = tuple(sorted(ids))
    return ClassMap(target, ordered, tuple(names[i] for i in ordered))


def classes_of_ids(names: dict[int, str], ids, target: str, where: str = WHERE) -> ClassMap:
    """The :class:`ClassMap` of recorded class ``ids`` (e.g. a submission's), each checked
    to be a class of the model."""
    names = {int(i): str(n) for i, n in (names or {}).items()}
    if not isinstance(ids, (list, tuple)) or not ids or not all(is_int(i) and i in names for i in ids):
        raise BadInput(f"class ids {ids!r} are not classes of the model ({describe_classes(names)})", where=where)
    ordered = tuple(sorted(set(int(i) for i in ids)))
    return ClassMap(target, ordered, tuple(names[i] for i in ordered))
