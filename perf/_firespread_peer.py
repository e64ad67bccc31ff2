"""Peer side of perf/firespread.py, run in ``.venv-peers-fire`` (no AegisBench there).

``python _firespread_peer.py NAME LAYOUT.npz P_IGNITE`` prints ``{"version"}``, then serves
``START N`` lines: runs realizations START..START+N-1 of NAME (pytorchfire or wildtorch)
on one thread and answers ``{"seconds", "steps", "burnt"}``.
"""

import contextlib
import json
import sys
import time

import numpy as np
import torch


def runner(name: str, tree: torch.Tensor, ign: torch.Tensor, p_ignite: float):
    """(version, one) where ``one(seed) -> (ticks, burnt cells)`` runs one realization."""
    h, w = tree.shape
    if name == "pytorchfire":
        import pytorchfire
        from pytorchfire import WildfireModel
        env = {"p_veg": torch.where(tree, 0.0, -1.0), "p_den": torch.zeros(h, w), "wind_velocity": torch.zeros(h, w),
               "wind_towards_direction": torch.zeros(h, w), "slope": torch.zeros(h, w, 3, 3), "initial_ignition": ign}
        model = WildfireModel(env, {"a": torch.tensor(0.0), "p_h": torch.tensor(p_ignite), "c_1": torch.tensor(0.0),
                                    "c_2": torch.tensor(0.0), "p_continue": torch.tensor(0.3)}).eval()

        def one(r: int) -> tuple[int, int]:
            steps = 0
            model.reset(seed=r)
            with torch.no_grad():
                while bool(model.state[0].any()) and steps < 10 ** 8:
                    model.compute()
                    steps += 1
            return steps, int(model.state[1].sum() + model.state[0].sum())
        return pytorchfire.__version__, one
    if name == "wildtorch":
        import wildtorch
        from wildtorch import SimulatorConstants, WildTorchSimulator
        wmap = torch.zeros(3, h, w)
        wmap[0] = torch.where(tree, 0.0, -1.0)
        const = SimulatorConstants(p_h=p_ignite, c_1=0, c_2=0, a=0, v=0, p_firebreak=0.0, p_continue_burn=0.9,
                                   device=torch.device("cpu"))
        sim = WildTorchSimulator(wildfire_map=wmap, simulator_constants=const, maximum_step=10 ** 6,
                                 initial_ignition=ign)

        def one(r: int) -> tuple[int, int]:
            steps = 0
            sim.reset()
            sim.seed = r
            while not (sim.terminated or sim.truncated):
                sim.step()
                steps += 1
            return steps, int(sim.fire_state[1].sum() + sim.fire_state[0].sum())
        return wildtorch.__version__, one
    raise SystemExit(f"unknown peer {name}")


def main(name: str, layout: str, p_ignite: str) -> None:
    torch.set_num_threads(1)
    data = np.load(layout)
    tree = torch.as_tensor(data["tree"])
    ign = torch.zeros_like(tree)
    ign[tuple(torch.as_tensor(data["seeds"]).T)] = True
    with contextlib.redirect_stdout(sys.stderr):  # stdout carries the protocol only (pytorchfire prints on import)
        version, one = runner(name, tree, ign, float(p_ignite))
    print(json.dumps({"version": version}), flush=True)
    for line in sys.stdin:
        start, n = map(int, line.split())
        t = time.perf_counter()
        runs = [one(r) for r in range(start, start + n)]
        dt = time.perf_counter() - t
        print(json.dumps({"seconds": dt, "steps": sum(s for s, _ in runs), "burnt": sum(b for _, b in runs)}),
              flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
