"""Declared parameters: each parameter of a frozen dataclass is declared once, in its field.

``param(default, lo=, hi=, unit=, doc=)`` is a :func:`dataclasses.field` whose metadata holds
the declaration (``type``, ``bounds``, ``unit``, ``doc``, plus open ends, ``choices``,
``optional`` and ``each`` for a tuple of values); a class deriving from :class:`Declared` has
one ``__post_init__`` that checks every declared field (:func:`validate`: the type -- a bool
is not an int, an int is a float --, the bounds, the choices), then the class's own rules
between fields (:meth:`Declared.cross_check`). A leaf: imports only :mod:`aegisbench.fields`
and :mod:`aegisbench.errors`.

Errors name the field. By default they are :class:`~aegisbench.fields.FieldError`
(``ValueError``; :class:`~aegisbench.fields.FieldTypeError`, also a ``TypeError``, for a wrong
type) labelled ``Class.field``; a class that reads user input says where
(``class P(Declared, where="params.yaml: section")``) and raises
:class:`~aegisbench.errors.BadInput` located at ``<where>.<field>``. ``coerce=True`` stores a
number back as the declared type (``1`` -> ``1.0``). ``BOUNDS`` (class attribute) is the
``name -> (lo, hi)`` table of the numeric fields; :func:`describe` and
:func:`parameter_lines` list the declarations with their units (for help and docs);
``python -m aegisbench.schema MODULE...`` prints them for a module's parameter dataclasses.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Blur(Declared, coerce=True):
...     sigma: float = param(1.0, lo=0.0, hi=50.0, unit="px", doc="Gaussian sigma")
...     passes: int = param(1, lo=1, hi=4, doc="times applied")
>>> Blur(sigma=2), Blur.BOUNDS["sigma"]
(Blur(sigma=2.0, passes=1), (0.0, 50.0))
>>> Blur(passes=True)
Traceback (most recent call last):
...
aegisbench.fields.FieldTypeError: Blur.passes must be an integer, got True
>>> parameter_lines(Blur)
['sigma: float = 1.0, in [0.0, 50.0] px -- Gaussian sigma', 'passes: int = 1, in [1, 4] -- times applied']
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Collection, Mapping
from dataclasses import MISSING, dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from aegisbench.errors import BadInput
from aegisbench.fields import check_bool, check_choice, check_float, check_int, field_error, range_text

__all__ = ["Declared", "Param", "ParamInfo", "declared_field", "declared_in", "describe", "param", "param_of",
           "parameter_lines", "validate"]

#: the metadata key of a field's declaration
KEY = "param"
_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "text"}


@dataclass(frozen=True)
class Param:
    """One parameter's declaration: its type, numeric bounds (closed unless an end is open),
    choices, unit and doc. ``optional``: None is allowed too; ``each``: the value is a
    list/tuple whose every item is checked (stored as a tuple); ``key``: the name the user
    writes when it is not the field's (``grid`` for ``height``)."""

    type: type = object
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple | None = None
    optional: bool = False
    each: bool = False
    unit: str = ""
    doc: str = ""
    key: str | None = None

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        return self.lo, self.hi

    def check(self, v: Any, name: str, *, error: type = ValueError, where: str | None = None) -> Any:
        """``v`` checked (a number as its declared type); ``name`` labels a ``ValueError``,
        ``where`` locates a :class:`BadInput`."""
        if v is None and self.optional:
            return None
        if self.each:
            if not isinstance(v, (list, tuple)):
                raise field_error(error, True, name, where, f"must be a list, got {v!r}")
            return tuple(self._check_one(x, name, error, where) for x in v)
        return self._check_one(v, name, error, where)

    def _check_one(self, v: Any, name: str, error: type, where: str | None) -> Any:
        if self.type is int:
            v = check_int(v, name, self.lo, self.hi, error=error, where=where)
        elif self.type is float:
            v = check_float(v, name, self.lo, self.hi, lo_open=self.lo_open, hi_open=self.hi_open, error=error,
                            where=where)
        elif self.type is bool:
            v = check_bool(v, name, error=error, where=where)
        elif self.type is not object and not isinstance(v, self.type):
            word = _TYPE_WORDS.get(self.type, f"a {self.type.__name__}")
            raise field_error(error, True, name, where, f"must be {word}, got {v!r}")
        if self.choices is not None:
            check_choice(v, name, self.choices, error=error, where=where)
        return v

    def text(self) -> str:
        """The declared range, choices and unit in words (``in [0.0, 1.0] px``)."""
        parts = []
        if self.choices is not None:
            parts.append(f"one of {', '.join(map(str, self.choices))}")
        elif self.type in (int, float) and (self.lo is not None or self.hi is not None):
            rule = range_text(self.lo, self.hi, self.lo_open, self.hi_open)
            parts.append(rule.replace("must lie in", "in").replace("must be ", ""))
        text = " ".join(parts + ([self.unit] if self.unit else []))
        return f"{text}, or none" if self.optional and text else ("none allowed" if self.optional else text)


def _infer_type(default: Any, default_factory: Any) -> type:
    value = default if default is not MISSING else None
    if value is None and default_factory is not MISSING and isinstance(default_factory, type):
        return default_factory
    for t in (bool, int, float, str):
        if type(value) is t:
            return t
    return object


def param(default: Any = MISSING, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
          hi_open: bool = False, type: type | None = None, choices: Collection | None = None,
          optional: bool = False, each: bool = False, unit: str = "", doc: str = "", key: str | None = None,
          default_factory: Any = MISSING) -> Any:
    """A dataclass field declaring one parameter (the type inferred from the default unless
    given; ``optional`` when the default is None).

    >>> f = param(0.5, lo=0.0, hi=1.0, unit="fraction", doc="veil strength")
    >>> f.metadata["type"], f.metadata["bounds"], f.metadata["unit"], f.metadata["doc"]
    (<class 'float'>, (0.0, 1.0), 'fraction', 'veil strength')
    """
    declared_type = type or _infer_type(default, default_factory)
    if declared_type is object and (lo is not None or hi is not None):
        raise TypeError("param: give type=int or type=float for a bounded parameter")
    spec = Param(type=declared_type, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open,
                 choices=None if choices is None else tuple(choices), optional=optional or default is None,
                 each=each, unit=unit, doc=doc, key=key)
    return declared_field(spec, default, default_factory)


def declared_field(spec: Param, default: Any = MISSING, default_factory: Any = MISSING) -> Any:
    """The dataclass field carrying ``spec`` (its metadata also spells out ``type``,
    ``bounds``, ``unit`` and ``doc``)."""
    metadata = {KEY: spec, "type": spec.type, "bounds": spec.bounds, "unit": spec.unit, "doc": spec.doc}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def _spec(f: dataclasses.Field) -> Param | None:
    return f.metadata.get(KEY)


def param_of(cls: type, name: str, **changes: Any) -> Any:
    """A new field with the declaration and default of ``cls.name`` (``changes`` replace
    parts of the declaration): one parameter declared in two dataclasses is declared once.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Model(Declared):
    ...     q: float = param(5.0, lo=0.0, hi=1e6, unit="heat")
    >>> @dataclass(frozen=True)
    ... class Physics(Declared):
    ...     q: float = param_of(Model, "q")
    >>> Physics.BOUNDS == Model.BOUNDS
    True
    """
    f = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    if f is None or _spec(f) is None:
        raise ValueError(f"{cls.__name__}.{name} is not a declared parameter")
    return declared_field(dataclasses.replace(_spec(f), **changes), f.default, f.default_factory)


def validate(obj: Any, where: str | None = None) -> None:
    """Check every declared field of the dataclass instance ``obj`` (in field order), in
    the dialect of its class (see the module's doc; ``where`` locates a :class:`BadInput`
    instead of the class's own, for a value whose location only its container knows, such
    as an item of a list); with ``coerce`` store numbers back as their declared type and
    lists of ``each`` fields as tuples."""
    cls = type(obj)
    where, coerce = where or getattr(cls, "_where", None), getattr(cls, "_coerce", False)
    for f in dataclasses.fields(obj):
        spec = _spec(f)
        if spec is None:
            continue
        v = getattr(obj, f.name)
        if where is None:
            checked = spec.check(v, f"{cls.__name__}.{f.name}")
        else:
            checked = spec.check(v, spec.key or f.name, error=BadInput, where=f"{where}.{spec.key or f.name}")
        if coerce and checked is not None and checked is not v:
            object.__setattr__(obj, f.name, checked)


@functools.lru_cache(maxsize=None)
def _bounds(cls: type) -> Mapping[str, tuple]:
    return MappingProxyType({f.name: _spec(f).bounds for f in dataclasses.fields(cls)
                             if _spec(f) is not None and _spec(f).type in (int, float)})


class _ClassBounds:
    """``BOUNDS`` of a :class:`Declared` dataclass: ``name -> (lo, hi)`` of its numeric fields."""

    def __get__(self, obj: Any, owner: type) -> Mapping[str, tuple]:
        if not dataclasses.is_dataclass(owner):
            raise AttributeError(f"{owner.__name__} is not a dataclass yet")
        return _bounds(owner)


class Declared:
    """Base of a frozen parameter dataclass whose fields are declared with :func:`param`:
    ``__post_init__`` validates them, then calls :meth:`cross_check`. Class keywords:
    ``where`` (user input: raise :class:`BadInput` located at ``<where>.<field>``) and
    ``coerce`` (store numbers as their declared type)."""

    _where: ClassVar[str | None] = None
    _coerce: ClassVar[bool] = False
    BOUNDS: ClassVar[Mapping[str, tuple]] = _ClassBounds()  # type: ignore[assignment]

    def __init_subclass__(cls, *, where: str | None = None, coerce: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if where is not None:
            cls._where = where
        if coerce is not None:
            cls._coerce = coerce

    def __post_init__(self) -> None:
        validate(self)
        self.cross_check()

    @classmethod
    def mapping_of(cls, raw: Any, where: str | None = None, also: Collection[str] = ()) -> dict:
        """``raw`` (a params section; None: empty) as a new dict whose keys are this class's
        fields or ``also``: :class:`BadInput` at ``where`` (default: the class's) otherwise.

        >>> @dataclass(frozen=True)
        ... class P(Declared, where="params.yaml: p"):
        ...     n: int = param(1, lo=0)
        >>> P(**P.mapping_of({"n": 2}))
        P(n=2)
        >>> P.mapping_of({"m": 2})
        Traceback (most recent call last):
        ...
        aegisbench.errors.BadInput: params.yaml: p: unknown keys ['m']
        """
        where = where or cls._where or cls.__name__
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            raise BadInput(f"must be a mapping, got {type(raw).__name__}", where=where)
        extra = sorted(map(str, set(raw) - {f.name for f in dataclasses.fields(cls)} - set(also)))
        if extra:
            raise BadInput(f"unknown keys {extra}", where=where)
        return dict(raw)

    def cross_check(self) -> None:
        """Rules between fields (none by default); raise with :meth:`invalid`."""

    def invalid(self, name: str, message: str, *, wrong_type: bool = False) -> Exception:
        """The error of this class's dialect for field ``name`` (``Class.name message``, or
        :class:`BadInput` at ``<where>.name``)."""
        where = type(self)._where
        if where is None:
            return field_error(ValueError, wrong_type, f"{type(self).__name__}.{name}", None, message)
        return BadInput(message, where=f"{where}.{name}" if name else where)


@dataclass(frozen=True)
class ParamInfo:
    """One declared parameter as help and docs print it."""

    name: str
    type: str
    default: Any
    rule: str  # range / choices and unit in words ("in [0.0, 1.0] px")
    unit: str
    doc: str

    def line(self) -> str:
        shown = f"{type(self.default).__name__}()" if dataclasses.is_dataclass(self.default) else repr(self.default)
        default = "" if self.default is MISSING else f" = {shown}"
        rule = f", {self.rule}" if self.rule else ""
        return f"{self.name}: {self.type}{default}{rule}" + (f" -- {self.doc}" if self.doc else "")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    return f.default_factory() if f.default_factory is not MISSING else MISSING


def describe(cls: type) -> tuple[ParamInfo, ...]:
    """The declared parameters of a dataclass (class or instance), in field order."""
    out = []
    for f in dataclasses.fields(cls):
        spec = _spec(f)
        if spec is None:
            continue
        kind = spec.type.__name__ if spec.type is not object else "any"
        kind = f"list of {kind}" if spec.each else kind
        out.append(ParamInfo(f.name, kind, _default(f), spec.text(), spec.unit, spec.doc))
    return tuple(out)


def parameter_lines(cls: type) -> list[str]:
    """One line per declared parameter: ``name: type = default, range unit -- doc``."""
    return [p.line() for p in describe(cls)]



def declared_in(module: Any) -> list[type]:
    """The :class:`Declared` dataclasses defined in ``module``, in definition order."""
    return [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Declared)
            and dataclasses.is_dataclass(v) and v.__module__ == module.__name__]


def main(argv: list[str] | None = None) -> int:
    """``python -m aegisbench.schema MODULE...``: every declared parameter of the parameter
    dataclasses of the modules, with its type, default, range, unit and doc.

    >>> main(["aegisbench.corruptions.storm"])  # doctest: +ELLIPSIS
    aegisbench.corruptions.storm.RainStreaksParams
      density: float = 400.0, in [0.0, 100000.0] per 1000 x 1000 px -- streak density (ladder parameter)
    ...
    0
    """
    import importlib

    names = sys.argv[1:] if argv is None else argv
    if not names:
        sys.stderr.write("usage: python -m aegisbench.schema MODULE...  (e.g. aegisbench.corruptions.storm)\n")
        return 2
    for name in names:
        for cls in declared_in(importlib.import_module(name)):
            sys.stdout.write(f"{name}.{cls.__name__}\n" + "".join(f"  {line}\n" for line in parameter_lines(cls)))
    return 0


if __name__ == "__main__":  # run the imported module's main: its Declared is the one the dataclasses derive from
    from aegisbench.schema import main as _main

    sys.exit(_main())
