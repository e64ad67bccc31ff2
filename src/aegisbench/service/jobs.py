"""The queue's jobs (firm-queue): ``score_submission`` and ``publish_board``, and the worker
process's settings they run with.

A job is enqueued by the server (:func:`aegisbench.service.intake.enqueue`, a team's selection)
and run by ``aegisbench worker``, which calls :func:`configure_worker` first: the project its
jobs score, the executor (local, or a Ray cluster) and its publisher thread.
"""

from __future__ import annotations

from firm.queue import job

from aegisbench.service.board import publish
from aegisbench.service.scoring import run

_WORKER: dict = {}


def configure_worker(host, executor=None, publisher=None) -> None:
    """Tell this process which project its jobs score, on which executor, and which publisher
    thread publishes the board (None: a job publishes it itself before it ends)."""
    _WORKER.update(host=host, executor=executor, publisher=publisher)


def _host():
    host = _WORKER.get("host")
    if host is None:
        raise RuntimeError("the queue's jobs run in `aegisbench worker` only (no project configured)")
    return host


@job(queue="scoring", attempts=50, backoff=2.0)
def score_submission(submission_id: str) -> None:
    """Score ``submission_id`` of the worker's project (:func:`aegisbench.service.scoring.run`)."""
    run(_host(), submission_id, _WORKER.get("executor"), _WORKER.get("publisher"))


@job(queue="scoring", attempts=50, backoff=2.0)
def publish_board() -> None:
    """Publish the board (after a team selected another standing submission)."""
    publish(_host())
