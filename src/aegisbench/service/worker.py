"""``aegisbench worker``: score queued submissions of one project, on this machine's cores or
on a Ray cluster.

A worker process checks the dataset repo once (``verify``), enqueues what a crash left
unqueued, publishes anything scored but not yet on the board, then runs firm-queue's thread
supervisor: one job thread (one submission at a time), a dispatcher that brings retries back
when their back-off has passed, a heartbeat every third of ``hosting.lease_seconds``, a reaper
(any process of the queue whose heartbeat is older than one lease is dead, and its claimed job
goes back to the queue for another worker) and a publisher, which builds the board beside the
scoring for everything scored since its last build.

``--processes N`` (N > 1) starts N such processes as fresh interpreters (never forked from a
process whose NumPy, Arrow or Polars thread pools are running) and restarts any that dies;
they die with it (``PR_SET_PDEATHSIG``). SIGTERM or Ctrl-C stops taking jobs; a job still
running when the worker exits is handed on like that of a dead worker.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
CHILD_ENV = "AEGISBENCH_WORKER_PARENT"


def _die_with_parent() -> None:
    """Under a multi-process worker: die when the parent does (Linux), at once if it already has."""
    parent = os.environ.get(CHILD_ENV)
    if parent is None or sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != int(parent):
        os._exit(1)


class Reaper(threading.Thread):
    """Prune the queue's processes silent for a whole lease and re-queue their claimed jobs."""

    def __init__(self, runtime, lease: float):
        super().__init__(name="reaper", daemon=True)
        self.runtime, self.lease = runtime, lease
        self.stop = threading.Event()

    def run(self) -> None:
        from firm._core.process import prune_dead
        from firm.queue.recovery import recover_orphaned_claims
        while not self.stop.wait(self.lease / 3):
            try:
                dead = prune_dead(self.runtime.engine, self.lease)
                if dead:
                    n = recover_orphaned_claims(self.runtime, dead)
                    log.warning("%d silent worker process(es) pruned; %d job(s) handed on", len(dead), n)
            except Exception as exc:  # noqa: BLE001 - a database hiccup: try again at the next tick
                log.warning("reaper: %s", exc)


class Publisher(threading.Thread):
    """Publishes the board beside the scoring: woken after every scored submission, it publishes
    everything scored meanwhile in one build; every ``every`` seconds it also publishes what a
    dead worker scored but never published."""

    def __init__(self, host, every: float):
        super().__init__(name="publisher", daemon=True)
        self.host, self.every = host, every
        self._wake, self.stop = threading.Event(), threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def pending(self) -> bool:
        from sqlalchemy import exists, select

        from aegisbench.service.db import submissions
        c = submissions.c
        with self.host.runtime.engine.connect() as conn:
            return conn.execute(select(exists().where(c.status == "scored", c.revision.is_(None)))).scalar()

    def publish_pending(self) -> None:
        from aegisbench.service.board import publish
        try:
            if self.pending():
                publish(self.host)
        except Exception as exc:  # noqa: BLE001 - logged; the next wake or tick tries again
            log.error("publishing the board failed: %s: %s", type(exc).__name__, exc)

    def run(self) -> None:
        while not self.stop.is_set():
            self._wake.wait(self.every)
            self._wake.clear()
            if not self.stop.is_set():
                self.publish_pending()


def _signals(stop: threading.Event) -> None:
    def handler(_signum, _frame):
        stop.set()
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def run_jobs(host, executor=None, stop: threading.Event | None = None) -> int:
    """One worker process: take jobs until ``stop`` is set (SIGTERM / SIGINT); returns 0."""
    from firm.queue.supervisor import DispatcherConfig, SupervisorConfig, ThreadSupervisor, WorkerConfig

    from aegisbench.service.board import publish
    from aegisbench.service.intake import requeue_orphans
    from aegisbench.service.jobs import configure_worker

    _die_with_parent()
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        _signals(stop)
    index = host.index  # verified here, once
    log.info("worker %d on %s: dataset %s (digest %s)", os.getpid(), host.project.root, host.project.dataset,
             index.digest[:12])
    lease = host.rules.lease_seconds
    publisher = Publisher(host, lease / 3)
    configure_worker(host, executor, publisher)
    requeue_orphans(host)
    publish(host)
    config = SupervisorConfig(
        workers=[WorkerConfig(queues=("scoring",), threads=1, poll_interval=0.2)],
        dispatchers=[DispatcherConfig(poll_interval=1.0, maintenance_interval=max(lease, 10.0))],
        alive_threshold=lease, heartbeat_interval=lease / 3, shutdown_timeout=min(30.0, lease))
    supervisor = ThreadSupervisor(host.runtime, config)
    reaper = Reaper(host.runtime, lease)
    supervisor.start()
    reaper.start()
    publisher.start()
    try:
        stop.wait()
    finally:
        reaper.stop.set()
        supervisor.stop()
        publisher.stop.set()
        publisher.wake()
        publisher.join()
        publisher.publish_pending()  # what this worker scored last goes on the board before it exits
    log.info("worker %d stopped", os.getpid())
    return 0


def run_pool(argv: list[str], processes: int) -> int:
    """``processes`` worker processes of ``argv`` (an ``aegisbench worker`` command line with
    ``--processes 1``), each restarted when it dies, until SIGTERM / SIGINT; returns 0."""
    stop = threading.Event()
    _signals(stop)
    env = dict(os.environ, **{CHILD_ENV: str(os.getpid())})
    children: dict[int, subprocess.Popen] = {}
    try:
        while not stop.is_set():
            for slot in range(processes):
                proc = children.get(slot)
                if proc is not None and proc.poll() is None:
                    continue
                if proc is not None:
                    if proc.returncode == 2:  # bad input (a refused project or database): do not loop
                        log.error("worker process %d refused to start (exit 2): stopping", proc.pid)
                        return 2
                    log.warning("worker process %d exited with %s: restarted", proc.pid, proc.returncode)
                children[slot] = subprocess.Popen(argv, env=env)
            stop.wait(0.5)
    finally:
        for proc in children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in children.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0
