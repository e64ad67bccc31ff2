"""Accepting an upload: checked with the evaluator's own validator, stored immutably under
an id the server assigns, charged to the team's quota and queued, in that order.

1. The phase open now takes it (else 403) and the team is under its limits (else 429 naming when
   the daily limit resets) — checked once before the upload is parsed and again, under a lock on
   the team, when it is recorded, so concurrent uploads stop exactly at the limit.
2. The parts become a folder ``hosted/incoming/<tmp>/<id>/`` (:mod:`~aegisbench.service.uploads`),
   which :func:`~aegisbench.evaluation.submission.validate_submission` checks against the
   project's dataset repo — the same checks and messages as ``aegisbench validate``, with the
   server's paths taken out. A refusal stores nothing.
3. The files are made read-only and synced, and the folder renamed into ``hosted/store/submissions/``;
   then one transaction records the row (status ``queued``, charged) and its first log lines.
   Only then is the upload acknowledged. A crash before the row leaves a folder no one can see
   (removed at the next start); the same upload, sent again, is taken then.
4. The job is enqueued (firm-queue); a row left without a job by a crash in between is enqueued
   by :func:`requeue_orphans` (run by every server and worker at start).

The same content from the same team is one submission: uploading it again answers with the
existing id (not charged twice).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from aegisbench.atomic import fsync_dir
from aegisbench.errors import BadInput
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.submission import SubmissionInvalid, ValidationLimits, validate_submission
from aegisbench.hashing import json_sha256
from aegisbench.service.db import add_event, locked, naive, submissions
from aegisbench.service.project import HostedProject
from aegisbench.service.rules import Phase, day_window, utcnow
from aegisbench.service.teams import Team
from aegisbench.service.uploads import Part, UploadRefused, remove_tree, stage_upload

log = logging.getLogger(__name__)

ORPHAN_AGE_S = 60.0  # a row this old without a job, or a stored folder without a row, was left by a crash


class Refusal(Exception):
    """An upload refused with an HTTP ``status`` and one line; ``problems``: every line of
    a validation refusal (at most 50, then a count)."""

    def __init__(self, status: int, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.status, self.message, self.problems = status, message, problems or [message]


@dataclass(frozen=True)
class Accepted:
    id: str
    status: str
    duplicate: bool = False


class Host:
    """One hosted project as the server and the workers see it: its paths and rules, the
    database runtime, and the dataset index (verified once, when first needed)."""

    def __init__(self, project: HostedProject, runtime, verify: bool = True):
        self.project, self.runtime, self.verify = project, runtime, verify
        self._index: DatasetIndex | None = None
        project.make_dirs()

    @property
    def rules(self):
        return self.project.rules

    @property
    def index(self) -> DatasetIndex:
        """The dataset index; with withheld test labels, their private label repo
        (``private/labels`` of the project) is read by the scoring side only."""
        if self._index is None:
            labels = self.project.private_labels
            self._index = DatasetIndex(self.project.dataset, verify=self.verify,
                                       labels=labels if labels.is_dir() else None)
        return self._index


def new_id() -> str:
    """A fresh submission id (``sub-`` and 12 random hex digits)."""
    return f"sub-{secrets.token_hex(6)}"


def _counts(conn, team: Team, phase: Phase, now: dt.datetime) -> tuple[int, int]:
    start, end = day_window(now)
    base = select(func.count()).select_from(submissions).where(
        submissions.c.team_id == team.id, submissions.c.phase == phase.name, submissions.c.charged.is_(True))
    total = conn.execute(base).scalar_one()
    today = conn.execute(base.where(submissions.c.uploaded_at >= naive(start),
                                    submissions.c.uploaded_at < naive(end))).scalar_one()
    return total, today


def check_quota(conn, team: Team, phase: Phase, now: dt.datetime) -> None:
    """429 when the team has used its daily or total limit of ``phase``."""
    total, today = _counts(conn, team, phase, now)
    if total >= phase.total_limit:
        raise Refusal(429, f"team {team.name!r} has used its {phase.total_limit} submissions of phase "
                           f"{phase.name!r}; this limit does not reset within the phase")
    if today >= phase.daily_limit:
        reset = day_window(now)[1]
        raise Refusal(429, f"team {team.name!r} has used its {phase.daily_limit} submissions for today in phase "
                           f"{phase.name!r}; the daily limit resets at {reset.strftime('%Y-%m-%dT%H:%M:%SZ')}")


def open_phase(host: Host, now: dt.datetime | None = None) -> Phase:
    """The phase taking uploads now; 403 when none is."""
    now = now or utcnow()
    phase = host.rules.phase_at(now)
    if phase is None:
        raise Refusal(403, host.rules.closed_reason(now))
    return phase


def precheck(host: Host, team: Team) -> Phase:
    """Phase and quota, before the upload is parsed (answers early; rechecked on record)."""
    now = utcnow()
    phase = open_phase(host, now)
    with host.runtime.engine.connect() as conn:
        check_quota(conn, team, phase, now)
    return phase


def _relative(lines: list[str], folder: Path, host: Host) -> list[str]:
    """Validator lines with the server's paths taken out (``predictions.parquet:row 3 ...``)."""
    out = []
    for line in lines:
        line = line.replace(f"{folder}/", "").replace(str(folder), "submission")
        out.append(line.replace(f"{host.project.root}/", ""))
    return out


def _seal(folder: Path) -> None:
    """Make ``folder`` durable and its files read-only (0444, synced; folders synced). Folders
    stay writable by the server's user so that DVC can version the store."""
    for root, _dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = os.path.join(root, name)
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(path, 0o444)
        fsync_dir(root)


def accept_upload(host: Host, team: Team, parts: list[Part]) -> Accepted:
    """Check, store and queue one upload (see the module doc); :class:`Refusal` otherwise."""
    phase = precheck(host, team)
    sid = new_id()
    tmp = host.project.incoming / f"{sid}.{os.getpid()}.{secrets.token_hex(4)}"
    folder = tmp / sid
    try:
        tmp.mkdir(parents=True)
        try:
            _, said = stage_upload(parts, folder, team.name, host.rules)
        except UploadRefused as exc:
            raise Refusal(exc.status, str(exc)) from None
        limits = ValidationLimits(max_file_bytes=host.rules.max_expanded_bytes)
        try:
            sub = validate_submission(folder, host.index, limits, host.project.evaluation_params().warp_grid)
        except SubmissionInvalid as exc:
            lines = _relative(exc.lines(50), folder, host)
            first = lines[0] + (f" (and {exc.total - 1} more problem(s))" if exc.total > 1 else "")
            raise Refusal(400, first, lines) from None
        except BadInput as exc:
            raise Refusal(400, _relative([str(exc)], folder, host)[0]) from None
        content = json_sha256(sub.files)
        size = sum((folder / rel).stat().st_size for rel in sub.files)
        existing = _existing(host, team, content)
        if existing is not None:
            return existing
        _seal(folder)
        final = host.project.submissions / sid
        os.rename(folder, final)
        fsync_dir(host.project.submissions)
        try:
            _record(host, team, phase, sid, sub, said, content, size)
        except BaseException:
            remove_tree(final)
            raise
    except IntegrityError:  # the same content from the same team, recorded meanwhile
        existing = _existing(host, team, content)
        if existing is None:
            raise
        remove_tree(host.project.submissions / sid)
        return existing
    finally:
        remove_tree(tmp)
    enqueue(host, sid)
    return Accepted(sid, "queued")


def _existing(host: Host, team: Team, content: str) -> Accepted | None:
    """The team's submission of this content; one that ended in a failure of ours is queued
    again (still not charged)."""
    with host.runtime.engine.connect() as conn:
        row = conn.execute(select(submissions.c.id, submissions.c.status).where(
            submissions.c.team_id == team.id, submissions.c.content_sha256 == content)).first()
    if row is None:
        return None
    if row.status == "error" and retry(host, row.id, "uploaded again"):
        return Accepted(row.id, "queued", duplicate=True)
    return Accepted(row.id, row.status, duplicate=True)


def retry(host: Host, sid: str, why: str) -> bool:
    """Queue again a submission that ended in a failure of ours (``error``), with a fresh
    count of runs; False when it is not in that state."""
    with host.runtime.engine.begin() as conn:
        n = conn.execute(update(submissions).where(submissions.c.id == sid, submissions.c.status == "error")
                         .values(status="queued", attempts=0, message=None, job_id=None)).rowcount
        if n:
            add_event(conn, sid, "retry", f"queued again ({why}); still not charged")
    if n:
        enqueue(host, sid)
    return bool(n)


def _record(host: Host, team: Team, phase: Phase, sid: str, sub, said, content: str, size: int) -> None:
    now = utcnow()
    with locked(host.runtime, team.id) as conn:
        check_quota(conn, team, phase, now)
        conn.execute(submissions.insert().values(
            id=sid, team_id=team.id, phase=phase.name, uploaded_at=naive(now), content_sha256=content,
            track=sub.meta.track, name=sub.meta.name[:200], model=sub.meta.model[:200], form=sub.form,
            size_bytes=size, status="queued", charged=True, attempts=0, selected=False))
        add_event(conn, sid, "uploaded", f"accepted: track {sub.meta.track}, {sub.form} form, {len(sub.files)} "
                                         f"file(s), {size} bytes, content sha256 {content}; phase {phase.name!r}", now)
        if said is not None and str(said).strip() != team.name:
            add_event(conn, sid, "note", f"submission.yaml said team {str(said)[:80]!r}; the token's team "
                                         f"{team.name!r} is recorded", now)


def enqueue(host: Host, sid: str) -> int:
    """Queue the scoring job of ``sid`` and record its job id."""
    from aegisbench.service.jobs import score_submission
    job_id = score_submission.enqueue(sid)
    with host.runtime.engine.begin() as conn:
        conn.execute(update(submissions).where(submissions.c.id == sid).values(job_id=job_id))
        add_event(conn, sid, "queued", f"queued as job {job_id}")
    return job_id


def requeue_orphans(host: Host) -> list[str]:
    """Enqueue rows that a crash left without a job, and remove stored folders that a crash
    left without a row (both older than a minute) and stale incoming folders."""
    from firm._core.clock import now_utc
    cutoff = now_utc() - dt.timedelta(seconds=ORPHAN_AGE_S)
    with host.runtime.engine.connect() as conn:
        ids = [r.id for r in conn.execute(select(submissions.c.id).where(
            submissions.c.status == "queued", submissions.c.job_id.is_(None), submissions.c.uploaded_at < cutoff))]
        known = {r.id for r in conn.execute(select(submissions.c.id))}
    for sid in ids:
        log.warning("submission %s has no job (a crash after it was recorded): queued now", sid)
        enqueue(host, sid)
    for root in (host.project.submissions, host.project.incoming):
        for entry in sorted(root.iterdir()) if root.is_dir() else ():
            if entry.name in known or time.time() - entry.lstat().st_mtime < ORPHAN_AGE_S:
                continue
            log.warning("removing %s: an upload that was never recorded", entry)
            remove_tree(entry)
    return ids


def select_submission(host, team_id: int, sid: str) -> bool:
    """Make ``sid`` (a scored submission of the team) the one that stands for its track, and
    queue a board publication; False when it is not such a submission."""
    with host.runtime.engine.begin() as conn:
        row = conn.execute(select(submissions.c.track, submissions.c.status).where(
            submissions.c.id == sid, submissions.c.team_id == team_id)).first()
        if row is None or row.status != "scored":
            return False
        conn.execute(update(submissions).where(submissions.c.team_id == team_id, submissions.c.track == row.track)
                     .values(selected=submissions.c.id == sid))
        add_event(conn, sid, "selected", "selected by the team to stand for its track")
    from aegisbench.service.jobs import publish_board
    publish_board.enqueue()
    return True

