"""Throughput of the fire-spread simulator, side by side with PyPI's pytorchfire and wildtorch.

Run from the repository root::

    .venv/bin/python benchmarks/firespread.py                 # 1000 realizations of 64x64
    .venv/bin/python benchmarks/firespread.py --realizations 200 --peer-realizations 50 --skip-memory

It reports, for each engine, realizations per second and cell-updates per second
(cell-updates = steps each realization ran until it stopped x H x W), on the same
grid and initial condition: our numpy backend on one core, our torch backend on CPU
(1 thread and all threads) and on CUDA when a GPU is present, and the peers, each
in ``.venv-peers-fire`` (``--peer-python``), one realization at a time as their APIs
run, on one thread. The models differ (ours: heat accumulation with p_ignite; the
peers: the Alexandridis-style p_burn CA with p_h = p_ignite, no wind or slope, bare
ground as p_veg = -1, burn continuation 0.3 for pytorchfire (its default) and 0.9 for
wildtorch (at its default 0.5 its fires die within ~8 steps on this layout, which
would make "per realization" meaningless)), so the comparison that holds is
throughput per cell-update; per realization it also depends on how long fires run,
so the mean steps are printed next to it. A child process also runs 1000 realizations of 256x256
with the numpy backend and reports its peak resident memory.

Targets: 1000 x 64x64 to fuel depletion in under 2 s on one core; at least 20x the
peers' per-realization throughput on CPU; peak memory under 2 GB for 1000 x 256x256.
Results go to stdout and, with ``--out``, to a JSON file.
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

ROOT = Path(__file__).resolve().parents[1]
VERSION = "bench"


def _setup(grid: int):
    from aegisbench.firespread.layout import make_initial_condition
    from aegisbench.firespread.model import HeatModel
    from aegisbench.firespread.params import FirespreadParams
    p = FirespreadParams.from_dict({"grid": [grid, grid], "realizations": 1})
    return p, HeatModel.from_params(p), make_initial_condition(p, VERSION, 0)


def run_ours(grid: int, n: int, s_level: int, backend: str, device: str | None = None, threads: int = 1) -> dict:
    import numpy as np

    from aegisbench.firespread.model import simulate
    p, m, ic = _setup(grid)
    if backend == "torch":
        import torch
        torch.set_num_threads(threads)
        simulate(ic, m, p.p_ignite(s_level), (VERSION, "warm"), range(2), backend="torch", device=device)
    t0 = time.perf_counter()
    ens = simulate(ic, m, p.p_ignite(s_level), (VERSION, 0, s_level), np.arange(n), backend=backend, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    cells = int(ens.n_steps.sum()) * grid * grid
    return {"engine": f"aegisbench {backend}" + (f" ({device}, {threads} thr)" if backend == "torch" else " (1 core)"),
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
    print(json.dumps({"engine": f"{name} {version} (cpu, 1 thr)", "realizations": n, "seconds": dt,
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
    r = run_ours(grid, n, s_level, "numpy")
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
    ap.add_argument("--grid", type=int, default=64)
    ap.add_argument("--realizations", type=int, default=1000)
    ap.add_argument("--peer-realizations", type=int, help="realizations per peer (default: the same number)")
    ap.add_argument("--s-level", type=int, default=20)
    ap.add_argument("--peer-python", default=str(ROOT / ".venv-peers-fire" / "bin" / "python"))
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-grid", type=int, default=256)
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--layout", help=argparse.SUPPRESS)
    ap.add_argument("--p-ignite", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.peer:
        peer_main(a.peer, a.layout, a.realizations, a.p_ignite)
        return 0
    if a.memory_child:
        memory_child(a.grid, a.realizations, a.s_level)
        return 0
    n, g, s = a.realizations, a.grid, a.s_level
    results = [run_ours(g, n, s, "numpy")]
    for extra in (0, 50):
        if extra != s:
            r = run_ours(g, n, extra, "numpy")
            r["engine"] += f" S{extra}"
            results.append(r)
    results[0]["engine"] += f" S{s}"
    if not a.skip_torch:
        try:
            import torch
            results.append(run_ours(g, n, s, "torch", "cpu", 1))
            results.append(run_ours(g, n, s, "torch", "cpu", os.cpu_count() or 1))
            if torch.cuda.is_available():
                results.append(run_ours(g, n, s, "torch", "cuda", 1))
        except ImportError:
            results.append({"engine": "aegisbench torch", "error": "torch not installed"})
    if not a.skip_peers:
        pn = a.peer_realizations or n
        if not Path(a.peer_python).exists():
            results += [{"engine": p, "error": f"peer venv missing ({a.peer_python})"} for p in ("pytorchfire", "wildtorch")]
        else:
            results += [run_peer(p, a.peer_python, g, pn, (100 - s) / 100) for p in ("pytorchfire", "wildtorch")]
    mem = None if a.skip_memory else run_memory(a.memory_grid, n, s)
    print(f"grid {g}x{g}, S-level {s}; cell-updates = steps run x H x W (models differ: compare per cell-update)")
    print(f"{'engine':46s} {'realiz.':>7s} {'seconds':>8s} {'realiz./s':>10s} {'cell-upd./s':>12s} {'steps':>6s}")
    for r in results:
        if "error" in r:
            print(f"{r['engine']:46s} {r['error']}")
            continue
        print(f"{r['engine']:46s} {r['realizations']:7d} {r['seconds']:8.2f} {r['realizations_per_s']:10.1f} "
              f"{r['cell_updates_per_s']:12.3e} {r['mean_steps']:6.1f}")
    ours = results[0]
    checks = {"numpy_1000x64_under_2s": ours["seconds"] * 1000 / n < 2.0 if g == 64 else None}
    for r in results:
        if "error" not in r and r["engine"].split()[0] in ("pytorchfire", "wildtorch"):
            peer = r["engine"].split()[0]
            ratio = ours["realizations_per_s"] / r["realizations_per_s"]
            per_cell = ours["cell_updates_per_s"] / r["cell_updates_per_s"]
            checks[f"x_{peer}_per_realization"] = round(ratio, 1)
            checks[f"x_{peer}_per_cell_update"] = round(per_cell, 1)
            print(f"speed-up over {r['engine']}: {ratio:.1f}x per realization, {per_cell:.1f}x per cell-update")
    if mem is not None:
        if "error" in mem:
            print(f"memory: {mem['error']}")
        else:
            checks["peak_rss_under_2gb"] = mem["peak_rss_mb"] < 2048
            print(f"memory: {n} x {a.memory_grid}x{a.memory_grid} numpy in {mem['seconds']:.1f} s, "
                  f"peak RSS {mem['peak_rss_mb']:.0f} MB")
    print("targets:", json.dumps(checks))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"results": results, "memory": mem, "checks": checks}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
