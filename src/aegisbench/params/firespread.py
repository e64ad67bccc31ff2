"""Typed view of the ``firespread:`` section of ``params.yaml``.

Every number of the fire-spread track comes from here: the grid, the
neighbourhood, the heat parameters of seed 003 Appendix B, the S-levels, the
ensemble sizes, the initial conditions and their train/test split, and the
forecast task (observe ``k`` frames, forecast ``h``).

>>> p = FirespreadParams.from_dict({"grid": [24, 24], "realizations": 50})
>>> p.height, p.width, p.realizations, p.s_levels[:3]
(24, 24, 50, (0, 5, 10))
>>> p.p_ignite(20)
0.8
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from aegisbench.errors import BadInput
from aegisbench.fields import check_float, check_int, is_int

WHERE = "params.yaml: firespread"


def _int(v: Any, name: str, lo: int, hi: int | None = None) -> int:
    return check_int(v, name, lo, hi, error=BadInput, where=f"{WHERE}.{name}")


def _float(v: Any, name: str, lo: float, hi: float | None = None, lo_open: bool = False) -> float:
    return check_float(v, name, lo, hi, lo_open=lo_open, error=BadInput, where=f"{WHERE}.{name}")


@dataclass(frozen=True)
class ForecastParams:
    """The forecast task of seed 003: observe frames ``1..observe`` of one realization,
    forecast the burn probability of frames ``observe+1 .. observe+horizon``."""

    observe: int = 10
    horizon: int = 50
    threshold: float = 0.5  # declared threshold of the F2R metrics (p > threshold is "burnt", as seed 003)
    eval_realizations: int = 60  # realizations 0..n-1 of every test IC are forecast, held out of the statistic
    ece_bins: int = 10  # seed 003: 10 bins for calibration curves, 15 in its Var[Z_t] studies

    def __post_init__(self) -> None:
        _int(self.observe, "forecast.observe", 1)
        _int(self.horizon, "forecast.horizon", 1)
        if _float(self.threshold, "forecast.threshold", 0.0, 1.0) == 1.0:
            raise BadInput("must lie in [0, 1): a cell is burnt iff p > threshold", where=f"{WHERE}.forecast.threshold")
        _int(self.eval_realizations, "forecast.eval_realizations", 1)
        _int(self.ece_bins, "forecast.ece_bins", 1, 1000)


@dataclass(frozen=True)
class FirespreadParams:
    """Seed 003's fire-spread model and its ensembles (defaults: the seed's parameters:
    64x64 grid, density 0.72, q_threshold 5, I_seed 3, q_die 3, 3 seeds, S-levels 0..50
    step 5, 1000 realizations per initial condition)."""

    height: int = 64
    width: int = 64
    q_threshold: float = 5.0
    i_seed: float = 3.0
    q_die: float = 3.0
    ember_ticks: int = 12
    forest_density: float = 0.72
    forest_clustering: int = 0  # radius (cells) of the integer box smoothing of the layout noise; 0 = iid
    n_seeds: int = 3
    s_levels: tuple[int, ...] = tuple(range(0, 55, 5))
    realizations: int = 1000
    initial_conditions: int = 10
    test_initial_conditions: tuple[int, ...] = (6, 7, 8, 9)
    max_steps: int = 2000
    realizations_per_shard: int = 250
    forecast: ForecastParams = field(default_factory=ForecastParams)

    def __post_init__(self) -> None:
        _int(self.height, "grid", 3, 4096)
        _int(self.width, "grid", 3, 4096)
        _float(self.q_threshold, "q_threshold", 0.0, 1e6)
        _float(self.i_seed, "i_seed", 0.0, 1e6)
        _float(self.q_die, "q_die", 0.0, 1e6)
        _int(self.ember_ticks, "ember_ticks", 1, 1000)
        _float(self.forest_density, "forest_density", 0.0, 1.0, lo_open=True)
        _int(self.forest_clustering, "forest_clustering", 0, 64)
        _int(self.n_seeds, "n_seeds", 1)
        if not self.s_levels:
            raise BadInput("needs at least one S-level", where=f"{WHERE}.s_levels")
        for s in self.s_levels:
            _int(s, "s_levels", 0, 100)
        if len(set(self.s_levels)) != len(self.s_levels) or list(self.s_levels) != sorted(self.s_levels):
            raise BadInput("must be strictly increasing", where=f"{WHERE}.s_levels")
        _int(self.realizations, "realizations", 2, 65535)
        _int(self.initial_conditions, "initial_conditions", 1)
        for i in self.test_initial_conditions:
            _int(i, "test_initial_conditions", 0, self.initial_conditions - 1)
        if len(set(self.test_initial_conditions)) != len(self.test_initial_conditions):
            raise BadInput("duplicate initial conditions", where=f"{WHERE}.test_initial_conditions")
        _int(self.max_steps, "max_steps", 1, 32000)
        _int(self.realizations_per_shard, "realizations_per_shard", 1)
        if 2 * self.forecast.eval_realizations > self.realizations:
            raise BadInput("must be at most half of realizations (the statistic is built from the others, "
                           "and the ECE floor scores as many of those)", where=f"{WHERE}.forecast.eval_realizations")
        if self.forecast.observe + self.forecast.horizon > self.max_steps:
            raise BadInput("observe + horizon exceeds max_steps", where=WHERE)
        if self.n_seeds > self.height * self.width:
            raise BadInput("more seeds than cells", where=f"{WHERE}.n_seeds")

    # ------------------------------------------------------------------ derived

    @staticmethod
    def p_ignite(s_level: int) -> float:
        """``p_ignite = 1 - S/100`` (S-Level = (1 - p_ignite) * 100, seed 003 §3.1)."""
        return (100 - int(s_level)) / 100.0

    @property
    def train_initial_conditions(self) -> tuple[int, ...]:
        test = set(self.test_initial_conditions)
        return tuple(i for i in range(self.initial_conditions) if i not in test)

    def initial_conditions_of(self, role: str) -> tuple[int, ...]:
        if role == "train":
            return self.train_initial_conditions
        if role == "test":
            return tuple(sorted(self.test_initial_conditions))
        raise ValueError(f"role must be 'train' or 'test', got {role!r}")

    def role_of(self, ic: int) -> str:
        return "test" if ic in self.test_initial_conditions else "train"

    # ------------------------------------------------------------------ parsing

    @classmethod
    def from_dict(cls, raw: dict | None) -> "FirespreadParams":
        raw = dict(raw or {})
        known = {f.name for f in fields(cls)} | {"grid"}
        extra = set(raw) - known
        if extra:
            raise BadInput(f"unknown keys {sorted(extra)}", where=WHERE)
        if "grid" in raw:
            grid = raw.pop("grid")
            if not (isinstance(grid, (list, tuple)) and len(grid) == 2):
                raise BadInput("grid must be [height, width]", where=f"{WHERE}.grid")
            raw["height"], raw["width"] = grid
        fc = raw.pop("forecast", None) or {}
        if not isinstance(fc, dict):
            raise BadInput("must be a mapping", where=f"{WHERE}.forecast")
        fknown = {f.name for f in fields(ForecastParams)}
        if set(fc) - fknown:
            raise BadInput(f"unknown keys {sorted(set(fc) - fknown)}", where=f"{WHERE}.forecast")
        for key in ("s_levels", "test_initial_conditions"):
            if key in raw:
                if not isinstance(raw[key], (list, tuple)):
                    raise BadInput("must be a list", where=f"{WHERE}.{key}")
                raw[key] = tuple(raw[key])
        if "test_initial_conditions" not in raw and "initial_conditions" in raw:
            n = raw["initial_conditions"]
            if is_int(n) and n >= 2:  # the last 40% (10 -> 6..9)
                raw["test_initial_conditions"] = tuple(range(n - max(1, 2 * n // 5), n))
            else:
                raw["test_initial_conditions"] = ()
        if "realizations" in raw and "eval_realizations" not in fc:
            r = raw["realizations"]
            if is_int(r):
                fc = {**fc, "eval_realizations": max(1, min(ForecastParams.eval_realizations, r // 2))}
        return cls(**raw, forecast=ForecastParams(**fc))

    @classmethod
    def load(cls, path: str | Path = "params.yaml") -> "FirespreadParams":
        """The ``firespread:`` section of a params file (defaults when absent)."""
        path = Path(path)
        if not path.exists():
            raise BadInput("params file not found", where=str(path))
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise BadInput(f"malformed YAML: {exc}", where=str(path)) from None
        return cls.from_dict(raw.get("firespread"))

    def to_dict(self) -> dict:
        """Plain-data form (the inverse of :meth:`from_dict`)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("forecast", "height", "width")}
        d["grid"] = [self.height, self.width]
        d["s_levels"] = list(self.s_levels)
        d["test_initial_conditions"] = list(self.test_initial_conditions)
        d["forecast"] = {f.name: getattr(self.forecast, f.name) for f in fields(ForecastParams)}
        return d
