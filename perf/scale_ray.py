"""Per-task overhead of Ray against local processes, and the shard size where Ray breaks even.

1. **Overhead**: ``--tasks`` empty tasks through :func:`aegisbench.executor.map_tasks` on one
   process (in-process ``map``, the floor), 2 local worker processes and a local Ray with 2
   CPUs (``--cluster``: also a two-node ``ray.cluster_utils.Cluster``, one CPU per node);
   per-task wall time, interleaved rounds, medians.
2. **Work per row**: a one-process build of ``perf/_bench.bench_params`` (``--images``) at
   ``--rows-per-shard``; seconds per shard task and per image row.
3. **Start-up**: ``ray.init`` with 2 CPUs until both workers have imported the builder (a
   fixed cost per command, not per task).
4. **Break-even**: with W workers a task of t seconds takes ``(t + o) / W`` of wall time per
   task against ``t`` in one process, so Ray pays off once ``t >= o / (W - 1)``; against
   W local processes (overhead ``p``) Ray is within 10% once ``t + o <= 1.1 (t + p)``, i.e.
   ``t >= (o - 1.1 p) / 0.1``. Both printed as seconds and as rows per shard; with the
   start-up S, a whole build of n rows gains from 2 CPUs once ``n * t_row >= 2 S``.

    python perf/scale_ray.py                       # ~1-2 min on 2 cores
    python perf/scale_ray.py --cluster --json out.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench  # noqa: E402

_bench.cap()

from aegisbench.executor import Executor, map_tasks  # noqa: E402


def empty(x: int) -> int:
    return x


def per_task_s(executor: Executor, n: int) -> float:
    t = time.perf_counter()
    for _ in map_tasks(empty, range(n), executor):
        pass
    return (time.perf_counter() - t) / n


def import_builder(x: int) -> int:
    import aegisbench.builders.build  # noqa: F401 - what a fresh build worker imports first
    return x


def startup_s() -> float:
    """Seconds from nothing to two Ray workers that have imported the builder: ``ray.init``
    with 2 CPUs and the first task on each worker (a fixed cost per command)."""
    import ray

    t = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        list(map_tasks(import_builder, range(2), Executor("ray", workers=2)))
        return time.perf_counter() - t
    finally:
        ray.shutdown()


def overheads(n: int, rounds: int, cluster: bool) -> dict[str, float]:
    import ray

    sides = {"one process": Executor("local", 1), "2 local processes": Executor("local", 2)}
    out: dict[str, float] = {}
    runs = _bench.interleaved(rounds, {k: (lambda e=e: per_task_s(e, n)) for k, e in sides.items()})
    out.update({k: statistics.median(v) for k, v in runs.items()})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        ex = Executor("ray", workers=2)
        per_task_s(ex, n)  # warm-up: worker processes started
        out["local Ray, 2 CPUs"] = statistics.median(per_task_s(ex, n) for _ in range(rounds))
    finally:
        ray.shutdown()
    if cluster:
        from ray.cluster_utils import Cluster

        c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, object_store_memory=100_000_000,
                                                              include_dashboard=False))
        try:
            c.add_node(num_cpus=1, object_store_memory=100_000_000)
            c.wait_for_nodes()
            ex = Executor("ray", ray_address=c.address)
            per_task_s(ex, n)
            out["Ray cluster, 2 nodes x 1 CPU"] = statistics.median(per_task_s(ex, n) for _ in range(rounds))
        finally:
            ray.shutdown()
            c.shutdown()
    return out


def build_work(images: int, rows_per_shard: int) -> tuple[float, int, int]:
    """Seconds of a one-process build, its shard tasks and image rows."""
    import json

    from aegisbench.builders.build import build_repo

    with tempfile.TemporaryDirectory() as tmp:
        params = _bench.bench_params(Path(tmp), images, rows_per_shard)
        _bench.materialize(params)
        t = time.perf_counter()
        build_repo(params, out=Path(tmp) / "repo", progress=False, executor=Executor("local", 1))
        seconds = time.perf_counter() - t
        files = json.loads((Path(tmp) / "repo" / "manifest.json").read_text())["files"]
        shards = [f for f in files if str(f).endswith(".parquet")]
        rows = sum(pq_rows(Path(tmp) / "repo" / f) for f in shards)
    return seconds, len(shards), rows


def pq_rows(path: Path) -> int:
    import pyarrow.parquet as pq
    return pq.ParquetFile(path).metadata.num_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", type=int, default=200, help="empty tasks per timing (default 200)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--images", type=int, default=8, help="SAR images of the build (default 8)")
    ap.add_argument("--rows-per-shard", type=int, default=4)
    ap.add_argument("--cluster", action="store_true", help="also a two-node Ray cluster on this machine")
    ap.add_argument("--json", help="write the summary rows here")
    args = ap.parse_args(argv)

    over = overheads(args.tasks, args.rounds, args.cluster)
    floor = over["one process"]
    for k, v in over.items():
        print(f"{k:32s} {v * 1e3:8.3f} ms per empty task ({v / floor:.3g}x one process)", flush=True)
    start = startup_s()
    print(f"local Ray start-up (ray.init + 2 workers importing the builder): {start:.2f} s", flush=True)
    seconds, shards, rows = build_work(args.images, args.rows_per_shard)
    per_shard, per_row = seconds / shards, seconds / rows
    print(f"one-process build: {seconds:.2f} s, {shards} shard files, {rows} rows: "
          f"{per_shard * 1e3:.1f} ms per shard, {per_row * 1e3:.1f} ms per row", flush=True)

    o = over["local Ray, 2 CPUs"] - floor
    p = over["2 local processes"] - floor
    vs_one = o / (2 - 1)
    vs_local = max(0.0, (o - 1.1 * p) / 0.1)
    rows_out = [_bench.speed_row("empty task, 2 local processes vs local Ray (2 CPUs)", over["local Ray, 2 CPUs"],
                                 over["2 local processes"], unit="s", higher_is_better=False)]
    if "Ray cluster, 2 nodes x 1 CPU" in over:
        rows_out.append(_bench.speed_row("empty task, 2 local processes vs two-node Ray cluster",
                                         over["Ray cluster, 2 nodes x 1 CPU"], over["2 local processes"], unit="s",
                                         higher_is_better=False))
    rows_out += [_bench.row("Ray overhead per task (above one process)", o, unit="s"),
                 _bench.row("local-process overhead per task", p, unit="s"),
                 _bench.row("build work per image row (one process)", per_row, unit="s"),
                 _bench.row("local Ray start-up per command (2 workers, builder imported)", start, unit="s"),
                 _bench.row("Ray (2 CPUs) beats one process from: image rows per build", 2 * start / per_row,
                            unit="rows"),
                 _bench.row("Ray break-even vs one process (2 CPUs): rows per shard", vs_one / per_row, unit="rows"),
                 _bench.row("Ray within 10% of 2 local processes: rows per shard", vs_local / per_row, unit="rows")]
    print(f"Ray overhead {o * 1e3:.2f} ms/task, local processes {p * 1e3:.2f} ms/task; Ray pays off against one "
          f"process from {vs_one * 1e3:.1f} ms of work per task ({vs_one / per_row:.2f} rows), and is within 10% of "
          f"local processes from {vs_local * 1e3:.0f} ms ({vs_local / per_row:.1f} rows per shard)", flush=True)
    print(f"start-up {start:.1f} s: a build on a local 2-CPU Ray beats one process from ~{2 * start / per_row:.0f} "
          "image rows (n t >= (n t + n o) / 2 + start-up)", flush=True)
    _bench.finish("scale_ray", rows_out, args.json, details={"per_task_s": over, "build_s": seconds,
                                                             "startup_s": start,
                                                             "shards": shards, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
