"""Model metadata of a submission: the optional ``submission.yaml`` fields that say what the
model is (paper, code, architecture, parameters, training data, date), checked once where
they come in (``validate`` / ``evaluate``) and again where they go out (the leaderboard
reads them back from ``results/<id>/provenance.json``, which anyone can edit).

A URL is ``http`` or ``https`` with a host and no spaces (it becomes a link on the page: no
``javascript:``); a date is ``YYYY-MM-DD``; parameters a positive integer; the texts one
line each. Every field is optional; a malformed one is a problem naming the field.

>>> check_metadata({"paper": "https://arxiv.org/abs/2106.00001", "parameters": 2_600_000, "date": "2024-05-01"})
({'paper': 'https://arxiv.org/abs/2106.00001', 'parameters': 2600000, 'date': '2024-05-01'}, [])
>>> check_metadata({"code": "javascript:alert(1)", "date": "2024-13-01"})[1]
[('code', "must be an http(s) URL with a host, got 'javascript:alert(1)'"), ('date', "must be a date YYYY-MM-DD, got '2024-13-01'")]
"""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import urlsplit

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
MAX_URL = 500
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


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
            good = v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
            why = f"must be a positive integer, got {str(v)[:40]!r}"
        else:
            ok = isinstance(v, str) and v.strip() and "\n" not in v and len(v) <= MAX_TEXT
            good = v.strip() if ok else None
            why = f"must be one line of at most {MAX_TEXT} characters"
        if good is None:
            problems.append((key, why))
        else:
            out[key] = good
    return out, problems


def check_weights_sha256(value) -> str | None:
    """A recorded weights hash (64 lowercase hex digits) or None when absent; ValueError
    when present but malformed."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"weights_sha256 must be 64 lowercase hex digits, got {str(value)[:80]!r}")
    return value
