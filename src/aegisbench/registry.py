"""One registry for every kind of unit: corruptions, metrics, tracks, detectors, source
formats, synthetic kinds, config families.

A unit is one module that registers itself under one snake_case name (the same name is the
function, the registry key and the column value). A :class:`Registry` refuses a second unit
under a taken name, knows where its plug-ins live (a declared tuple of module names and,
optionally, an entry-point group, so a third-party package can add units without touching
this one), imports them on first use, and can be frozen so nothing registers after start-up.

>>> shapes = Registry("shape")
>>> @shapes.register("unit_square")
... def unit_square():
...     return 1.0
>>> shapes.get("unit_square")()
1.0
>>> shapes.names()
('unit_square',)
>>> shapes.add("unit_square", lambda: 2.0)
Traceback (most recent call last):
...
ValueError: shape 'unit_square' is already registered
>>> shapes.get("unit_circle")
Traceback (most recent call last):
...
KeyError: "unknown shape 'unit_circle'; known: unit_square"
>>> with shapes.scoped():
...     _ = shapes.add("unit_cube", lambda: 3.0)
...     shapes.names()
('unit_square', 'unit_cube')
>>> shapes.names()
('unit_square',)
>>> shapes.freeze(); shapes.add("unit_cube", lambda: 3.0)
Traceback (most recent call last):
...
RuntimeError: the shape registry is frozen: 'unit_cube' cannot be added
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class Registry(Generic[T]):
    """Named units of one ``kind``.

    ``plugins``: module names imported by :meth:`load` (each registers its units on import);
    ``entry_points``: an ``importlib.metadata`` entry-point group whose modules are imported
    too. Every read (:meth:`get`, :meth:`names`, iteration, ``in``) loads first; loading is
    thread-safe (a second thread waits until every plug-in has registered), and a read made
    by a plug-in while it is being imported sees the units registered so far.
    """

    def __init__(self, kind: str, *, plugins: Sequence[str] = (), entry_points: str | None = None) -> None:
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"a registry kind must be a non-empty string, got {kind!r}")
        if isinstance(plugins, str):
            raise TypeError(f"{kind} registry: plugins must be a sequence of module names, not one string")
        self.kind = kind
        self.plugins = tuple(plugins)
        self.entry_points = entry_points
        self._units: dict[str, T] = {}
        self._frozen = False
        self._loaded = False
        self._loading = False
        self._lock = threading.RLock()

    # -------------------------------------------------------------- registering
    def add(self, name: str, unit: T) -> T:
        """Register ``unit`` as ``name``; refuses a taken name, a bad name or a frozen registry."""
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(f"{self.kind} name must be snake_case ([a-z][a-z0-9_]*), got {name!r}")
        if self._frozen:
            raise RuntimeError(f"the {self.kind} registry is frozen: {name!r} cannot be added")
        if name in self._units:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._units[name] = unit
        return unit

    def registered(self, name: str) -> bool:
        """Whether ``name`` is registered now, without loading the plug-ins (for registering code)."""
        return name in self._units

    def register(self, name: str | None = None) -> Callable[[T], T]:
        """Decorator: ``@registry.register("name")`` (default: the object's ``__name__``)."""
        def deco(unit: T) -> T:
            self.add(name if name is not None else getattr(unit, "__name__", ""), unit)
            return unit
        return deco

    def remove(self, name: str) -> None:
        """Remove ``name`` if registered (for tests that add throw-away units); refused when frozen."""
        if self._frozen:
            raise RuntimeError(f"the {self.kind} registry is frozen: {name!r} cannot be removed")
        self._units.pop(name, None)

    @contextmanager
    def scoped(self) -> Iterator["Registry[T]"]:
        """Every unit added inside the block is removed again at its end (tests, experiments)."""
        self.load()
        saved = dict(self._units)
        try:
            yield self
        finally:
            self._units = saved

    def freeze(self) -> None:
        """Load the plug-ins, then refuse every later :meth:`add`."""
        self.load()
        self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen

    # -------------------------------------------------------------- plug-ins
    def load(self) -> None:
        """Import the declared plug-in modules and the entry-point group's, once."""
        if self._loaded:
            return
        with self._lock:  # re-entrant: a plug-in reading the registry while it is imported
            if self._loaded or self._loading:
                return
            self._loading = True
            try:
                for module in self.plugins:
                    importlib.import_module(module)
                if self.entry_points:
                    from importlib.metadata import entry_points

                    for ep in entry_points(group=self.entry_points):
                        log.debug("%s plug-in %s from entry point %s", self.kind, ep.value, ep.name)
                        ep.load()
                self._loaded = True
            finally:
                self._loading = False

    # -------------------------------------------------------------- reading
    def get(self, name: str) -> T:
        self.load()
        try:
            return self._units[name]
        except (KeyError, TypeError):
            known = ", ".join(sorted(self._units)) or "none"
            raise KeyError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        self.load()
        return tuple(self._units)

    def items(self) -> tuple[tuple[str, T], ...]:
        self.load()
        return tuple(self._units.items())

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._units

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._units)} units{', frozen' if self._frozen else ''})"
