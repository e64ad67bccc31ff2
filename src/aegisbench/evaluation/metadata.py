"""Model metadata of a submission: the optional ``submission.yaml`` fields that say what the
model is (paper, code, architecture, parameters, training data, date), checked once where
they come in (``validate`` / ``evaluate``) and again where they go out (the leaderboard
reads them back from ``results/<id>/provenance.json``, which anyone can edit).

A URL is ``http`` or ``https`` with a host and no spaces (it becomes a link on the page: no
``javascript:``); a date is ``YYYY-MM-DD``; parameters a positive integer of at most
:data:`MAX_PARAMETERS`; the texts one line each, with no control or bidirectional-override
character (:func:`text_problem`, which the required fields of ``submission.yaml`` go through
too). Every field is optional; a malformed one is a problem naming the field.

>>> check_metadata({"paper": "https://arxiv.org/abs/2106.00001", "parameters": 2_600_000, "date": "2024-05-01"})
({'paper': 'https://arxiv.org/abs/2106.00001', 'parameters': 2600000, 'date': '2024-05-01'}, [])
>>> check_metadata({"code": "javascript:alert(1)", "date": "2024-13-01"})[1]
[('code', "must be an http(s) URL with a host, got 'javascript:alert(1)'"), ('date', "must be a date YYYY-MM-DD, got '2024-13-01'")]
>>> text_problem("Team\u202eevil", 80)
'holds a control or bidirectional-override character (U+202E): write plain text'
>>> text_problem("x" * 81, 80)
'is 81 characters long, more than the limit of 80'
"""

from __future__ import annotations

import datetime as dt
import re

from aegisbench.fields import check_url
from aegisbench.vocab import REQUIRED_FIELDS

#: field -> what it holds (the order is the page's column order)
METADATA_FIELDS = {
    "paper": "URL of the paper that describes the model",
    "code": "URL of the code that trains or runs it",
    "architecture": "architecture, one line (e.g. YOLO11n, Faster R-CNN R50-FPN)",
    "parameters": "number of trainable parameters, a positive integer",
    "training_data": "what it was trained on, one line",
    "date": "date of the model or submission, YYYY-MM-DD",
}
URL_FIELDS = ("paper", "code")
MAX_TEXT = 300
#: the most trainable parameters a model may declare (ten trillion)
MAX_PARAMETERS = 10**13
#: longest value of a required field of submission.yaml (characters); ``description`` may hold line breaks
MAX_FIELD_CHARS = 200
FIELD_CHARS = {"description": 2000, "dataset_version": 40, "dataset_digest": 64}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: C0/C1 controls, line and paragraph separators, bidirectional marks, embeddings, overrides and isolates
_UNSAFE_TEXT = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def text_problem(value: str, max_chars: int, multiline: bool = False) -> str | None:
    """Why ``value`` is not acceptable submitter text (None: it is): longer than ``max_chars``,
    or holding a control or bidirectional-override character (newlines and tabs are allowed
    in ``multiline`` text)."""
    if len(value) > max_chars:
        return f"is {len(value)} characters long, more than the limit of {max_chars}"
    for c in _UNSAFE_TEXT.findall(value):
        if not (multiline and c in "\n\t"):
            return f"holds a control or bidirectional-override character (U+{ord(c):04X}): write plain text"
    return None


def check_date(value) -> str | None:
    """``value`` as ``YYYY-MM-DD`` when it is a real calendar date (a YAML date too), else None."""
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if not isinstance(value, str) or not _DATE.match(value):
        return None
    try:
        return dt.date.fromisoformat(value).isoformat()
    except ValueError:
        return None


#: most entries of a submission's ``class_ids`` map
MAX_CLASSES = 1000


def check_classes(value) -> tuple[dict[int, str] | None, str | None]:
    """The ``class_ids`` map of ``submission.yaml`` (``{0: person}``: the class ids its YOLO
    lines or COCO ``category_id`` values use, and their names): ``(map, None)``, ``(None, None)``
    when absent, ``(None, problem)`` when malformed.

    >>> check_classes({0: "person", 3: "car"})
    ({0: 'person', 3: 'car'}, None)
    >>> check_classes({"zero": "person"})[1]
    "must map class ids (non-negative integers) to names, got key 'zero'"
    """
    if value is None:
        return None, None
    if not isinstance(value, dict) or not value or len(value) > MAX_CLASSES:
        return None, f"must be a mapping of 1 to {MAX_CLASSES} class ids to names, e.g. {{0: person}}"
    out = {}
    for k, v in value.items():
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k < 2**31:
            return None, f"must map class ids (non-negative integers) to names, got key {str(k)[:40]!r}"
        if not isinstance(v, str) or text_problem(v, 80) or not v.strip():
            return None, f"class {k}: the name must be one line of plain text of at most 80 characters"
        out[k] = v
    return out, None


def check_required(raw: dict) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The required fields of ``submission.yaml`` (:data:`~aegisbench.vocab.REQUIRED_FIELDS`) as
    text: ``(acceptable values, [(field, problem), ...])``.

    >>> check_required({"name": "x" * 201})[1][0]
    ('name', 'is 201 characters long, more than the limit of 200')
    """
    vals, problems = {}, []
    for key in REQUIRED_FIELDS:
        v = raw.get(key)
        if v is None or (isinstance(v, str) and not v.strip()):
            problems.append((key, "missing or empty"))
        elif not isinstance(v, (str, int, float)) or isinstance(v, bool) or (isinstance(v, int) and abs(v) > 10**40):
            problems.append((key, f"must be a string, got {type(v).__name__}"))
        else:
            text = str(v).strip()
            why = text_problem(text, FIELD_CHARS.get(key, MAX_FIELD_CHARS), multiline=key == "description")
            if why:
                problems.append((key, why))
            else:
                vals[key] = text
    return vals, problems


def check_metadata(raw: dict) -> tuple[dict, list[tuple[str, str]]]:
    """The metadata fields of ``raw`` (a submission.yaml or provenance mapping), checked:
    ``(clean values, [(field, problem), ...])``; absent or null fields are left out."""
    out, problems = {}, []
    for key in METADATA_FIELDS:
        v = raw.get(key)
        if v is None:
            continue
        if key in URL_FIELDS:
            good = check_url(v)
            why = f"must be an http(s) URL with a host, got {str(v)[:80]!r}"
        elif key == "date":
            good = check_date(v)
            why = f"must be a date YYYY-MM-DD, got {str(v)[:40]!r}"
        elif key == "parameters":
            good = v if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_PARAMETERS else None
            why = f"must be a positive integer of at most {MAX_PARAMETERS:.0e}, got {_short(v)}"
        else:
            ok = isinstance(v, str) and v.strip() and text_problem(v.strip(), MAX_TEXT) is None
            good = v.strip() if ok else None
            why = (f"must be one line of at most {MAX_TEXT} characters" if not isinstance(v, str) or not v.strip()
                   else text_problem(v.strip(), MAX_TEXT))
        if good is None:
            problems.append((key, why))
        else:
            out[key] = good
    return out, problems


def _short(v) -> str:
    """A value for a message: at most 40 characters (an integer of 400 digits is summarised)."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**30:
        return f"an integer of about {int(abs(v).bit_length() * 0.30103) + 1} digits"
    return repr(str(v)[:40])


def check_weights_sha256(value) -> str | None:
    """A recorded weights hash (64 lowercase hex digits) or None when absent; ValueError
    when present but malformed."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"weights_sha256 must be 64 lowercase hex digits, got {str(value)[:80]!r}")
    return value
