"""The hosted leaderboard's database: teams, submissions and their log, beside the job queue.

One database holds everything, so a submission row and its queue job live and die together:
SQLite in WAL mode inside the project (the embedded default, ``hosted/queue.sqlite3``) or
PostgreSQL by URL (``postgresql://user@host/db``) for a server and workers on several
machines. The queue is firm-queue's (a maintained port of Rails' Solid Queue: ``BEGIN
IMMEDIATE`` claims on SQLite, ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, process heartbeats,
orphaned claims re-queued); its engine settings are used unchanged except that SQLite
commits with ``synchronous=FULL``: an acknowledged upload survives a power cut, not only a
crash.

Times are stored as naive UTC (firm-queue's convention) and handed out aware.

>>> naive(aware(dt.datetime(2026, 1, 2, 3, 4))).isoformat()
'2026-01-02T03:04:00'
"""

from __future__ import annotations

import datetime as dt
import logging
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (BigInteger, Boolean, Column, DateTime, Engine, ForeignKey, Index, Integer, MetaData, String,
                        Table, Text, UniqueConstraint, event)
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

UTC = dt.timezone.utc
metadata = MetaData()
#: one-line fields of a submission row (the long text goes to ``events``)
NAME_CHARS = 200

teams = Table(
    "aegis_teams", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(NAME_CHARS), nullable=False, unique=True),
    Column("salt", String(64), nullable=False),
    Column("token_hash", String(64), nullable=False),
    Column("admin", Boolean, nullable=False, default=False),
    Column("created_at", DateTime, nullable=False),
    Column("revoked_at", DateTime),
)

submissions = Table(
    "aegis_submissions", metadata,
    Column("id", String(64), primary_key=True),
    Column("team_id", Integer, ForeignKey("aegis_teams.id"), nullable=False),
    Column("phase", String(32), nullable=False),
    Column("uploaded_at", DateTime, nullable=False),
    Column("content_sha256", String(64), nullable=False),
    Column("track", String(32), nullable=False),
    Column("name", String(NAME_CHARS), nullable=False),
    Column("model", String(NAME_CHARS), nullable=False),
    Column("form", String(16), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    # queued -> running -> scored | failed (the submission's fault: charged) | error (ours: not charged)
    Column("status", String(16), nullable=False),
    Column("charged", Boolean, nullable=False, default=True),
    Column("message", Text),
    Column("attempts", Integer, nullable=False, default=0),
    Column("runner", String(128)),
    Column("lease_until", DateTime),
    Column("job_id", BigInteger),
    Column("scored_at", DateTime),
    Column("selected", Boolean, nullable=False, default=False),
    Column("dataset_digest", String(64)),
    Column("evaluator_version", String(32)),
    Column("revision", Integer),
    UniqueConstraint("team_id", "content_sha256", name="uq_aegis_submission_content"),
    Index("ix_aegis_submissions_team", "team_id", "phase", "uploaded_at"),
    Index("ix_aegis_submissions_status", "status"),
)

events = Table(
    "aegis_events", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("submission_id", String(64), ForeignKey("aegis_submissions.id"), nullable=False),
    Column("at", DateTime, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("text", Text, nullable=False),
    Index("ix_aegis_events_submission", "submission_id", "id"),
)

STATUSES = ("queued", "running", "scored", "failed", "error")
FINAL = ("scored", "failed", "error")


def naive(moment: dt.datetime) -> dt.datetime:
    """An aware datetime as naive UTC (how the database stores it)."""
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def aware(moment: dt.datetime | None) -> dt.datetime | None:
    """A stored naive-UTC datetime as an aware one."""
    return None if moment is None else moment.replace(tzinfo=UTC)


def _full_sync(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # after firm's pragmas (WAL, busy timeout, NORMAL)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=FULL")
        cur.close()


def open_database(url: str):
    """Configure firm-queue's process runtime on ``url`` and create every table that is
    missing (ours and the queue's); returns the runtime (``.engine``, ``.dialect``).
    BadInput naming the URL (password hidden) when the database cannot be reached."""
    from firm._core.database import create_engine_for
    from firm.queue import configure
    from firm.queue import schema as queue_schema
    from sqlalchemy.engine import make_url

    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - any parse failure is the user's URL
        raise BadInput("not a database URL (sqlite:///PATH or postgresql://USER@HOST/DB)", where="--db") from None
    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = create_engine_for(url, pool_size=8, max_overflow=16)
    except ImportError as exc:
        raise BadInput(str(exc), where=f"--db {shown}") from None
    if engine.dialect.name == "sqlite":
        _full_sync(engine)
    elif engine.dialect.name != "postgresql":
        raise BadInput(f"database kind {engine.dialect.name!r} is not supported (sqlite or postgresql)",
                       where=f"--db {shown}")
    runtime = configure(engine=engine)
    for attempt in range(3):  # a server and a worker starting together may race to create the tables
        try:
            metadata.create_all(engine)
            queue_schema.create_all(engine)
            break
        except (OperationalError, ProgrammingError, DBAPIError) as exc:
            if attempt == 2 or getattr(exc, "connection_invalidated", False) or _unreachable(exc):
                raise BadInput(f"cannot open the database: {str(exc.orig).strip().splitlines()[0]}",
                               where=f"--db {shown}") from None
    return runtime


def _unreachable(exc: Exception) -> bool:
    text = str(getattr(exc, "orig", exc)).lower()
    return any(s in text for s in ("connection refused", "could not connect", "unable to open", "authentication",
                                   "does not exist", "no such host", "name or service"))


@contextmanager
def locked(runtime, team_id: int | None = None):
    """A write transaction that serializes with every other writer of this team's rows:
    ``BEGIN IMMEDIATE`` on SQLite, the team row locked ``FOR UPDATE`` on PostgreSQL."""
    from sqlalchemy import select
    with runtime.dialect.begin_claim_tx(runtime.engine) as conn:
        if team_id is not None:
            conn.execute(runtime.dialect.with_row_lock(select(teams.c.id).where(teams.c.id == team_id)))
        yield conn


def add_event(conn, submission_id: str, kind: str, text: str, at: dt.datetime | None = None) -> None:
    """Append one line to a submission's log (cut to 4,000 characters)."""
    from firm._core.clock import now_utc
    conn.execute(events.insert().values(submission_id=submission_id, at=naive(at) if at else now_utc(),
                                        kind=kind[:32], text=text[:4000]))
