"""The fire-spread CA: determinism, physical sanity, macro variance, backends, params."""

from __future__ import annotations

import numpy as np
import pytest

from aegisbench.errors import BadInput
from aegisbench.firespread.ensemble import burn_counts, burnt_curves, z_moments
from aegisbench.firespread.layout import InitialCondition, make_initial_condition
from aegisbench.firespread.model import EMPTY, HeatModel, neighbourhood_offsets, simulate
from aegisbench.firespread.params import FirespreadParams
from aegisbench.firespread.streams import stream_key, uniforms

V = "0.1.0-test"


@pytest.fixture(scope="module")
def small():
    p = FirespreadParams.from_dict({"grid": [24, 24], "realizations": 50})
    return p, HeatModel.from_params(p), [make_initial_condition(p, V, i) for i in range(3)]


def run(p, m, ic, s, reals, **kw):
    return simulate(ic, m, p.p_ignite(s), (V, ic.index, s), reals, **kw)


def test_same_key_same_maps_across_batch_sizes_and_blocks(small):
    p, m, ics = small
    whole = run(p, m, ics[0], 20, range(50))
    parts = [run(p, m, ics[0], 20, range(a, min(a + 7, 50))) for a in range(0, 50, 7)]
    assert np.array_equal(whole.ignition_time, np.concatenate([e.ignition_time for e in parts]))
    assert np.array_equal(whole.n_steps, np.concatenate([e.n_steps for e in parts]))
    shuffled = run(p, m, ics[0], 20, [31, 2, 17])
    assert np.array_equal(shuffled.ignition_time, whole.ignition_time[[31, 2, 17]])
    # a different key or S-level changes the ensemble
    assert not np.array_equal(run(p, m, ics[0], 25, range(50)).ignition_time, whole.ignition_time)
    other = simulate(ics[0], m, 0.8, ("other", 0, 20), range(50))
    assert not np.array_equal(other.ignition_time, whole.ignition_time)


def test_counter_stream_is_order_and_batch_free():
    k = stream_key("x", 1)
    cells = np.arange(100)
    a = uniforms(k, np.full(100, 3), 9, cells)
    b = uniforms(k, np.full(50, 3), 9, cells[50:])
    assert np.array_equal(a[50:], b)
    big = uniforms(k, np.repeat(np.arange(200), 50), 1, np.tile(np.arange(50), 200))
    assert 0.45 < big.mean() < 0.55 and abs(np.corrcoef(big[:-1], big[1:])[0, 1]) < 0.03


def test_s_level_0_is_deterministic(small):
    p, m, ics = small
    for ic in ics:
        e = run(p, m, ic, 0, range(20))
        assert (e.ignition_time == e.ignition_time[0]).all()
        zm, zv = z_moments(e.ignition_time, ic.n_trees, e.t_max + 1)
        assert (zv == 0).all()


def test_physical_sanity(small):
    p, m, ics = small
    offsets = neighbourhood_offsets(p.neighbourhood, p.radius)
    for ic in ics:
        for s in (0, 30):
            e = run(p, m, ic, s, range(20))
            tau = e.ignition_time
            # no fire without fuel; seeds are the only cells that can burn at step 1
            assert (tau[:, ~ic.tree] == -1).all()
            assert (tau[:, ~ic.seed_mask()] != 1).all()
            # burnt area is monotone in time
            curves = burnt_curves(tau, e.t_max + 1)
            assert (np.diff(curves, axis=1) >= 0).all()
            assert (tau <= e.n_steps[:, None, None]).all()
            # every ignition after step 1 has a neighbour in N_R that was radiating one step
            # before: FIRE (ignited at tau-1) or, with the default q_die, a one-step EMBER (tau-2)
            pad = np.pad(tau, ((0, 0), (1, 1), (1, 1)), constant_values=-1).astype(np.int32)
            source = np.zeros(tau.shape, bool)
            h, w = ic.shape
            for dy, dx in offsets:
                nb = pad[:, 1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
                source |= (nb >= 0) & (nb >= tau - 2) & (nb <= tau - 1)
            later = tau > 1
            assert later.any() and source[later].all()


def test_no_fuel_no_fire():
    tree = np.zeros((10, 10), bool)
    tree[5, 5] = True
    ic = InitialCondition(0, tree, [[5, 5]])
    m = HeatModel(offsets=neighbourhood_offsets("moore", 1), q_threshold=1024, q_seed=1536, q_die=512)
    e = simulate(ic, m, 1.0, ("lonely",), range(3))
    assert (e.ignition_time[:, 5, 5] == 1).all() and ((e.ignition_time >= 0).sum() == 3)
    assert (e.n_steps == 3).all()  # fire at 1, ember at 2, dark at 3


def test_macro_variance_as_in_fig3(small):
    p, m, ics = small
    final_sd = []
    for s in (0, 5, 10, 20):
        sds = []
        for ic in ics:
            e = run(p, m, ic, s, range(50))
            _, zv = z_moments(e.ignition_time, ic.n_trees, e.t_max + 1)
            sds.append(np.sqrt(zv.max()))
        final_sd.append(np.mean(sds))
    assert final_sd[0] == 0
    assert final_sd[0] < final_sd[1] < final_sd[2] < final_sd[3]


def test_torch_backend_counter_mode_is_bit_identical(small):
    pytest.importorskip("torch")
    p, m, ics = small
    a = run(p, m, ics[1], 15, range(12))
    b = run(p, m, ics[1], 15, range(12), backend="torch", rng="counter", device="cpu")
    assert np.array_equal(a.ignition_time, b.ignition_time) and np.array_equal(a.n_steps, b.n_steps)


def test_torch_backend_statistically_equivalent():
    pytest.importorskip("torch")
    p = FirespreadParams.from_dict({"grid": [20, 20], "realizations": 400})
    m = HeatModel.from_params(p)
    ic = make_initial_condition(p, V, 4)
    n = 400
    a = simulate(ic, m, 0.8, (V, "eq"), range(n))
    b = simulate(ic, m, 0.8, (V, "eq"), range(n), backend="torch", device="cpu")
    frames = [5, 10, 20]
    fa = burn_counts(a.ignition_time, 20)[frames] / n
    fb = burn_counts(b.ignition_time, 20)[frames] / n
    pbar = (fa + fb) / 2
    se = np.sqrt(np.maximum(pbar * (1 - pbar), 1 / n) * 2 / n)
    z = np.abs(fa - fb) / se
    assert (z < 4.5).all(), float(z.max())  # binomial tolerance, ~2e3 cells compared
    assert np.mean(z > 1.96) < 0.12  # roughly the nominal 5% two-sided rate


def test_heat_model_and_params_validation():
    with pytest.raises(ValueError):
        HeatModel(offsets=((0, 1),), q_threshold=1024, q_seed=1000, q_die=10)
    with pytest.raises(BadInput, match="s_levels"):
        FirespreadParams.from_dict({"s_levels": [10, 5]})
    with pytest.raises(BadInput, match="neighbourhood"):
        FirespreadParams.from_dict({"neighbourhood": "hex"})
    with pytest.raises(BadInput, match="unknown keys"):
        FirespreadParams.from_dict({"gird": [3, 3]})
    p = FirespreadParams.from_dict({"neighbourhood": "von_neumann", "radius": 2})
    assert len(neighbourhood_offsets(p.neighbourhood, p.radius)) == 12
    assert FirespreadParams.from_dict(p.to_dict()) == p
    assert p.p_ignite(35) == pytest.approx(0.65)


def test_layout_is_reproducible_and_dense_as_declared():
    p = FirespreadParams.from_dict({"grid": [30, 40], "forest_density": 0.5, "forest_clustering": 2, "n_seeds": 3})
    a, b = make_initial_condition(p, V, 2), make_initial_condition(p, V, 2)
    assert np.array_equal(a.tree, b.tree) and np.array_equal(a.seeds, b.seeds)
    assert a.n_trees == 600 and len(a.seeds) == 3 and a.tree[tuple(a.seeds.T)].all()
    assert not np.array_equal(a.tree, make_initial_condition(p, V, 3).tree)
    assert (a.tree != EMPTY).any()
