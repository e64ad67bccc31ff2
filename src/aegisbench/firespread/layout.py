"""Initial conditions of the fire-spread ensembles: forest layout and fire seeds.

A layout is a boolean ``tree`` map (seed 003 App. B: every cell is 'tree' or
'no-tree'). Trees form clumps: integer noise from
``rng_for(version, "firespread", "initial_condition", index)`` is box-smoothed
``forest_clustering`` times in exact integer arithmetic and the top
``round(forest_density * H * W)`` cells become trees (ties broken by a second
random integer), so the layout is bit-identical on every platform. Fire seeds are
``n_seeds`` distinct tree cells drawn from the central half of the grid (from all
trees if the centre has too few).

>>> from aegisbench.params.firespread import FirespreadParams
>>> p = FirespreadParams.from_dict({"grid": [24, 24], "realizations": 10})
>>> ic = make_initial_condition(p, "0.1.0", 0)
>>> ic.tree.shape, int(ic.tree.sum()) == round(p.forest_density * 24 * 24), bool(ic.tree[tuple(ic.seeds.T)].all())
((24, 24), True, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aegisbench.params.firespread import FirespreadParams
from aegisbench.hashing import rng_for


@dataclass(frozen=True, eq=False)
class InitialCondition:
    """One initial condition: ``tree`` (H, W) bool and ``seeds`` (n, 2) int (row, col)."""

    index: int
    tree: np.ndarray
    seeds: np.ndarray

    def __post_init__(self) -> None:
        tree = np.asarray(self.tree, dtype=bool)
        seeds = np.asarray(self.seeds, dtype=np.int64).reshape(-1, 2)
        if tree.ndim != 2:
            raise ValueError(f"tree must be 2-D, got shape {tree.shape}")
        if len(seeds) == 0:
            raise ValueError("an initial condition needs at least one fire seed")
        h, w = tree.shape
        if (seeds < 0).any() or (seeds[:, 0] >= h).any() or (seeds[:, 1] >= w).any():
            raise ValueError("seed outside the grid")
        if not tree[seeds[:, 0], seeds[:, 1]].all():
            raise ValueError("fire seeds must be tree cells")
        if len({(int(a), int(b)) for a, b in seeds}) != len(seeds):
            raise ValueError("duplicate fire seeds")
        tree.setflags(write=False)
        seeds.setflags(write=False)
        object.__setattr__(self, "tree", tree)
        object.__setattr__(self, "seeds", seeds)

    @property
    def shape(self) -> tuple[int, int]:
        return self.tree.shape

    @property
    def n_trees(self) -> int:
        return int(self.tree.sum())

    def seed_mask(self) -> np.ndarray:
        m = np.zeros(self.shape, bool)
        m[self.seeds[:, 0], self.seeds[:, 1]] = True
        return m


def _box_smooth(a: np.ndarray, radius: int) -> np.ndarray:
    """Exact integer box sum over a (2r+1)^2 window with edge replication."""
    p = np.pad(a, radius, mode="edge")
    c = np.cumsum(np.cumsum(p, axis=0), axis=1)
    c = np.pad(c, ((1, 0), (1, 0)))
    k = 2 * radius + 1
    return c[k:, k:] - c[:-k, k:] - c[k:, :-k] + c[:-k, :-k]


def forest_layout(rng: np.random.Generator, height: int, width: int, density: float,
                  clustering: int) -> np.ndarray:
    """Boolean tree map with exactly ``round(density * H * W)`` trees."""
    noise = rng.integers(0, 1 << 20, (height, width), dtype=np.int64)
    tie = rng.integers(0, 1 << 30, (height, width), dtype=np.int64)
    for _ in range(clustering):
        noise = _box_smooth(noise, 1)
    n = int(round(density * height * width))
    order = np.lexsort((tie.ravel(), -noise.ravel()))
    tree = np.zeros(height * width, bool)
    tree[order[:n]] = True
    return tree.reshape(height, width)


def make_initial_condition(params: FirespreadParams, version: str, index: int) -> InitialCondition:
    """Initial condition ``index`` of the ensembles of benchmark ``version``."""
    rng = rng_for(version, "firespread", "initial_condition", index)
    h, w = params.height, params.width
    tree = forest_layout(rng, h, w, params.forest_density, params.forest_clustering)
    if tree.sum() < params.n_seeds:
        raise ValueError(f"layout has {int(tree.sum())} trees, fewer than n_seeds={params.n_seeds}")
    centre = np.zeros_like(tree)
    centre[h // 4: h - h // 4, w // 4: w - w // 4] = True
    cand = np.flatnonzero(tree & centre)
    if len(cand) < params.n_seeds:
        cand = np.flatnonzero(tree)
    pick = np.sort(rng.choice(cand, size=params.n_seeds, replace=False))
    seeds = np.stack(np.unravel_index(pick, (h, w)), axis=1)
    return InitialCondition(index=index, tree=tree, seeds=seeds)
