"""Teams and their API tokens.

A token is ``aeg_<team id>_<secret>``: 32 random bytes (URL-safe base64) after the team's
number. It is shown once, when the team is added; the database keeps only a random salt and
SHA-256(salt + secret), compared in constant time. A revoked team's token is refused like a
wrong one (401), and nothing it sent is stored.

>>> parse_token("aeg_12_" + "A" * 43)
(12, 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA')
>>> parse_token("Bearer x") is None
True
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import unicodedata
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from aegisbench.errors import BadInput
from aegisbench.service.db import NAME_CHARS, aware, teams

_TOKEN = re.compile(r"aeg_([1-9][0-9]{0,9})_([A-Za-z0-9_-]{43})")
TEAM_NAME_CHARS = 80


@dataclass(frozen=True)
class Team:
    id: int
    name: str
    admin: bool
    created_at: object
    revoked_at: object = None


def parse_token(text: str) -> tuple[int, str] | None:
    """``(team id, secret)`` of a well-formed token, else None."""
    m = _TOKEN.fullmatch(text.strip()) if isinstance(text, str) else None
    return (int(m.group(1)), m.group(2)) if m else None


def _hash(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode("ascii")).hexdigest()


def check_team_name(name: str) -> str:
    """A team name: one line of 1 to 80 printable characters (no control, format or bidi
    characters), surrounding spaces removed."""
    if not isinstance(name, str):
        raise BadInput("must be text", where="team name")
    name = name.strip()
    if not name or len(name) > TEAM_NAME_CHARS:
        raise BadInput(f"must be 1 to {TEAM_NAME_CHARS} characters, got {len(name)}", where="team name")
    bad = [c for c in name if unicodedata.category(c)[0] in "CZ" and c != " "]
    if bad:
        raise BadInput(f"holds a control, format or separator character (U+{ord(bad[0]):04X})", where="team name")
    return name


def add_team(runtime, name: str, admin: bool = False) -> tuple[Team, str]:
    """Add team ``name``; returns the team and its token (shown once, never stored)."""
    from firm._core.clock import now_utc
    name = check_team_name(name)
    salt, secret = secrets.token_hex(16), secrets.token_urlsafe(32)
    try:
        with runtime.engine.begin() as conn:
            res = conn.execute(teams.insert().values(name=name[:NAME_CHARS], salt=salt, token_hash=_hash(salt, secret),
                                                     admin=bool(admin), created_at=now_utc()))
            team_id = res.inserted_primary_key[0]
    except IntegrityError:
        raise BadInput(f"a team named {name!r} exists already (teams keep their name; revoke it and add "
                       "another name to issue a new token)", where="team add") from None
    return Team(team_id, name, bool(admin), None), f"aeg_{team_id}_{secret}"


def revoke_team(runtime, name: str) -> Team:
    """Revoke ``name``'s token (its submissions stay on the board)."""
    from firm._core.clock import now_utc
    with runtime.engine.begin() as conn:
        row = conn.execute(select(teams).where(teams.c.name == name)).first()
        if row is None:
            raise BadInput(f"no team named {name!r}", where="team revoke")
        if row.revoked_at is None:
            conn.execute(update(teams).where(teams.c.id == row.id).values(revoked_at=now_utc()))
    return Team(row.id, row.name, row.admin, aware(row.created_at), row.revoked_at or now_utc())


def list_teams(runtime) -> list[Team]:
    with runtime.engine.connect() as conn:
        rows = conn.execute(select(teams).order_by(teams.c.id)).all()
    return [Team(r.id, r.name, r.admin, aware(r.created_at), aware(r.revoked_at)) for r in rows]


def authenticate(runtime, token: str | None) -> Team | None:
    """The live team a token belongs to, or None (missing, malformed, wrong or revoked)."""
    parsed = parse_token(token or "")
    if parsed is None:
        return None
    team_id, secret = parsed
    with runtime.engine.connect() as conn:
        row = conn.execute(select(teams).where(teams.c.id == team_id)).first()
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(_hash(row.salt, secret), row.token_hash):
        return None
    return Team(row.id, row.name, row.admin, aware(row.created_at))
