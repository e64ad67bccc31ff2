"""The worker's job (:func:`aegisbench.service.jobs.score_submission`): score one stored
submission exactly once, then publish the board.

A run (:func:`run`) first **claims** the submission: one
conditional update moves it from ``queued`` to ``running`` (or takes over a ``running`` one
whose lease has expired: its worker died), records this runner and a lease of
``hosting.lease_seconds``, which a thread renews every third of it. Two runs of the same job
can therefore never score at once, and a worker killed mid-scoring is replaced: firm-queue
prunes its process once its heartbeat is older than the lease and hands the job to another
worker, whose claim takes over.

The run scores with the evaluator's own code (:func:`~aegisbench.evaluation.submission.validate_submission`,
the track's ``score``, :func:`~aegisbench.evaluation.results.write_results` into
``hosted/store/results/<id>/``, swapped in whole) on the project's settings, then:

* the submission's fault (it fails validation or scoring): ``failed``, its message shown, still
  charged to the team;
* our fault (any other exception: out of disk, out of memory, a bug, a lost lock): back to
  ``queued`` and raised, so firm-queue retries it with back-off; after ``hosting.max_attempts``
  runs it is ``error``, refunded (not charged) and shown as ours;
* success: ``scored`` (only if this run still holds the claim), then the board is published
  (:func:`aegisbench.service.board.publish`): by the worker's publisher thread, beside the next
  scoring, together with whatever else was scored meanwhile.

Every log line of the evaluator during the run becomes a line of the submission's log.
``AEGISBENCH_TEST_PAUSE_SCORING=SECONDS`` sleeps once after the claim, so that tests can kill
a worker mid-scoring; it is for tests only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import socket
import threading
import time
from contextlib import ExitStack

from sqlalchemy import select, update

from aegisbench.atomic import clean_leftovers, output_lock
from aegisbench.errors import BadInput, printable
from aegisbench.evaluation.evaluator import check_identity, evaluate
from aegisbench.evaluation.results import write_results
from aegisbench.evaluation.submission import SubmissionInvalid, ValidationLimits, validate_submission
from aegisbench.service.db import FINAL, add_event, submissions

log = logging.getLogger(__name__)

PAUSE_ENV = "AEGISBENCH_TEST_PAUSE_SCORING"
MAX_LOG_LINES = 200

class SubmissionFault(Exception):
    """The submission cannot be scored: charged, and its message shown to the team."""


class Lease:
    """This run's claim on a submission, renewed by a thread until :meth:`stop`."""

    def __init__(self, host, sid: str):
        self.host, self.sid = host, sid
        self.runner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.seconds = host.rules.lease_seconds
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _until(self):
        from firm._core.clock import now_utc
        return now_utc() + dt.timedelta(seconds=self.seconds)

    def claim(self) -> bool:
        from firm._core.clock import now_utc
        c = submissions.c
        with self.host.runtime.engine.begin() as conn:
            done = conn.execute(update(submissions).where(
                c.id == self.sid, (c.status == "queued") | ((c.status == "running") & (c.lease_until < now_utc())))
                .values(status="running", runner=self.runner, lease_until=self._until(), attempts=c.attempts + 1))
            if done.rowcount:
                add_event(conn, self.sid, "started", f"scoring on {self.runner}")
        if done.rowcount:
            self._thread = threading.Thread(target=self._renew, name=f"lease-{self.sid}", daemon=True)
            self._thread.start()
        return bool(done.rowcount)

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                with self.host.runtime.engine.begin() as conn:
                    n = conn.execute(update(submissions).where(submissions.c.id == self.sid,
                                                               submissions.c.runner == self.runner)
                                     .values(lease_until=self._until())).rowcount
            except Exception as exc:  # noqa: BLE001 - a database hiccup: try again at the next tick
                log.warning("lease of %s not renewed: %s", self.sid, exc)
                continue
            if not n:
                self.lost = True
                log.warning("lease of %s lost: another worker took it over", self.sid)
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def finish(self, **values) -> bool:
        """Set ``values`` on the row if this run still holds the claim; returns whether it did."""
        with self.host.runtime.engine.begin() as conn:
            n = conn.execute(update(submissions).where(submissions.c.id == self.sid,
                                                       submissions.c.runner == self.runner)
                             .values(runner=None, lease_until=None, **values)).rowcount
            if n and values.get("message"):
                add_event(conn, self.sid, values["status"], values["message"])
        return bool(n)


class LogLines(logging.Handler):
    """The evaluator's log records of one run, as plain lines (at most :data:`MAX_LOG_LINES`)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.dropped = 0
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if threading.get_ident() != self._thread:
            return
        if len(self.lines) >= MAX_LOG_LINES:
            self.dropped += 1
            return
        self.lines.append(printable(f"{record.levelname} {record.name}: {record.getMessage()}", 500))


def _row(host, sid: str):
    with host.runtime.engine.connect() as conn:
        return conn.execute(select(submissions).where(submissions.c.id == sid)).first()


def score(host, sid: str, executor=None) -> dict:
    """Validate and score the stored submission ``sid`` into ``hosted/store/results/<sid>/``;
    returns its provenance. :class:`SubmissionFault` for the submission's problems."""
    project = host.project
    params = project.evaluation_params()
    folder = project.submissions / sid
    try:
        sub = validate_submission(folder, host.index, ValidationLimits(max_file_bytes=host.rules.max_expanded_bytes),
                                  params.warp_grid)
    except SubmissionInvalid as exc:
        raise SubmissionFault("; ".join(exc.lines(5)).replace(f"{folder}/", "")) from None
    out = project.hosted_results / sid
    with ExitStack() as stack:
        deadline = time.monotonic() + host.rules.lease_seconds
        while True:  # a run whose claim expired may still be writing: wait for it (past the lease: ours, retried)
            try:
                stack.enter_context(output_lock(out))
                break
            except BadInput:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        clean_leftovers(out)
        check_identity(sub, project.hosted_results)
        try:
            evaluation = evaluate(sub, host.index, params, progress=False, executor=executor)
        except BadInput as exc:
            raise SubmissionFault(str(exc).replace(f"{folder}/", "")) from None
        written = write_results(evaluation, project.hosted_results)
    return json.loads((written / "provenance.json").read_text(encoding="utf-8"))


def run(host, sid: str, executor=None, publisher=None) -> str:
    """One run of the job for ``sid`` (sources scored on ``executor``; the board published by
    ``publisher``, a thread to wake, or here when None); returns the submission's status afterwards."""
    row = _row(host, sid)
    if row is None:
        log.warning("job for unknown submission %s: nothing to do", sid)
        return "absent"
    if row.status in FINAL:
        if row.status == "scored" and row.revision is None:
            _publish(host)  # scored by a run that died before publishing
        return row.status
    if _exhausted(host, row):
        return "error"
    lease = Lease(host, sid)
    if not lease.claim():
        current = _row(host, sid)
        if current.status in FINAL:
            return current.status
        raise RuntimeError(f"submission {sid} is being scored by {current.runner} (lease until "
                           f"{current.lease_until}); retried later")
    capture = LogLines()
    logging.getLogger("aegisbench").addHandler(capture)
    t0 = time.monotonic()
    values, ours = {}, None
    try:
        pause = os.environ.get(PAUSE_ENV)
        if pause:
            time.sleep(float(pause))
        prov = score(host, sid, executor)
        values = dict(status="scored", scored_at=_now(), dataset_digest=prov["dataset_digest"],
                      evaluator_version=prov["evaluator_version"], message=None)
    except SubmissionFault as exc:
        values = dict(status="failed", message=printable(str(exc), 2000))
    except BaseException as exc:  # noqa: BLE001 - every other failure is ours
        ours = exc
    finally:
        lease.stop()
        logging.getLogger("aegisbench").removeHandler(capture)
        _save_log(host, sid, capture, time.monotonic() - t0)
    if ours is not None:
        return _ours(host, lease, ours)
    if not lease.finish(**values):
        log.warning("submission %s: the claim was taken over while scoring; this run's outcome is dropped", sid)
        return _row(host, sid).status
    log.info("submission %s: %s in %.1f s", sid, values["status"], time.monotonic() - t0)
    if values["status"] == "scored":
        if publisher is not None:
            publisher.wake()  # the board is built beside the next scoring, for everything scored meanwhile
        else:
            _publish(host)
    return values["status"]


def _now():
    from firm._core.clock import now_utc
    return now_utc()


def _publish(host) -> None:
    from aegisbench.service.board import publish
    publish(host)


def _exhausted(host, row) -> bool:
    """Give up (``error``, not charged) on a submission whose every run so far ended without an
    outcome (its workers were lost) once ``max_attempts`` runs have started."""
    if row.attempts < host.rules.max_attempts or (row.status == "running" and row.lease_until >= _now()):
        return False
    with host.runtime.engine.begin() as conn:
        conn.execute(update(submissions).where(submissions.c.id == row.id,
                                               submissions.c.status.in_(("queued", "running")))
                     .values(status="error", charged=False, runner=None, lease_until=None,
                             message=f"not scored after {row.attempts} runs that ended without a result (worker "
                                     "lost each time): a failure of ours, not charged"))
        add_event(conn, row.id, "error", "given up after repeated lost workers; not charged")
    return True


def _ours(host, lease: Lease, exc: BaseException) -> str:
    """A failure of ours: back to the queue and raised (firm-queue retries with back-off), or,
    after ``max_attempts`` runs, ``error`` and refunded."""
    attempts = _row(host, lease.sid).attempts
    stopping = isinstance(exc, (KeyboardInterrupt, SystemExit))
    why = printable(f"{type(exc).__name__}: {exc}", 1000)
    if attempts >= host.rules.max_attempts and not stopping:
        lease.finish(status="error", charged=False,
                     message=f"a failure of ours after {attempts} run(s), not charged: {why}")
        log.error("submission %s: failure of ours, given up: %s", lease.sid, why)
        return "error"
    lease.finish(status="queued", message=f"a failure of ours, retried (run {attempts} of "
                                          f"{host.rules.max_attempts}; not charged): {why}")
    raise exc


def _save_log(host, sid: str, capture: LogLines, seconds: float) -> None:
    try:
        with host.runtime.engine.begin() as conn:
            for line in capture.lines:
                add_event(conn, sid, "log", line)
            if capture.dropped:
                add_event(conn, sid, "log", f"... {capture.dropped} more log line(s) not kept")
            add_event(conn, sid, "ran", f"run took {seconds:.1f} s")
    except Exception as exc:  # noqa: BLE001 - the log must not hide the outcome
        log.warning("submission %s: log not saved: %s", sid, exc)
