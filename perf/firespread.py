"""Throughput of seed 003's fire-spread model, side by side with PyPI's pytorchfire and wildtorch.

Set up the peers once, then run from the repository root::

    python3 -m venv .venv-peers-fire
    .venv-peers-fire/bin/pip install torch==2.13.0 && .venv-peers-fire/bin/pip install pytorchfire wildtorch
    .venv/bin/python perf/firespread.py                 # 1000 realizations at 64x64 and 256x256
    .venv/bin/python perf/firespread.py --realizations 200 --peer-realizations 50 --skip-memory

It reports, for each engine and grid, realizations per second and cell-updates per second
(cell-updates = ticks each realization ran until nothing burnt x H x W) with the mean ticks
beside them, on the same grid and initial condition, all on one thread: our compiled
kernel (numba; the first call compiles or loads the cache, so one warm-up call runs first)
and the peers, each in ``.venv-peers-fire`` (``--peer-python``), one realization at a time
as their APIs run. The models differ (ours: seed 003's asynchronous heat accumulation,
one p_ignite trial per ask; the peers: the Alexandridis-style p_burn CA with p_h =
p_ignite, no wind or slope, bare ground as p_veg = -1, burn continuation 0.3 for
pytorchfire (its default) and 0.9 for wildtorch), so the comparison that holds is
throughput per cell-update; per realization it also depends on how long fires run.
A child process also runs 1000 realizations of 256x256 and reports its peak resident memory.

Targets: 1000 x 64x64 until nothing burns in under 2 s on one core; at least 100x
pytorchfire per cell-update; peak memory under 2 GB for 1000 x 256x256. Results go to
stdout and, with ``--out``, to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
VERSION = "bench"


def _setup(grid: int):
    from aegisbench.firespread.layout import make_initial_condition
    from aegisbench.firespread.model import SeedModel
    from aegisbench.firespread.params import FirespreadParams
    p = FirespreadParams.from_dict({"grid": [grid, grid], "realizations": 2})
    return p, SeedModel.from_params(p), make_initial_condition(p, VERSION, 0)


def run_ours(grid: int, n: int, s_level: int) -> dict:
    import numpy as np

    from aegisbench.firespread.model import simulate
    p, m, ic = _setup(grid)
    simulate(ic, m, p.p_ignite(s_level), (VERSION, "warm"), range(2))  # compile / load the kernel
    t0 = time.perf_counter()
    ens = simulate(ic, m, p.p_ignite(s_level), (VERSION, 0, s_level), np.arange(n))
    dt = time.perf_counter() - t0
    cells = int(ens.n_steps.sum()) * grid * grid
    return {"engine": f"aegisbench seed003 {grid}x{grid} (1 core)", "grid": grid,
            "realizations": n, "seconds": dt, "realizations_per_s": n / dt, "cell_updates_per_s": cells / dt,
            "mean_steps": float(ens.n_steps.mean()), "burnt_fraction": float((ens.ignition_time >= 0).sum()) / (n * ic.n_trees)}


# ----------------------------------------------------------------- peers (run in their venv)

def peer_main(name: str, layout_file: str, n: int, p_ignite: float) -> None:
    import numpy as np
    import torch
    torch.set_num_threads(1)
    data = np.load(layout_file)
    tree = torch.as_tensor(data["tree"])
    ign = torch.zeros_like(tree)
    ign[tuple(torch.as_tensor(data["seeds"]).T)] = True
    h, w = tree.shape
    steps = 0
    burnt = 0
    if name == "pytorchfire":
        import pytorchfire
        from pytorchfire import WildfireModel
        version = pytorchfire.__version__
        env = {"p_veg": torch.where(tree, 0.0, -1.0), "p_den": torch.zeros(h, w), "wind_velocity": torch.zeros(h, w),
               "wind_towards_direction": torch.zeros(h, w), "slope": torch.zeros(h, w, 3, 3), "initial_ignition": ign}
        model = WildfireModel(env, {"a": torch.tensor(0.0), "p_h": torch.tensor(p_ignite), "c_1": torch.tensor(0.0),
                                    "c_2": torch.tensor(0.0), "p_continue": torch.tensor(0.3)}).eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            for r in range(n):
                model.reset(seed=r)
                while bool(model.state[0].any()) and steps < 10 ** 8:
                    model.compute()
                    steps += 1
                burnt += int(model.state[1].sum() + model.state[0].sum())
    elif name == "wildtorch":
        import wildtorch
        from wildtorch import SimulatorConstants, WildTorchSimulator
        version = wildtorch.__version__
        wmap = torch.zeros(3, h, w)
        wmap[0] = torch.where(tree, 0.0, -1.0)
        const = SimulatorConstants(p_h=p_ignite, c_1=0, c_2=0, a=0, v=0, p_firebreak=0.0, p_continue_burn=0.9,
                                   device=torch.device("cpu"))
        sim = WildTorchSimulator(wildfire_map=wmap, simulator_constants=const, maximum_step=10 ** 6, initial_ignition=ign)
        t0 = time.perf_counter()
        for r in range(n):
            sim.reset()
            sim.seed = r
            while not (sim.terminated or sim.truncated):
                sim.step()
                steps += 1
            burnt += int(sim.fire_state[1].sum() + sim.fire_state[0].sum())
    else:
        raise SystemExit(f"unknown peer {name}")
    dt = time.perf_counter() - t0
    print(json.dumps({"engine": f"{name} {version} {h}x{w} (cpu, 1 thr)", "grid": h, "realizations": n, "seconds": dt,
                      "realizations_per_s": n / dt, "cell_updates_per_s": steps * h * w / dt,
                      "mean_steps": steps / n, "burnt_fraction": burnt / (n * int(tree.sum()))}))


def run_peer(name: str, python: str, grid: int, n: int, p_ignite: float) -> dict:
    import numpy as np
    _, _, ic = _setup(grid)
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "layout.npz"
        np.savez(f, tree=ic.tree, seeds=ic.seeds)
        proc = subprocess.run([python, __file__, "--peer", name, "--layout", str(f), "--realizations", str(n),
                               "--p-ignite", str(p_ignite)], capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"engine": name, "error": f"could not run ({tail})"}
    return json.loads(lines[-1])


# ----------------------------------------------------------------- memory (child process)

def memory_child(grid: int, n: int, s_level: int) -> None:
    r = run_ours(grid, n, s_level)
    r["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(r))


def run_memory(grid: int, n: int, s_level: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--memory-child", "--grid", str(grid), "--realizations", str(n),
                           "--s-level", str(s_level)], capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"engine": "memory", "error": proc.stderr.strip()[-300:]}
    return json.loads(lines[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", default="64,256", help="comma-separated grid sizes (square)")
    ap.add_argument("--realizations", type=int, default=1000)
    ap.add_argument("--peer-realizations", type=int, help="realizations per peer (default: the same number)")
    ap.add_argument("--s-level", type=int, default=20)
    ap.add_argument("--peer-python", default=str(ROOT / ".venv-peers-fire" / "bin" / "python"))
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-grid", type=int, default=256)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--layout", help=argparse.SUPPRESS)
    ap.add_argument("--grid", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--p-ignite", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.peer:
        peer_main(a.peer, a.layout, a.realizations, a.p_ignite)
        return 0
    if a.memory_child:
        memory_child(a.grid, a.realizations, a.s_level)
        return 0
    n, s = a.realizations, a.s_level
    grids = [int(g) for g in a.grids.split(",")]
    results, checks = [], {}
    for g in grids:
        ours = run_ours(g, n, s)
        ours["engine"] += f" S{s}"
        group = [ours]
        for extra in (0, 50):
            if extra != s:
                r = run_ours(g, n, extra)
                r["engine"] += f" S{extra}"
                group.append(r)
        if not a.skip_peers:
            pn = a.peer_realizations or n
            if not Path(a.peer_python).exists():
                group += [{"engine": p, "grid": g, "error": f"peer venv missing ({a.peer_python})"}
                          for p in ("pytorchfire", "wildtorch")]
            else:
                group += [run_peer(p, a.peer_python, g, pn, (100 - s) / 100) for p in ("pytorchfire", "wildtorch")]
        if g == 64:
            checks["seed003_1000x64_under_2s"] = ours["seconds"] * 1000 / n < 2.0
        for r in group:
            if "error" not in r and r["engine"].split()[0] in ("pytorchfire", "wildtorch"):
                peer = r["engine"].split()[0]
                checks[f"x_{peer}_{g}_per_realization"] = round(ours["realizations_per_s"] / r["realizations_per_s"], 1)
                checks[f"x_{peer}_{g}_per_cell_update"] = round(ours["cell_updates_per_s"] / r["cell_updates_per_s"], 1)
        results += group
    mem = None if a.skip_memory else run_memory(a.memory_grid, n, s)
    print(f"S-level {s}; cell-updates = ticks run x H x W (models differ: compare per cell-update)")
    print(f"{'engine':52s} {'realiz.':>7s} {'seconds':>8s} {'realiz./s':>10s} {'cell-upd./s':>12s} {'ticks':>6s}")
    for r in results:
        if "error" in r:
            print(f"{r['engine']:52s} {r['error']}")
            continue
        print(f"{r['engine']:52s} {r['realizations']:7d} {r['seconds']:8.2f} {r['realizations_per_s']:10.1f} "
              f"{r['cell_updates_per_s']:12.3e} {r['mean_steps']:6.1f}")
    for key, v in checks.items():
        if key.startswith("x_"):
            print(f"ratio {key[2:]}: {v}x")
    if "x_pytorchfire_256_per_cell_update" in checks:
        checks["pytorchfire_256_at_least_100x_per_cell_update"] = checks["x_pytorchfire_256_per_cell_update"] >= 100
    if mem is not None:
        if "error" in mem:
            print(f"memory: {mem['error']}")
        else:
            checks["peak_rss_under_2gb"] = mem["peak_rss_mb"] < 2048
            print(f"memory: {n} x {a.memory_grid}x{a.memory_grid} in {mem['seconds']:.1f} s, "
                  f"peak RSS {mem['peak_rss_mb']:.0f} MB")
    print("targets:", json.dumps(checks))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"results": results, "memory": mem, "checks": checks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
