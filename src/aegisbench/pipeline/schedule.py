"""``dvc repro`` with independent stages side by side.

DVC runs one stage at a time and documents the alternative: several ``dvc repro``
processes on stages that do not overlap (each holds read locks on its deps and write
locks on its outs; the repository lock is released while a stage's command runs). This
module schedules that: it reads the stage graph and status from DVC, then runs each
stage to be reproduced as ``dvc --wait-for-lock repro --single-item STAGE`` as soon as
every stage it depends on has finished, at most ``jobs`` at a time. Among the stages
ready to start, the one heading the longest remaining chain goes first, weighed by the
``meta: {minutes: N}`` each ``dvc.yaml`` stage declares (measured on 2 idle cores; 1 when
absent): the 35-minute smoke training starts next to the build instead of after it. A
stage that heads the longest remaining chain when it starts runs at normal priority, the
others at ``nice`` +:data:`NICE_BESIDE`, so stages beside it (the build's two workers, say)
take the cores it leaves rather than slowing the chain that decides when the run ends.

Which stages run, and what they write, is what ``dvc repro`` decides: a stage scheduled
here whose inputs turn out unchanged is skipped by DVC, as in one ``dvc repro``. The first
failing stage stops the run: nothing new starts, the running stages are interrupted
(SIGINT, as Ctrl-C) and its exit status is returned.

>>> plan = Plan(["a", "b", "c"], {"a": set(), "b": {"a"}, "c": {"a"}}, {"a": 1, "b": 2, "c": 30})
>>> sorted(plan.ranks().items())
[('a', 31.0), ('b', 2.0), ('c', 30.0)]
>>> plan.ready(done={"a"}, started={"a"})
['c', 'b']
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: default estimate of a stage without ``meta.minutes``
DEFAULT_MINUTES = 1.0
POLL_S = 0.5
#: niceness added to a stage started off the longest remaining chain
NICE_BESIDE = 10


@dataclass(frozen=True)
class Plan:
    """The stages to reproduce (in ``dvc.yaml`` order), each one's upstream stages among
    them, and each one's estimated minutes."""

    stages: list[str]
    upstream: dict[str, set[str]]
    minutes: dict[str, float]

    def ranks(self) -> dict[str, float]:
        """Minutes from a stage's start to the end of the longest chain it heads."""
        down: dict[str, list[str]] = {s: [] for s in self.stages}
        for s in self.stages:
            for u in self.upstream[s]:
                down[u].append(s)
        rank: dict[str, float] = {}

        def visit(s: str) -> float:
            if s not in rank:
                rank[s] = float(self.minutes.get(s, DEFAULT_MINUTES)) + max((visit(d) for d in down[s]), default=0.0)
            return rank[s]

        for s in self.stages:
            visit(s)
        return rank

    def critical(self, name: str, done: set[str]) -> bool:
        """Whether ``name`` heads the longest chain among the stages not done."""
        rank = self.ranks()
        return rank[name] >= max(rank[s] for s in self.stages if s not in done)

    def ready(self, done: set[str], started: set[str]) -> list[str]:
        """Stages not started whose upstream stages are all done, longest chain first
        (ties in ``dvc.yaml`` order)."""
        rank = self.ranks()
        order = {s: i for i, s in enumerate(self.stages)}
        free = [s for s in self.stages if s not in started and self.upstream[s] <= done]
        return sorted(free, key=lambda s: (-rank[s], order[s]))


def load_plan(project: str | Path, targets: list[str] | None = None) -> Plan:
    """The stages ``dvc repro [TARGET ...]`` would consider: those DVC reports changed and every
    stage downstream of one (their inputs change when it reruns); with ``targets``, only the
    targets and the stages they depend on (an unknown target: BadInput)."""
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        graph = repo.index.graph
        stages = [s for s in repo.index.stages if s.cmd]  # not plain .dvc-tracked data
        names = {s: _address(s, repo.root_dir) for s in stages}
        upstream_all = {names[s]: {names[u] for u in graph.successors(s) if u in names} for s in stages}
        minutes = {names[s]: float((s.meta or {}).get("minutes", DEFAULT_MINUTES)) for s in stages}
        status = repo.status()  # keyed by addressing relative to this process's directory
        changed = {names[s] for s in stages if s.addressing in status}
    order = [names[s] for s in stages]
    wanted = _wanted(order, upstream_all, targets)
    todo: set[str] = set()
    for name in _topological(order, upstream_all):
        if name in wanted and (name in changed or upstream_all[name] & todo):
            todo.add(name)
    keep = [s for s in order if s in todo]
    return Plan(keep, {s: upstream_all[s] & todo for s in keep}, {s: minutes[s] for s in keep})


def check_targets(targets: list[str], known: list[str]) -> None:
    """BadInput naming the first of ``targets`` that is not among the stage names ``known``."""
    from aegisbench.errors import BadInput
    from aegisbench.fields import did_you_mean

    for t in targets:
        if t not in known:
            raise BadInput(f"unknown stage {t!r}{did_you_mean(t, known)}; the stages: {', '.join(known)}",
                           where="STAGE")


def _wanted(order: list[str], upstream: dict[str, set[str]], targets: list[str] | None) -> set[str]:
    """Every stage (no targets), else the targets and all they depend on; BadInput naming the
    first unknown target.

    >>> sorted(_wanted(["a", "b", "c"], {"a": set(), "b": {"a"}, "c": set()}, ["b"]))
    ['a', 'b']
    """
    if not targets:
        return set(order)
    check_targets(targets, order)
    seen: set[str] = set()
    stack = list(targets)
    while stack:
        s = stack.pop()
        if s not in seen:
            seen.add(s)
            stack.extend(upstream[s])
    return seen


def _address(stage, root: str) -> str:
    """``stage`` as ``dvc repro`` run in ``root`` names it (``name`` in the root dvc.yaml)."""
    rel = os.path.relpath(stage.path, root)
    return stage.name if rel == "dvc.yaml" else f"{rel}:{stage.name}"


def _topological(order: list[str], upstream: dict[str, set[str]]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()

    def visit(s: str) -> None:
        if s in seen:
            return
        seen.add(s)
        for u in sorted(upstream[s], key=order.index):
            visit(u)
        out.append(s)

    for s in order:
        visit(s)
    return out


def run_plan(plan: Plan, project: str | Path, jobs: int, env: dict | None = None) -> int:
    """Run every stage of ``plan`` (``dvc repro -s``), ``jobs`` at a time; 0 or the exit
    status of the first stage that failed."""
    running: dict[str, subprocess.Popen] = {}
    done: set[str] = set()
    started: set[str] = set()
    t0 = time.monotonic()
    failed: tuple[str, int] | None = None
    try:
        failed = _loop(plan, project, jobs, env, running, done, started, t0)
    except KeyboardInterrupt:
        _interrupt(running)
        raise
    if failed is not None:
        _interrupt(running)
        print(f"stage {failed[0]} failed (exit {failed[1]}); stopped the stages running beside it "
              f"({', '.join(running) or 'none'})", file=sys.stderr)
        return failed[1]
    return 0


def _loop(plan: Plan, project, jobs: int, env, running: dict, done: set, started: set,
          t0: float) -> tuple[str, int] | None:
    """Start ready stages and collect finished ones until all are done or one fails."""
    failed = None
    while len(done) < len(plan.stages) and failed is None:
        for name in plan.ready(done, started)[:max(0, jobs - len(running))]:
            nice = 0 if plan.critical(name, done) else NICE_BESIDE
            log.info("stage %s: starting (%d running%s)", name, len(running) + 1, f", nice +{nice}" if nice else "")
            running[name] = _start(name, project, env, nice)
            started.add(name)
        time.sleep(POLL_S)
        for name, proc in list(running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del running[name]
            if rc != 0:
                failed = (name, rc)
                break
            done.add(name)
            log.info("stage %s: done at %.1f min", name, (time.monotonic() - t0) / 60)
    return failed


def _start(name: str, project, env, nice: int) -> subprocess.Popen:
    """``dvc repro`` of one stage in its own process group (SIGINT reaches its command),
    ``nice`` added to its priority (inherited by the stage's command)."""
    cmd = [sys.executable, "-m", "dvc", "--wait-for-lock", "repro", "--single-item", name]
    return subprocess.Popen(cmd, cwd=project, env=env, start_new_session=True,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)


def _interrupt(running: dict[str, subprocess.Popen]) -> None:
    """SIGINT the running ``dvc repro`` process groups (their commands stop as on Ctrl-C) and wait."""
    for proc in running.values():
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    for proc in running.values():
        proc.wait()
