"""Throughput of seed 003's fire-spread model, side by side with PyPI's pytorchfire and wildtorch.

Set up the peers once, then run from the repository root::

    python3 -m venv .venv-peers-fire
    .venv-peers-fire/bin/pip install torch==2.13.0 && .venv-peers-fire/bin/pip install --pre pytorchfire wildtorch
    .venv/bin/python perf/firespread.py                 # 64x64 and 256x256, 5 rounds x 4 realizations
    .venv/bin/python perf/firespread.py --grids 64 --rounds 3 --per-round 2 --skip-memory

The headline is throughput per cell-update (cell-updates = ticks each realization ran
until nothing burnt x H x W), the equal-work figure: the models differ (ours: seed 003's
asynchronous heat accumulation, one p_ignite trial per ask; the peers: the
Alexandridis-style p_burn CA with p_h = p_ignite, no wind or slope, bare ground as p_veg =
-1, burn continuation 0.3 for pytorchfire (its default) and 0.9 for wildtorch), so fires
run for different numbers of ticks and realizations per second would reward the model
whose fires die sooner. Mean ticks per engine are printed beside each figure.

Same grid and initial condition on every side, all on one thread: our compiled kernel
(numba) in this process, each peer in a persistent process in ``.venv-peers-fire``
(``--peer-python``), one realization at a time as their APIs run. Interleaved: each round
runs ``--per-round`` realizations on every engine, the order flipped every round, after
one untimed warm-up round (it compiles our kernel); every engine runs the same
realizations count, and medians over rounds are reported. A missing peer is reported and
left out; our side still runs.

Targets: 1000 x 64x64 until nothing burns in under 2 s on one core; at least 100x
pytorchfire per cell-update; peak memory under 2 GB for 1000 x 256x256 (a child process,
VmHWM). ``--json PATH`` writes the summary rows and the details.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import ROOT, Peer, child_json, finish, interleaved, one_thread, peak_rss_mb, peer_python, row, speed_row

one_thread()

import numpy as np  # noqa: E402

VERSION = "bench"
PEER_SCRIPT = Path(__file__).with_name("_firespread_peer.py")
PEERS = ("pytorchfire", "wildtorch")
PEER_HOW = ("python3 -m venv .venv-peers-fire && .venv-peers-fire/bin/pip install torch==2.13.0 && "
            ".venv-peers-fire/bin/pip install --pre pytorchfire wildtorch")


def _setup(grid: int):
    from aegisbench.firespread.layout import make_initial_condition
    from aegisbench.firespread.model import SeedModel
    from aegisbench.params.firespread import FirespreadParams
    p = FirespreadParams.from_dict({"grid": [grid, grid], "realizations": 2})
    return p, SeedModel.from_params(p), make_initial_condition(p, VERSION, 0)


class Ours:
    """Seed 003's kernel on one grid; :meth:`run` returns (seconds, ticks, burnt cells) of ``n`` realizations."""

    def __init__(self, grid: int, s_level: int):
        from aegisbench.firespread.model import simulate
        self.simulate = simulate
        p, self.model, self.ic = _setup(grid)
        self.p_ignite, self.s_level = p.p_ignite(s_level), s_level

    def run(self, start: int, n: int) -> dict:
        t = time.perf_counter()
        ens = self.simulate(self.ic, self.model, self.p_ignite, (VERSION, 0, self.s_level), np.arange(start, start + n))
        dt = time.perf_counter() - t
        return {"seconds": dt, "steps": int(ens.n_steps.sum()), "burnt": int((ens.ignition_time >= 0).sum())}


# ----------------------------------------------------------------- one grid, interleaved

def compare(grid: int, s_level: int, rounds: int, per_round: int, peer_pys: dict[str, str]) -> dict[str, dict]:
    """Interleaved rounds of ``per_round`` realizations on every engine; per engine its
    versioned name, rounds, realizations, median cell-updates/s and realizations/s, mean ticks."""
    ours = Ours(grid, s_level)
    engines: dict[str, object] = {"aegisbench": ours.run}
    peers: list[Peer] = []
    with tempfile.TemporaryDirectory() as d:
        layout = Path(d) / "layout.npz"
        np.savez(layout, tree=ours.ic.tree, seeds=ours.ic.seeds)
        try:
            labels = {"aegisbench": "aegisbench seed003"}
            for name, py in peer_pys.items():
                peer = Peer([py, str(PEER_SCRIPT), name, str(layout), str(ours.p_ignite)])
                peers.append(peer)
                labels[name] = f"{name} {json.loads(peer.ready)['version']}"
                engines[name] = lambda start, n, peer=peer: json.loads(peer.ask(f"{start} {n}"))
            starts = {k: itertools.count(0, per_round) for k in engines}
            res = interleaved(rounds, {k: (lambda k=k: engines[k](next(starts[k]), per_round)) for k in engines})
        finally:
            for peer in peers:
                peer.close()
    cells = grid * grid
    out = {}
    for k, runs in res.items():
        n = per_round * len(runs)
        out[k] = {"engine": labels[k], "grid": grid, "rounds": len(runs), "realizations": n,
                  "seconds": sum(r["seconds"] for r in runs),
                  "cell_updates_per_s": statistics.median(r["steps"] * cells / r["seconds"] for r in runs),
                  "realizations_per_s": statistics.median(per_round / r["seconds"] for r in runs),
                  "mean_ticks": sum(r["steps"] for r in runs) / n,
                  "burnt_fraction": sum(r["burnt"] for r in runs) / (n * int(ours.ic.tree.sum()))}
    return out


# ----------------------------------------------------------------- targets of our side

def target_run(grid: int, n: int, s_level: int) -> dict:
    """``n`` realizations in one call (after a compile/warm-up call); seconds and peak RSS."""
    ours = Ours(grid, s_level)
    ours.run(0, 2)
    r = ours.run(0, n)
    return {"grid": grid, "realizations": n, "seconds": r["seconds"], "mean_ticks": r["steps"] / n,
            "peak_rss_mb": peak_rss_mb()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", default="64,256", help="comma-separated grid sizes (square)")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per engine (default 5)")
    ap.add_argument("--per-round", type=int, default=4, help="realizations per engine per round (default 4)")
    ap.add_argument("--s-level", type=int, default=20)
    ap.add_argument("--target-realizations", type=int, default=1000, help="our side's 64x64 target run (default 1000)")
    ap.add_argument("--peer-python", default=str(ROOT / ".venv-peers-fire" / "bin" / "python"))
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-grid", type=int, default=256)
    ap.add_argument("--json", "--out", dest="json", help="write the summary rows and details here")
    ap.add_argument("--target-child", type=int, metavar="GRID", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.target_child:
        print(json.dumps(target_run(a.target_child, a.target_realizations, a.s_level)))
        return 0
    s, n_t = a.s_level, a.target_realizations
    peer_pys = {} if a.skip_peers else {p: py for p in PEERS if (py := peer_python(a.peer_python, p, PEER_HOW))}
    missing = [] if a.skip_peers else [p for p in PEERS if p not in peer_pys]
    rows, details = [], {"s_level": s, "per_round": a.per_round, "grids": {}}
    print(f"S-level {s}, 1 thread each engine, {a.rounds} interleaved rounds x {a.per_round} realizations each;"
          f" medians over rounds\n{'engine':28s} {'grid':>8s} {'realiz.':>7s} {'realiz./s':>10s} {'cell-upd./s':>12s}"
          f" {'mean ticks':>10s}")
    for g in (int(v) for v in a.grids.split(",")):
        res = details["grids"][g] = compare(g, s, a.rounds, a.per_round, peer_pys)
        for r in res.values():
            print(f"{r['engine']:28s} {f'{g}x{g}':>8s} {r['realizations']:7d} {r['realizations_per_s']:10.2f}"
                  f" {r['cell_updates_per_s']:12.3e} {r['mean_ticks']:10.1f}", flush=True)
        o = res["aegisbench"]
        for p in PEERS:
            if a.skip_peers:
                continue
            r = res.get(p)
            ticks = f"mean ticks ours {o['mean_ticks']:.1f}" + (f", {p} {r['mean_ticks']:.1f}" if r else "")
            rows.append(speed_row(f"fire spread {g}x{g} S{s} vs {p}, per cell-update ({ticks}; "
                                  f"{o['realizations']} realizations each)",
                                  o["cell_updates_per_s"], r["cell_updates_per_s"] if r else None, unit="cell-upd/s",
                                  higher_is_better=True, min_ratio=100 if p == "pytorchfire" else None,
                                  peer_missing=p if p in missing else None))
    print("(realizations/s also depends on how long each model's fires run: the ratio is per cell-update)")
    t = details["target_64"] = child_json(__file__, "--target-child", 64, "--target-realizations", n_t, "--s-level", s)
    print(f"ours: {n_t} x 64x64 S{s} in {t['seconds']:.2f} s (mean ticks {t['mean_ticks']:.1f})")
    rows.append(row(f"{n_t} realizations 64x64 S{s} until nothing burns (ours, 1 thread)", round(t["seconds"], 3),
                    unit="s", target="< 2 s" if n_t == 1000 else None, met=t["seconds"] < 2 if n_t == 1000 else None))
    if not a.skip_memory:
        mg = a.memory_grid
        m = details["memory"] = child_json(__file__, "--target-child", mg, "--target-realizations", n_t, "--s-level", s)
        print(f"memory: {n_t} x {mg}x{mg} in {m['seconds']:.1f} s, peak RSS {m['peak_rss_mb']:.0f} MB")
        declared = n_t == 1000 and mg == 256
        rows.append(row(f"peak RSS, {n_t} realizations {mg}x{mg} S{s} (ours)", round(m["peak_rss_mb"]), unit="MB",
                        target="< 2048 MB" if declared else None, met=m["peak_rss_mb"] < 2048 if declared else None))
    finish("firespread", rows, a.json, details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
