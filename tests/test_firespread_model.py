"""Seed 003's fire-spread model: its properties derived independently (corridor trials,
shortest paths at S = 0, exact small cases, Fig. 3), determinism, bad input."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from aegisbench.errors import BadInput
from aegisbench.firespread.ensemble import burnt_curves, z_moments
from aegisbench.firespread.layout import InitialCondition, make_initial_condition
from aegisbench.firespread import simulate_realizations  # the public entry point
from aegisbench.firespread.model import SeedModel, simulate
from aegisbench.params.firespread import FirespreadParams
from aegisbench.firespread.streams import stream_key, uniforms

V = "0.1.0-test"


def _within(est: float, p: float, n: int, z: float = 4.5) -> bool:
    return abs(est - p) <= z * np.sqrt(p * (1 - p) / n) + 1e-12


def _bfs(tree: np.ndarray, seeds) -> np.ndarray:
    """Frame of each tree reached by one orthogonal step per tick from the seeds (-1: never)."""
    h, w = tree.shape
    d = np.full((h, w), -1, np.int64)
    todo = deque()
    for y, x in seeds:
        d[y, x] = 1
        todo.append((y, x))
    while todo:
        y, x = todo.popleft()
        for a, b in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
            if 0 <= a < h and 0 <= b < w and tree[a, b] and d[a, b] < 0:
                d[a, b] = d[y, x] + 1
                todo.append((a, b))
    return d


@pytest.mark.parametrize("s_level", [10, 30, 50])
def test_corridor_link_probability_is_p_ignite(s_level):
    # a burning cell of a 1-wide corridor asks its successor once: one Bernoulli(p_ignite) trial
    n = 6000
    tau = simulate_realizations(np.ones((1, 25), bool), [(0, 0)], s_level, n, seed=s_level)[:, 0, :]
    burnt = tau >= 0
    p = 1 - s_level / 100
    assert _within(burnt[:, 0].mean(), p, n)  # the seed passes the same test
    trials = int(burnt[:, :-1].sum())
    assert _within(burnt[:, 1:].sum() / trials, p, trials)
    # burning is contiguous from the seed and advances one cell per tick
    k = burnt.sum(axis=1)
    assert (burnt == (np.arange(25)[None, :] < k[:, None])).all()
    assert (tau[burnt] == np.broadcast_to(np.arange(1, 26), tau.shape)[burnt]).all()


def test_one_trial_per_ask_two_seeds_one_tree():
    # seeds A, B at both ends of a 1x3 strip [A, M, B]: each passes one trial at setup (frame 1);
    # M is asked once by each burning seed; a seed that failed stays a (hot) tree that M asks
    n = 40000
    p = 0.6
    tau = simulate_realizations(np.ones((1, 3), bool), [(0, 0), (0, 2)], 40, n, seed=7)[:, 0, :]
    a, b, mid = tau[:, 0] == 1, tau[:, 2] == 1, tau[:, 1] >= 0
    assert _within(a.mean(), p, n) and _within(b.mean(), p, n)
    both, one = a & b, a ^ b
    assert _within(mid[both].mean(), 1 - (1 - p) ** 2, int(both.sum()))
    assert _within(mid[one].mean(), p, int(one.sum()))
    assert not mid[~a & ~b].any() and (tau[mid, 1] == 2).all()
    assert _within(mid.mean(), p * p * (1 - (1 - p) ** 2) + 2 * p * (1 - p) * p, n)
    late = (tau[:, 0] == 3) | (tau[:, 2] == 3)  # a failed seed lit by M one tick later
    assert _within(late[one & mid].mean(), p, int((one & mid).sum()))
    assert _within((tau[:, 0] >= 0).mean(), p + (1 - p) * p ** 3, n)


def test_s_level_0_is_deterministic_shortest_path_front():
    p = FirespreadParams()
    for i in range(4):
        ic = make_initial_condition(p, V, i)
        tau = simulate_realizations(ic.tree, ic.seeds, 0, 5, seed=i)
        assert (tau == tau[0]).all()
        assert np.array_equal(tau[0], _bfs(ic.tree, ic.seeds))
    full = simulate_realizations(np.ones((9, 9), bool), [(4, 4)], 0, 1)[0]
    yy, xx = np.mgrid[:9, :9]
    assert np.array_equal(full, 1 + np.abs(yy - 4) + np.abs(xx - 4))  # 4 neighbours, not 8


def test_embers_burn_for_twelve_ticks_and_heat_accumulates():
    tree = np.zeros((5, 5), bool)
    tree[2, 2] = True
    ic = InitialCondition(0, tree, [[2, 2]])
    e = simulate(ic, SeedModel(), 1.0, ("lonely",), range(3))
    assert (e.ignition_time[:, 2, 2] == 1).all() and ((e.ignition_time >= 0).sum() == 3)
    assert (e.n_steps == 12).all() and not e.truncated.any()
    assert (simulate(ic, SeedModel(ember_ticks=5), 1.0, ("lonely",), range(2)).n_steps == 5).all()
    # a seed whose heat does not exceed q_threshold never ignites
    assert (simulate(ic, SeedModel(i_seed=1.0), 1.0, ("cold",), range(2)).ignition_time == -1).all()
    # the asked tree sums the heat of its 8 Moore neighbours that burn, embers included, and an
    # ember's heat falls by q_die a tick, below zero: trees (0,0) seed, (0,1), (1,1)
    tree = np.zeros((2, 2), bool)
    tree[0, 0] = tree[0, 1] = tree[1, 1] = True
    kw = {"q_threshold": 4.0, "i_seed": 1.5}  # seed heat 6
    for q_die, burns in ((1.0, True), (3.0, True), (10.0, False)):
        # tick 1: the seed lights (0,1) with heat 6 and cools to 6 - q_die; tick 2: (0,1) asks
        # (1,1), whose burning Moore neighbours are (0,1) (6) and the ember (0,0) (6 - q_die)
        tau = simulate_realizations(tree, [(0, 0)], 0, 2, q_die=q_die, **kw)
        assert (tau[:, 0, 1] == 2).all()
        assert (tau[:, 1, 1] == (3 if burns else -1)).all(), (q_die, tau[0].tolist())


def test_same_key_same_maps_across_batch_sizes_and_blocks():
    p = FirespreadParams.from_dict({"grid": [24, 24], "realizations": 50})
    ic = make_initial_condition(p, V, 0)
    m = SeedModel.from_params(p)

    def run(s, reals, key=(V, 0)):
        return simulate(ic, m, p.p_ignite(s), (*key, s), reals)

    whole = run(20, range(50))
    parts = [run(20, range(a, min(a + 7, 50))) for a in range(0, 50, 7)]
    assert np.array_equal(whole.ignition_time, np.concatenate([e.ignition_time for e in parts]))
    assert np.array_equal(whole.n_steps, np.concatenate([e.n_steps for e in parts]))
    assert np.array_equal(run(20, [31, 2, 17]).ignition_time, whole.ignition_time[[31, 2, 17]])
    assert not np.array_equal(run(25, range(50)).ignition_time, whole.ignition_time)
    assert not np.array_equal(run(20, range(50), ("other", 0)).ignition_time, whole.ignition_time)
    a = simulate_realizations(ic.tree, ic.seeds, 20, 30, seed=5)
    assert a.dtype == np.int16 and a.shape == (30, 24, 24)
    assert a.tobytes() == simulate_realizations(ic.tree, ic.seeds, 20, 30, seed=5).tobytes()
    assert a.tobytes() != simulate_realizations(ic.tree, ic.seeds, 20, 30, seed=6).tobytes()


def test_physical_sanity():
    p = FirespreadParams.from_dict({"grid": [32, 32], "realizations": 40})
    for i in range(3):
        ic = make_initial_condition(p, V, i)
        e = simulate(ic, SeedModel.from_params(p), p.p_ignite(20), (V, i), range(40))
        tau = e.ignition_time
        assert (tau[:, ~ic.tree] == -1).all()
        assert (tau[:, ~ic.seed_mask()] != 1).all()
        assert (np.diff(burnt_curves(tau, e.t_max + 1), axis=1) >= 0).all()
        # every later ignition has an orthogonal neighbour ignited exactly one tick before
        pad = np.pad(tau, ((0, 0), (1, 1), (1, 1)), constant_values=-1)
        h, w = ic.shape
        asked = np.zeros(tau.shape, bool)
        for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            nb = pad[:, 1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
            asked |= (nb >= 1) & (nb == tau - 1)
        later = tau > 1
        assert later.any() and asked[later].all()


def test_fig3_macro_variance_peaks_near_s20_and_fires_die_at_s50():
    p = FirespreadParams()  # the seed's parameters
    m = SeedModel.from_params(p)
    levels = list(range(0, 55, 5))
    sd, burnt_frac = {}, {}
    for s in levels:
        sds, fr = [], []
        for i in range(3):
            ic = make_initial_condition(p, V, i)
            e = simulate(ic, m, p.p_ignite(s), (V, "fig3", i, s), range(300))
            _, zv = z_moments(e.ignition_time, ic.n_trees, e.t_max + 1)
            sds.append(np.sqrt(zv.max()))
            fr.append((e.ignition_time >= 0).sum(axis=(1, 2)).mean() / ic.n_trees)
        sd[s], burnt_frac[s] = float(np.mean(sds)), float(np.mean(fr))
    peak = max(sd, key=sd.get)
    assert sd[0] == 0.0
    assert 15 <= peak <= 25, sd
    assert sd[50] < sd[peak]
    assert burnt_frac[50] < 0.05 and burnt_frac[0] > 0.9


def test_counter_stream_is_order_and_batch_free():
    k = stream_key("x", 1)
    cells = np.arange(100)
    a = uniforms(k, np.full(100, 3), 9, cells)
    assert np.array_equal(a[50:], uniforms(k, np.full(50, 3), 9, cells[50:]))


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"seeds": [(0, 9)]}, ValueError, r"seeds\[0\] = \(0, 9\) lies outside"),
    ({"seeds": [(-1, 0)]}, ValueError, "outside"),
    ({"seeds": [(0, 0), (0, 0)]}, ValueError, "duplicate"),
    ({"seeds": [(1, 1)]}, ValueError, "not a tree"),
    ({"seeds": [(0.5, 1)]}, TypeError, "integer"),
    ({"tree": np.ones((4, 4), np.uint8)}, TypeError, "boolean"),
    ({"tree": np.ones(4, bool)}, ValueError, "2-D"),
    ({"s_level": 101}, ValueError, "s_level"),
    ({"s_level": -1}, ValueError, "s_level"),
    ({"q_die": -1.0}, ValueError, "q_die"),
    ({"q_threshold": -0.1}, ValueError, "q_threshold"),
    ({"wind": 3}, ValueError, "unknown model parameter"),
])
def test_simulate_realizations_refuses_bad_input(kwargs, exc, match):
    tree = np.ones((4, 4), bool)
    tree[1, 1] = False
    args = {"tree": tree, "seeds": [(0, 0)], "s_level": 10, "n": 2, **kwargs}
    with pytest.raises(exc, match=match):
        simulate_realizations(args.pop("tree"), args.pop("seeds"), args.pop("s_level"), args.pop("n"), **args)


def test_params_validation_names_the_field():
    with pytest.raises(BadInput, match="s_levels"):
        FirespreadParams.from_dict({"s_levels": [10, 5]})
    with pytest.raises(BadInput, match="unknown keys"):
        FirespreadParams.from_dict({"neighbourhood": "moore"})
    with pytest.raises(BadInput, match=r"firespread\.q_die"):
        FirespreadParams.from_dict({"q_die": -3})
    with pytest.raises(BadInput, match=r"firespread\.q_threshold"):
        FirespreadParams.from_dict({"q_threshold": -1})
    with pytest.raises(BadInput, match="eval_realizations"):
        FirespreadParams.from_dict({"realizations": 10, "forecast": {"eval_realizations": 6}})
    p = FirespreadParams()
    assert (p.height, p.forest_density, p.q_threshold, p.i_seed, p.q_die, p.n_seeds) == (64, 0.72, 5, 3, 3, 3)
    assert FirespreadParams.from_dict(p.to_dict()) == p
    assert p.p_ignite(35) == pytest.approx(0.65)


def test_layout_is_reproducible_and_dense_as_declared():
    p = FirespreadParams.from_dict({"grid": [30, 40], "forest_density": 0.5, "forest_clustering": 2, "n_seeds": 3})
    a, b = make_initial_condition(p, V, 2), make_initial_condition(p, V, 2)
    assert np.array_equal(a.tree, b.tree) and np.array_equal(a.seeds, b.seeds)
    assert a.n_trees == 600 and len(a.seeds) == 3 and a.tree[tuple(a.seeds.T)].all()
    assert not np.array_equal(a.tree, make_initial_condition(p, V, 3).tree)


@pytest.mark.parametrize("section, needle", [
    ({"q_die": -3}, "firespread.q_die"),
    ({"q_threshold": -5.0}, "firespread.q_threshold"),
    ({"wind": 3}, "unknown keys ['wind']"),
    ({"s_levels": [0, 120]}, "firespread.s_levels"),
])
def test_cli_refuses_bad_params_with_one_line_and_writes_nothing(tmp_path, capsys, section, needle):
    import yaml

    from aegisbench import cli
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"benchmark_version": V, "paths": {"sources": str(tmp_path / "src"),
                                                                        "dataset": str(tmp_path / "repo")},
                                      "sources": {}, "firespread": section}))
    for argv in (["firespread-simulate", "--params", str(params), "--realizations", "3"],
                 ["build", "--params", str(params), "--skip-sources"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]


def test_cli_simulate_refuses_an_s_level_outside_0_100(capsys):
    from aegisbench import cli
    assert cli.main(["firespread-simulate", "--s-level", "120", "--realizations", "2"]) == 2
    err = capsys.readouterr().err
    assert "--s-level" in err and err.count("\n") == 1
