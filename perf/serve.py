"""The hosted leaderboard's throughput and latency, through the real server and workers.

On a scratch copy of a project (``--project``: default the checkout when its dataset repo is
built, else ``runs/fast``; its dataset repo is read in place, its pipeline results copied so the
board carries the reference rows), with ``aegisbench serve`` and ``aegisbench worker`` as
subprocesses on 127.0.0.1 and SQLite in WAL mode:

* **uploads validated and stored per second**: ``--uploads`` uploads of the project's
  ``submissions/reference_sar`` (each with another ``name``, so each is a new submission) from
  ``--clients`` concurrent clients, no worker running;
* **submissions scored per worker-minute**: those uploads scored and published by 1, then
  (on a fresh copy) 2 workers — per worker-minute = scored / (minutes x workers);
* **upload-to-visible latency** (p50 / p95): ``--burst`` uploads sent at once to an idle
  server with 1, then 2 workers; each from its acknowledgement to the moment the API reports
  it published on the board (its revision set).

There is no peer: no other benchmark package takes submissions. Two cores: the server, the
workers and the clients share them, so the 2-worker figures show contention, not only
parallelism.

Run: ``.venv/bin/python perf/serve.py [--project DIR] [--uploads 40] [--clients 4] [--burst 8] [--json out.json]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _bench import ROOT, cap, finish, row

cap()
sys.path.insert(0, str(ROOT / "tests"))

import yaml  # noqa: E402

from _servicekit import Server, Worker, add_team, api, upload, wait_for  # noqa: E402


def default_project() -> Path:
    return ROOT if (ROOT / "data" / "aegisbench" / "manifest.json").is_file() else ROOT / "runs" / "fast"


def scratch(project: Path, top: Path, name: str) -> Path:
    """A project at ``top/name`` over ``project``'s dataset repo, with a copy of its results."""
    raw = yaml.safe_load((project / "params.yaml").read_text())
    dataset = (project / (raw.get("paths") or {}).get("dataset", "aegisbench")).resolve()
    root = top / name
    root.mkdir(parents=True)
    if (project / "results").is_dir():
        shutil.copytree(project / "results", root / "results")
    params = {"benchmark_version": raw["benchmark_version"], "paths": {"dataset": str(dataset)},
              "evaluation": raw.get("evaluation", {}), "warp": raw.get("warp", {}),
              "hosting": {"phases": [{"name": "bench", "daily_limit": 10_000, "total_limit": 100_000}],
                          "references": ["reference_sar", "reference_smoke"], "versioning": "none"}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def parts(project: Path, k: int) -> list:
    sub = project / "submissions" / "reference_sar"
    meta = yaml.safe_load((sub / "submission.yaml").read_text())
    meta["name"] = f"bench upload {k}"
    return [("submission", ("submission.yaml", yaml.safe_dump(meta).encode())),
            ("predictions", ("predictions.parquet", (sub / "predictions.parquet").read_bytes()))]


def published(server, token, sid) -> bool:
    return api(server, token, f"/api/v1/submissions/{sid}")["revision"] is not None


def throughput(project: Path, top: Path, n: int, clients: int, workers: int) -> tuple[float, float]:
    """(uploads/s with no worker, submissions scored per worker-minute with ``workers``)."""
    root = scratch(project, top, f"throughput-{workers}")
    token = add_team(root, "Bench")
    server = Server(root)
    try:
        payloads = [parts(project, k) for k in range(n)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            answers = list(pool.map(lambda p: upload(server, token, p, timeout=600), payloads))
        upload_s = time.perf_counter() - t0
        bad = [a.text for a in answers if a.status_code != 201]
        if bad:
            raise SystemExit(f"uploads refused: {bad[:3]}\n{server.tail()}")
        sids = [a.json()["id"] for a in answers]
        t0 = time.perf_counter()
        worker = Worker(root, processes=workers)
        try:
            wait_for(lambda: all(published(server, token, s) for s in sids), 3600, 0.5, "every upload published")
        finally:
            worker.stop()
        score_s = time.perf_counter() - t0
    finally:
        server.stop()
    return n / upload_s, n / (score_s / 60) / workers


def latency(project: Path, top: Path, burst: int, workers: int) -> list[float]:
    root = scratch(project, top, f"latency-{workers}")
    token = add_team(root, "Bench")
    server, worker = Server(root), Worker(root, processes=workers)
    try:
        wait_for(lambda: (root / "hosted" / "store" / "ledger.jsonl").is_file(), 120, 0.2, "the worker")
        payloads = [parts(project, 1000 + k) for k in range(burst)]
        acked, seen = {}, {}
        with ThreadPoolExecutor(burst) as pool:
            for a in pool.map(lambda p: upload(server, token, p, timeout=600), payloads):
                acked[a.json()["id"]] = time.perf_counter()

        def all_seen():
            for sid in acked:
                if sid not in seen and published(server, token, sid):
                    seen[sid] = time.perf_counter()
            return len(seen) == len(acked)
        wait_for(all_seen, 3600, 0.05, "every upload published")
    finally:
        worker.stop()
        server.stop()
    return sorted(seen[s] - acked[s] for s in acked)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", type=Path, default=None)
    ap.add_argument("--uploads", type=int, default=40)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--burst", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    project = (args.project or default_project()).resolve()
    if not (project / "submissions" / "reference_sar" / "predictions.parquet").is_file():
        raise SystemExit(f"{project}: no built project with submissions/reference_sar: run `aegisbench run` (the "
                         "embedded default) or `aegisbench run --fast` (runs/fast) first, or give --project")
    print(f"project {project}", flush=True)
    rows, details = [], {"project": str(project)}
    with tempfile.TemporaryDirectory(prefix="aegisbench-perf-serve-") as tmp:
        top = Path(tmp)
        for workers in (1, 2):
            ups, per_min = throughput(project, top, args.uploads, args.clients, workers)
            if workers == 1:
                rows.append(row(f"uploads validated + stored ({args.clients} clients)", ups, unit="uploads/s"))
            rows.append(row(f"scored + published, {workers} worker(s)", per_min, unit="/worker-min"))
            details[f"throughput_{workers}"] = {"uploads_per_s": ups, "scored_per_worker_minute": per_min}
            lat = latency(project, top, args.burst, workers)
            details[f"latency_{workers}"] = lat
            rows.append(row(f"upload to visible p50, burst of {args.burst}, {workers} worker(s)", pct(lat, 50),
                            unit="s"))
            rows.append(row(f"upload to visible p95, burst of {args.burst}, {workers} worker(s)", pct(lat, 95),
                            unit="s"))
            print(rows[-3:], flush=True)
    finish("serve", rows, args.json, details)


if __name__ == "__main__":
    main()
