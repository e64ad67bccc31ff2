"""Where independent units of work run: this machine's processes or a Ray cluster.

An :class:`Executor` names the engine (``local`` or ``ray``), the local worker count
and, for Ray, the cluster address. :func:`map_tasks` maps a picklable, module-level
function over tasks and yields the results **in input order** while streaming: at
most ``in_flight`` tasks are submitted ahead of the one being waited for, so memory
stays bounded however many tasks there are.

* ``local``: one worker runs in-process; more use a ``ProcessPoolExecutor``. When a
  worker process dies (killed, out of memory) the pool is rebuilt and the unfinished
  tasks are submitted again, up to ``max_retries`` times. Workers die with the process
  that started them, ``kill -9`` included (:func:`_die_with_parent`): none is left
  holding memory or an output's lock.
* ``ray``: every task is a ``ray.remote`` task with ``max_retries`` (Ray reruns a task
  whose worker died). :func:`connect` joins the cluster at ``ray_address``
  (``auto`` or ``HOST:PORT``) or, with no address, starts a local Ray with
  ``num_cpus=workers``; an already initialized Ray is used as it is.

Tasks may run more than once (a retry after a crash), so they must be idempotent:
the build's shard tasks are (atomic writes, sidecars). A task's own exception is
never retried; it is re-raised in the caller as the original exception, after the tasks
already submitted have run to their end (on either engine: none is still writing then).

>>> ex = Executor("local", workers=1)
>>> list(map_tasks(abs, [-2, 1, -3], ex))
[2, 1, 3]
>>> Executor("local", workers=4).in_flight
8
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from aegisbench import isa
from aegisbench.cluster import check_gcs, probe_address
from aegisbench.errors import BadInput

log = logging.getLogger(__name__)

KINDS = ("local", "ray")
_ADDRESS = re.compile(r"^(auto|(ray://)?[A-Za-z0-9_.\-]+:\d{1,5}|(ray://)?\[[0-9A-Fa-f:.]+\]:\d{1,5})$")
ENV = {"kind": "AEGISBENCH_EXECUTOR", "workers": "AEGISBENCH_WORKERS", "ray_address": "AEGISBENCH_RAY_ADDRESS"}


@dataclass(frozen=True)
class Executor:
    """The engine that runs shards: ``kind`` (``local``/``ray``), ``workers`` (local
    processes; the CPUs of a local Ray started here), ``ray_address`` (``auto``,
    ``HOST:PORT`` or ``ray://HOST:PORT``; None starts a local Ray), ``max_retries``
    (reruns of a task whose worker died).

    >>> Executor("ray", workers=2).ray_address is None
    True
    >>> Executor("spark")
    Traceback (most recent call last):
    ...
    aegisbench.errors.BadInput: --executor: unknown executor 'spark'; expected one of ('local', 'ray')
    """

    kind: str = "local"
    workers: int = 1
    ray_address: str | None = None
    max_retries: int = 3

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BadInput(f"unknown executor {self.kind!r}; expected one of {KINDS}", where="--executor")
        w = self.workers
        if isinstance(w, bool) or not isinstance(w, int) or w < 1:
            raise BadInput(f"workers must be an integer >= 1, got {w!r}", where="--workers")
        r = self.max_retries
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise BadInput(f"max_retries must be an integer >= 0, got {r!r}", where="max_retries")
        a = self.ray_address
        if a is not None:
            if self.kind != "ray":
                raise BadInput("--ray-address needs --executor ray", where="--ray-address")
            if not isinstance(a, str) or not _ADDRESS.match(a):
                raise BadInput(f"expected 'auto' or HOST:PORT, got {a!r}", where="--ray-address")

    @classmethod
    def from_cli(cls, kind: str | None, workers: int | None, ray_address: str | None,
                 default_workers: int = 1) -> "Executor":
        """The executor of ``--executor/--workers/--ray-address``; a flag left out (None)
        falls back to its ``AEGISBENCH_*`` variable, then to the default.

        >>> Executor.from_cli(None, None, None, default_workers=2).workers
        2
        """
        kind = kind or os.environ.get(ENV["kind"]) or "local"
        if workers is None and os.environ.get(ENV["workers"]):
            text = os.environ[ENV["workers"]]
            if not (text.strip().isascii() and text.strip().isdigit()):
                raise BadInput(f"expected a positive integer, got {text!r}", where=ENV["workers"])
            workers = int(text)
        ray_address = ray_address or os.environ.get(ENV["ray_address"]) or None
        return cls(kind=kind, workers=default_workers if workers is None else workers, ray_address=ray_address)

    @property
    def in_flight(self) -> int:
        """Tasks submitted ahead (2 per worker; for Ray, per CPU of the cluster)."""
        if self.kind == "ray":
            import ray
            if ray.is_initialized():
                return 2 * max(self.workers, int(ray.cluster_resources().get("CPU", 1)))
        return 2 * self.workers


def export_env(kind: str | None, workers: int | None, ray_address: str | None, default_workers: int = 1) -> None:
    """Check the given flags and export them as ``AEGISBENCH_*`` variables, so commands run
    as child processes (the stages of ``dvc repro``) use the same executor."""
    ex = Executor.from_cli(kind, workers, ray_address, default_workers)
    if ex.kind == "ray":
        import_ray()
        if ex.ray_address is not None:
            probe_address(ex.ray_address)
    for key, value in (("kind", kind), ("workers", workers), ("ray_address", ray_address)):
        if value is not None:
            os.environ[ENV[key]] = str(value)


def import_ray():
    """The ``ray`` module, or BadInput saying how to install it."""
    try:
        import ray
    except ImportError:
        raise BadInput("--executor ray needs Ray: pip install 'aegisbench[ray]'", where="--executor") from None
    return ray


def connect(executor: Executor, paths: Iterable = ()) -> None:
    """Make Ray usable for ``executor`` (no-op for ``local`` or an initialized Ray).

    With ``ray_address`` it joins that cluster (BadInput when it cannot be reached or
    refuses this process's token) and runs :func:`aegisbench.cluster.preflight`: every
    alive node must run the driver's Python, Ray and aegisbench and see ``paths`` (the
    command's data); without, it starts a local Ray with ``num_cpus=workers``.
    """
    if executor.kind != "ray":
        return
    ray = import_ray()
    if ray.is_initialized():
        return
    # workers start with this process's instruction-set cap (aegisbench.isa): same kernels, same bytes
    cap = {k: os.environ[k] for k in isa.ENV if k in os.environ}
    quiet = dict(logging_level=logging.WARNING, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": cap})
    if executor.ray_address is None:
        ray.init(num_cpus=executor.workers, **quiet)
        log.info("started a local Ray with %d CPU(s)", executor.workers)
        return
    target = probe_address(executor.ray_address)
    check_gcs(target, executor.ray_address)
    try:
        ray.init(address=executor.ray_address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
    except (RuntimeError, ConnectionError) as exc:
        ray.shutdown()
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BadInput(f"cannot join the Ray cluster: {first}", where=target) from None
    from aegisbench.cluster import preflight

    try:
        preflight(paths)
    except BaseException:
        ray.shutdown()
        raise
    log.info("joined Ray cluster at %s: %s", target, ray.cluster_resources())


def map_tasks(fn: Callable[[Any], Any], tasks: Iterable, executor: Executor = Executor()) -> Iterator:
    """Yield ``fn(task)`` for every task, in input order, running them on ``executor``.

    ``fn`` must be picklable (a module-level function or a ``functools.partial`` of
    one); ``tasks`` is consumed lazily, at most ``executor.in_flight`` ahead.
    """
    if executor.kind == "ray":
        return _map_ray(fn, tasks, executor)
    if executor.workers == 1:
        return map(fn, tasks)
    return _map_processes(fn, tasks, executor)


PARENT_POLL_S = 0.5


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)  # the parent is gone: nobody will read our results


def _die_with_parent(creator: int, deathsig: bool) -> None:
    """Initializer of pool workers: exit as soon as the parent process is gone (its
    ``kill -9`` included). On Linux ``PR_SET_PDEATHSIG`` kills the worker at once when the
    pool was started from the main thread (the signal follows the creating thread); a
    daemon thread polling ``os.getppid()`` covers every case within ``PARENT_POLL_S``.
    ``creator``: the PID that made the pool (gone already: exit now)."""
    if deathsig and sys.platform == "linux":
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    parent = os.getppid()
    if parent != creator:  # a fork server's child, or orphaned before this ran
        try:
            os.kill(creator, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:
            pass
    threading.Thread(target=_watch_parent, args=(parent,), name="aegisbench-parent-watch", daemon=True).start()


def start_method() -> str | None:
    """How local worker processes start: the platform's default (None; fork on Linux), but
    ``spawn`` in a process that is a Ray driver. A fork copies the driver's Ray core worker (its
    gRPC threads and sockets) into each worker: the forked workers then speak to the GCS as the
    driver, and the driver can lose its connection and exit with status 1 and no message (CI,
    issue 36: the Ray-driver tests died twice in ``build_repo(..., Executor("local", 2))`` right
    after a Ray build, the forked workers logging GCS reconnects under their own pids)."""
    ray = sys.modules.get("ray")
    try:
        return "spawn" if ray is not None and ray.is_initialized() else None
    except AttributeError:  # a partial or foreign module named ray
        return None


def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    deathsig = threading.current_thread() is threading.main_thread()
    method = start_method()
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method) if method else None,
                               initializer=_die_with_parent, initargs=(os.getpid(), deathsig))


def _map_processes(fn, tasks: Iterable, executor: Executor) -> Iterator:
    source = iter(tasks)
    pending: deque = deque()  # (task, future), oldest first
    retries = executor.max_retries
    pool = _pool(executor.workers)
    try:
        while True:
            try:  # a dead worker breaks the pool: submit() and result() both raise then
                while len(pending) < executor.in_flight:
                    task = next(source, _END)
                    if task is _END:
                        break
                    pending.append((task, None))
                    pending[-1] = (task, pool.submit(fn, task))
                if not pending:
                    return
                result = pending[0][1].result()
            except BrokenProcessPool:
                if retries == 0:
                    raise
                retries -= 1
                log.warning("a worker process died; restarting the pool and resubmitting %d task(s) "
                            "(%d retr%s left)", len(pending), retries, "y" if retries == 1 else "ies")
                pool.shutdown(wait=True, cancel_futures=True)
                pool = _pool(executor.workers)
                pending = deque((t, pool.submit(fn, t)) for t, _ in pending)
                continue
            pending.popleft()
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_END = object()


def _on_node(fn, task):
    """A Ray task's body: ``(id of the node it ran on, fn(task))``."""
    import ray

    return ray.get_runtime_context().get_node_id(), fn(task)


def _task_name(fn) -> str:
    """``ray::<name>`` in ps: the function's name (a partial's function)."""
    return getattr(getattr(fn, "func", fn), "__name__", type(fn).__name__)


def _map_ray(fn, tasks: Iterable, executor: Executor) -> Iterator:
    """Tasks on Ray, each logged (DEBUG) with the node it ran on; one INFO line of tasks
    per node when all are done."""
    connect(executor)
    import ray
    from ray.exceptions import RayTaskError

    remote = ray.remote(num_cpus=1, max_retries=executor.max_retries, retry_exceptions=False)(_on_node)
    remote = remote.options(name=_task_name(fn))
    fn_ref = ray.put(fn)  # shipped once through the object store
    source = iter(tasks)
    pending: deque = deque()
    limit = executor.in_flight
    per_node: dict[str, int] = {}
    done = 0

    def fill() -> None:
        while len(pending) < limit:
            task = next(source, _END)
            if task is _END:
                return
            pending.append(remote.remote(fn_ref, task))

    try:
        fill()
        while pending:
            try:
                node, result = ray.get(pending[0])
            except RayTaskError as exc:  # the task's own exception: re-raise the original
                cause = getattr(exc, "cause", None)
                if isinstance(cause, BaseException):
                    raise cause from None
                raise
            pending.popleft()
            log.debug("ray task %d (%s) ran on node %s", done, _task_name(fn), node)
            per_node[node] = per_node.get(node, 0) + 1
            done += 1
            fill()
            yield result
        log.info("ray: %d %s task(s) on %d node(s): %s", done, _task_name(fn), len(per_node),
                 ", ".join(f"{n}={c}" for n, c in sorted(per_node.items())))
    finally:
        # the in-flight tasks run to their end, as the local pool's shutdown(wait=True): none is
        # left writing after this returns. Not ray.cancel: a cancel racing the task's reply ends
        # the driver (Ray 2.60 RAY_CHECK "Tried to complete task that was not pending", CI stop 44)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), fetch_local=False)
