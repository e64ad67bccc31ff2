"""Field validation, once: is it a number / an integer / a flag, does it lie in its declared
range, is it one of the choices. A leaf (imports only numpy and :mod:`aegisbench.errors`).

Parameter dataclasses declare each parameter once, in its field (:func:`aegisbench.schema.param`:
type, bounds, unit, doc), and derive their one ``__post_init__`` from
:class:`aegisbench.schema.Declared`, which checks the fields with these functions.
``error`` picks the exception:
``ValueError`` (programming input; a type problem raises ``TypeError``) or
:class:`~aegisbench.errors.BadInput` (user input; ``where`` is the value's location:
file and field, or a CLI flag).

>>> check_int(3, "workers", lo=1)
3
>>> check_float(0.5, "a", 0.0, 1.0)
0.5
>>> check_int(True, "workers", lo=1)
Traceback (most recent call last):
...
aegisbench.fields.FieldTypeError: workers must be an integer, got True
>>> check_float(2.0, "a", 0.0, 1.0, error=BadInput, where="params.yaml: warp.a")
Traceback (most recent call last):
...
aegisbench.errors.BadInput: params.yaml: warp.a: must lie in [0.0, 1.0], got 2.0
"""

from __future__ import annotations

import argparse

import difflib
import math
from collections.abc import Collection
from urllib.parse import urlsplit
from typing import Any

import numpy as np

from aegisbench.errors import BadInput

_INTS = (int, np.integer)
_NUMBERS = (int, float, np.integer, np.floating)


def is_int(v: object) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(v, _INTS) and not isinstance(v, (bool, np.bool_))


def is_number(v: object) -> bool:
    """A real number (Python or numpy int/float), not a bool; NaN and inf count."""
    return isinstance(v, _NUMBERS) and not isinstance(v, (bool, np.bool_))


def is_finite_number(v: object) -> bool:
    return is_number(v) and math.isfinite(v)


class FieldError(ValueError):
    """A field value out of its range; ``field`` is the field, ``detail`` the message
    without it (to re-raise as :class:`BadInput` naming a file and field)."""

    def __init__(self, label: str, detail: str, field: str | None = None):
        self.label, self.detail, self.field = label, detail, field or label
        super().__init__(f"{label} {detail}")


class FieldTypeError(FieldError, TypeError):
    """A field value of the wrong type (a ``TypeError`` and a :class:`FieldError`)."""


def field_error(error: type, wrong_type: bool, name: str, where: str | None, message: str) -> Exception:
    """``BadInput`` located at ``where`` (the full location of the value: file and field,
    or a CLI flag; ``name`` when not given); ``ValueError`` gives a :class:`FieldError`
    (:class:`FieldTypeError` for a wrong type) with ``name`` leading the message."""
    if error is BadInput:
        return BadInput(message, where=where or name)
    if error is ValueError:
        return (FieldTypeError if wrong_type else FieldError)(name, message, name.rpartition(".")[2])
    return error(f"{name} {message}")


def range_text(lo, hi, lo_open: bool, hi_open: bool, integer: bool = False) -> str:
    """``must lie in [lo, hi]`` (or ``must be [an integer] >= lo`` with one bound)."""
    kind = "an integer " if integer else ""
    if hi is None and lo is not None:
        return f"must be {kind}{'>' if lo_open else '>='} {lo}"
    if lo is None and hi is not None:
        return f"must be {kind}{'<' if hi_open else '<='} {hi}"
    if lo is None:
        return f"must be {kind}finite".rstrip()
    return f"must lie in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"


def _in_range(v, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if lo is not None and (v < lo or (lo_open and v == lo)):
        return False
    return not (hi is not None and (v > hi or (hi_open and v == hi)))


def check_int(v: Any, name: str, lo: int | None = None, hi: int | None = None, *,
              error: type = ValueError, where: str | None = None) -> int:
    """``v`` as an int, refusing bools, non-integers and values outside ``[lo, hi]``."""
    if not is_int(v):
        raise field_error(error, True, name, where, f"must be an integer, got {v!r}")
    if not _in_range(v, lo, hi, False, False):
        raise field_error(error, False, name, where, f"{range_text(lo, hi, False, False, True)}, got {v}")
    return int(v)


def check_float(v: Any, name: str, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False, error: type = ValueError,
                where: str | None = None) -> float:
    """``v`` as a float: a finite number (bools refused) inside the range; an open end
    excludes its bound."""
    if not is_number(v):
        raise field_error(error, True, name, where, f"must be a number, got {v!r}")
    if not math.isfinite(v) or not _in_range(v, lo, hi, lo_open, hi_open):
        raise field_error(error, False, name, where, f"{range_text(lo, hi, lo_open, hi_open)}, got {v}")
    return float(v)


def check_bool(v: Any, name: str, *, error: type = ValueError, where: str | None = None) -> bool:
    if not isinstance(v, bool):
        raise field_error(error, True, name, where, f"must be true or false, got {v!r}")
    return v


def did_you_mean(value: Any, choices: Collection) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to a mistyped ``value``, else ``""``.

    >>> did_you_mean("flders", ("hash", "folders", "lists")), did_you_mean("zzz", ("hash",))
    (" (did you mean 'folders'?)", '')
    """
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [str(c) for c in choices], n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choice(v: Any, name: str, choices: Collection, *, error: type = ValueError,
                 where: str | None = None) -> Any:
    """``v`` if it is one of ``choices``; the message names the closest one.

    >>> check_choice("yolo", "format", ("voc", "yolo"))
    'yolo'
    >>> check_choice("ylo", "format", ("voc", "yolo"))
    Traceback (most recent call last):
    ...
    aegisbench.fields.FieldError: format must be one of ('voc', 'yolo'), got 'ylo' (did you mean 'yolo'?)
    """
    if v not in choices:
        raise field_error(error, False, name, where, f"must be one of {tuple(choices)}, got {v!r}{did_you_mean(v, choices)}")
    return v


def choices_metavar(choices: Collection) -> str:
    """The metavar that shows an option's choices in ``--help`` (``{voc,yolo}``), for options
    checked with :func:`check_choice` rather than argparse's ``choices``.

    >>> choices_metavar(("voc", "yolo"))
    '{voc,yolo}'
    """
    return "{" + ",".join(map(str, choices)) + "}"


class DeprecatedAlias(argparse.Action):
    """A former name of an option: hidden from the help, sets the same value as the
    canonical option, and the command logs one warning naming the new flag."""

    def __init__(self, option_strings, dest, canonical: str, **kwargs) -> None:
        kwargs.update(help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kwargs)
        self.canonical = canonical

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        used = getattr(namespace, "deprecated_flags", None) or []
        namespace.deprecated_flags = [*used, (option_string, self.canonical)]


def deprecated_alias(p: argparse.ArgumentParser, old: str, new: str) -> None:
    """Keep ``old`` working as a hidden alias of the already-added option ``new``."""
    target = p._option_string_actions[new]
    p.add_argument(old, action=DeprecatedAlias, dest=target.dest, canonical=new, type=target.type,
                   metavar=target.metavar)


#: longest URL a submitter or a source may give (characters)
MAX_URL = 500


def check_url(value) -> str | None:
    """``value`` when it is an http(s) URL with a host (no spaces, at most 500 chars), else None."""
    if not isinstance(value, str) or len(value) > MAX_URL or any(c.isspace() for c in value):
        return None
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        return None
    return value if parts.scheme in ("http", "https") and host and "." in host.strip(".") else None
