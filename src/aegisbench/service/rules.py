"""The rules of a hosted leaderboard: the ``hosting:`` section of ``params.yaml``.

Declared once, checked on load (a bad value is one line naming ``params.yaml: hosting.<field>``):

* ``phases``: a list of phases, each with a ``name``, an optional ``opens`` / ``closes`` instant
  (ISO 8601; a time without a zone is UTC), a ``daily_limit`` (accepted uploads per team per UTC
  day) and a ``total_limit`` (per team in the phase), and ``standing``: which scored submission
  stands for a team on the page, ``latest`` or the one the team ``selected`` (the latest until it
  selects one). Uploads go to the phase open now; none open: refused (403).
* Limits on what one upload may be: ``max_upload_bytes`` (the whole request, refused with 413
  before the body is read in full), ``max_files`` (parts of one upload), ``max_zip_members``,
  ``max_zip_ratio`` (bytes expanded per byte of the archive) and ``max_expanded_bytes``.
* The queue: ``lease_seconds`` (a worker that has not renewed its lease for this long is dead:
  its job goes to another worker), ``max_attempts`` (runs of one submission before a failure of
  ours is final; never charged to the team).
* The board: ``references`` (the pipeline's reference submissions, listed first and marked, as
  the pipeline's own leaderboard stage does) and ``versioning``: ``auto`` (``dvc add`` of the
  store after every new board revision when the project is a DVC repository, and a git commit of
  ``hosted/store.dvc`` when it is a git repository), ``dvc`` (the same, refused when it is not
  one) or ``none``.

>>> r = HostingRules.from_dict({"phases": [{"name": "dev", "daily_limit": 2}]})
>>> r.phases[0].daily_limit, r.phases[0].standing, r.max_attempts
(2, 'latest', 3)
>>> HostingRules.from_dict({"phases": [{"name": "dev", "standing": "best"}]})
Traceback (most recent call last):
...
aegisbench.errors.BadInput: params.yaml: hosting.phases[0].standing: must be one of ('latest', 'selected'), got 'best'
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, fields

from aegisbench.errors import BadInput
from aegisbench.schema import Declared, param, validate

STANDING = ("latest", "selected")
VERSIONING = ("auto", "dvc", "none")
_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
WHERE = "params.yaml: hosting"
_PHASE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
UTC = dt.timezone.utc


def utcnow() -> dt.datetime:
    """Now, timezone-aware UTC."""
    return dt.datetime.now(UTC)


def parse_instant(value, where: str) -> dt.datetime | None:
    """``value`` (ISO 8601 text or a YAML timestamp; no zone means UTC) as an aware UTC
    datetime; None stays None.

    >>> parse_instant("2026-12-31T23:59:59Z", "x").isoformat()
    '2026-12-31T23:59:59+00:00'
    """
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise BadInput(f"must be an ISO 8601 instant such as 2026-12-31T23:59:59Z, got {value[:40]!r}",
                           where=where) from None
    else:
        raise BadInput(f"must be an ISO 8601 instant, got {type(value).__name__}", where=where)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@dataclass(frozen=True)
class Phase(Declared):
    """One phase of the leaderboard: when uploads are taken and how many per team. Checked by
    :meth:`check`, which the :class:`HostingRules` holding it calls with the phase's place."""

    name: str = param(doc="1 to 32 lowercase letters, digits, '_' or '-'")
    opens: dt.datetime | None = param(None, doc="first instant uploads are taken (None: always open before)")
    closes: dt.datetime | None = param(None, doc="first instant uploads are refused again (None: never)")
    daily_limit: int = param(5, lo=1, hi=10_000, unit="uploads", doc="accepted uploads per team per UTC day")
    total_limit: int = param(100, lo=1, hi=1_000_000, unit="uploads", doc="accepted uploads per team in the phase")
    standing: str = param("latest", type=object, choices=STANDING, doc="which scored submission stands for a team: the latest or the one it selected")

    def __post_init__(self) -> None:
        """Nothing here: a phase's fields are checked by :meth:`check`, where the phase is known."""

    def check(self, where: str) -> None:
        if not isinstance(self.name, str) or not _PHASE_NAME.fullmatch(self.name):
            raise BadInput(f"must be 1 to 32 lowercase letters, digits, '_' or '-', got {self.name!r}",
                           where=f"{where}.name")
        validate(self, where)
        if self.opens and self.closes and self.closes <= self.opens:
            raise BadInput(f"closes ({self.closes.isoformat()}) must be after opens ({self.opens.isoformat()})",
                           where=f"{where}.closes")

    def is_open(self, now: dt.datetime) -> bool:
        return (self.opens is None or now >= self.opens) and (self.closes is None or now < self.closes)


@dataclass(frozen=True)
class HostingRules(Declared, where=WHERE):
    """Every rule and limit of a hosted leaderboard (see the module doc)."""

    phases: tuple[Phase, ...] = param((Phase("open"),), doc="the phases, one open at a time")
    max_upload_bytes: int = param(512 * 1024**2, lo=1024, hi=64 * 1024**3, unit="bytes", doc="the whole request, refused before the body is read in full")
    max_files: int = param(64, lo=2, hi=10_000, unit="files", doc="parts of one upload")
    max_zip_members: int = param(100_000, lo=1, hi=10_000_000, unit="members", doc="members of one uploaded zip")
    max_zip_ratio: float = param(100.0, lo=1.0, hi=10_000.0, unit="bytes per byte",
                                 doc="bytes expanded per byte of an uploaded zip")
    max_expanded_bytes: int = param(2 * 1024**3, lo=1024, hi=256 * 1024**3, unit="bytes",
                                    doc="bytes one upload may expand to (also each file's limit)")
    lease_seconds: float = param(300.0, lo=2.0, hi=86_400.0, unit="s", doc="a worker that has not renewed its lease for this long is dead")
    max_attempts: int = param(3, lo=1, hi=20, unit="runs", doc="runs of one submission before a failure of ours is final")
    references: tuple[str, ...] = param((), doc="the pipeline's reference submissions (results folder names), listed first")
    versioning: str = param("auto", type=object, choices=VERSIONING, doc="dvc add of the store after each board revision: auto, dvc or none")

    def cross_check(self) -> None:
        for i, ref in enumerate(self.references):
            if not isinstance(ref, str) or not _REFERENCE.fullmatch(ref):
                raise BadInput(f"must be a submission id (a results folder name), got {ref!r}",
                               where=f"{WHERE}.references[{i}]")
        if not self.phases:
            raise BadInput("declare at least one phase", where=f"{WHERE}.phases")
        names = [p.name for p in self.phases]
        for i, p in enumerate(self.phases):
            p.check(f"{WHERE}.phases[{i}]")
        if len(set(names)) != len(names):
            raise BadInput(f"phase names must differ, got {names}", where=f"{WHERE}.phases")
        ordered = sorted(self.phases, key=lambda p: p.opens or dt.datetime.min.replace(tzinfo=UTC))
        for a, b in zip(ordered, ordered[1:]):
            if a.closes is None or (b.opens is not None and b.opens < a.closes):
                raise BadInput(f"phases {a.name!r} and {b.name!r} overlap: one phase is open at a time",
                               where=f"{WHERE}.phases")

    @classmethod
    def from_dict(cls, raw) -> HostingRules:
        """The rules from the ``hosting:`` mapping (None: the defaults)."""
        if raw is None:
            return cls()
        _check_keys(raw, cls, WHERE)
        kw = {k: v for k, v in raw.items() if k != "phases"}
        if "references" in raw:
            refs = raw["references"] or ()
            if isinstance(refs, str) or not isinstance(refs, (list, tuple)):
                raise BadInput("must be a list of submission ids", where=f"{WHERE}.references")
            kw["references"] = tuple(refs)
        if "phases" in raw:
            kw["phases"] = tuple(_phase(p, f"{WHERE}.phases[{i}]") for i, p in enumerate(raw["phases"] or ()))
        return cls(**kw)

    def phase_at(self, now: dt.datetime) -> Phase | None:
        """The phase open at ``now``, or None."""
        return next((p for p in self.phases if p.is_open(now)), None)

    def closed_reason(self, now: dt.datetime) -> str:
        """Why no phase takes uploads at ``now``, in words (the next opening or the last closing)."""
        upcoming = sorted((p.opens, p.name) for p in self.phases if p.opens and p.opens > now)
        if upcoming:
            return f"submissions are closed: phase {upcoming[0][1]!r} opens at {upcoming[0][0].isoformat()}"
        ended = sorted((p.closes, p.name) for p in self.phases if p.closes and p.closes <= now)
        if ended:
            return f"submissions are closed: phase {ended[-1][1]!r} closed at {ended[-1][0].isoformat()}"
        return "submissions are closed"


def _check_keys(raw, cls, where: str) -> None:
    """BadInput unless ``raw`` is a mapping of ``cls``'s fields."""
    if not isinstance(raw, dict):
        raise BadInput("must be a mapping", where=where)
    known = {f.name for f in fields(cls)}
    extra = sorted(set(raw) - known)
    if extra:
        raise BadInput(f"unknown key(s) {extra} (known: {sorted(known)})", where=where)


def _phase(raw, where: str) -> Phase:
    _check_keys(raw, Phase, where)
    kw = dict(raw)
    for key in ("opens", "closes"):
        kw[key] = parse_instant(kw.get(key), f"{where}.{key}")
    return Phase(**kw)


def day_window(now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """The UTC day holding ``now``: ``(midnight, next midnight)``.

    >>> [t.isoformat() for t in day_window(dt.datetime(2026, 12, 6, 7, 30, tzinfo=UTC))]
    ['2026-12-06T00:00:00+00:00', '2026-12-07T00:00:00+00:00']
    """
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + dt.timedelta(days=1)


__all__ = ["HostingRules", "Phase", "STANDING", "day_window", "parse_instant", "utcnow"]
