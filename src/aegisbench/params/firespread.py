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

from dataclasses import dataclass, fields
from pathlib import Path

import yaml

from aegisbench.errors import BadInput
from aegisbench.fields import check_int, is_int
from aegisbench.schema import Declared, param

WHERE = "params.yaml: firespread"


@dataclass(frozen=True)
class ForecastParams(Declared, where=f"{WHERE}.forecast"):
    """The forecast task of seed 003: observe frames ``1..observe`` of one realization,
    forecast the burn probability of frames ``observe+1 .. observe+horizon``."""

    observe: int = param(10, lo=1, unit="frames", doc="frames given to the forecaster")
    horizon: int = param(50, lo=1, unit="frames", doc="frames forecast after the observed ones")
    threshold: float = param(0.5, lo=0.0, hi=1.0, hi_open=True, unit="probability",
                             doc="declared threshold of the F2R metrics (p > threshold is burnt, as seed 003)")
    eval_realizations: int = param(60, lo=1, doc="realizations 0..n-1 of every test IC forecast, held out "
                                                 "of the statistic")
    ece_bins: int = param(10, lo=1, hi=1000, doc="calibration-curve bins (seed 003: 10; 15 in its Var[Z_t] "
                                                 "studies)")


@dataclass(frozen=True)
class FirespreadParams(Declared, where=WHERE):
    """Seed 003's fire-spread model and its ensembles (defaults: the seed's parameters:
    64x64 grid, density 0.72, q_threshold 5, I_seed 3, q_die 3, 3 seeds, S-levels 0..50
    step 5, 1000 realizations per initial condition). The physics (``q_threshold`` ..
    ``max_steps``) is declared here once; :class:`aegisbench.firespread.model.SeedModel`
    takes its declarations."""

    height: int = param(64, lo=3, hi=4096, unit="cells", key="grid", doc="grid rows")
    width: int = param(64, lo=3, hi=4096, unit="cells", key="grid", doc="grid columns")
    q_threshold: float = param(5.0, lo=0.0, hi=1e6, unit="heat", doc="a tree ignites only above this heat")
    i_seed: float = param(3.0, lo=0.0, hi=1e6, unit="x q_threshold", doc="heat of a fire seed")
    q_die: float = param(3.0, lo=0.0, hi=1e6, unit="heat per tick", doc="heat an ember loses per tick")
    ember_ticks: int = param(12, lo=1, hi=1000, unit="ticks", doc="ticks an ember burns")
    forest_density: float = param(0.72, lo=0.0, hi=1.0, lo_open=True, unit="fraction", doc="share of tree cells")
    forest_clustering: int = param(0, lo=0, hi=64, unit="cells",
                                   doc="radius of the integer box smoothing of the layout noise (0: iid)")
    n_seeds: int = param(3, lo=1, doc="fire seeds per initial condition")
    s_levels: tuple[int, ...] = param(tuple(range(0, 55, 5)), type=int, each=True, lo=0, hi=100, unit="%",
                                      doc="stochasticity levels S = (1 - p_ignite) * 100, strictly increasing")
    realizations: int = param(1000, lo=2, hi=65535, doc="realizations per initial condition and S-level")
    initial_conditions: int = param(10, lo=1, doc="forest layouts with their seeds")
    test_initial_conditions: tuple[int, ...] = param((6, 7, 8, 9), type=int, each=True, lo=0,
                                                     doc="initial conditions held out for testing")
    #: ignition times are int16; 32000 is the tighter of the two former declarations
    max_steps: int = param(2000, lo=1, hi=32000, unit="ticks", doc="a realization is cut after this many ticks")
    realizations_per_shard: int = param(250, lo=1, doc="realizations per dataset shard")
    forecast: ForecastParams = param(default_factory=ForecastParams, doc="the forecast task")

    def cross_check(self) -> None:
        if not self.s_levels:
            raise self.invalid("s_levels", "needs at least one S-level")
        if len(set(self.s_levels)) != len(self.s_levels) or list(self.s_levels) != sorted(self.s_levels):
            raise self.invalid("s_levels", "must be strictly increasing")
        for i in self.test_initial_conditions:
            check_int(i, "test_initial_conditions", 0, self.initial_conditions - 1, error=BadInput,
                      where=f"{WHERE}.test_initial_conditions")
        if len(set(self.test_initial_conditions)) != len(self.test_initial_conditions):
            raise self.invalid("test_initial_conditions", "duplicate initial conditions")
        if 2 * self.forecast.eval_realizations > self.realizations:
            raise self.invalid("forecast.eval_realizations", "must be at most half of realizations (the statistic "
                               "is built from the others, and the ECE floor scores as many of those)")
        if self.forecast.observe + self.forecast.horizon > self.max_steps:
            raise BadInput("observe + horizon exceeds max_steps", where=WHERE)
        if self.n_seeds > self.height * self.width:
            raise self.invalid("n_seeds", "more seeds than cells")

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
        raw = cls.mapping_of(raw, also={"grid"})
        if "grid" in raw:
            grid = raw.pop("grid")
            if not (isinstance(grid, (list, tuple)) and len(grid) == 2):
                raise BadInput("grid must be [height, width]", where=f"{WHERE}.grid")
            raw["height"], raw["width"] = grid
        fc = ForecastParams.mapping_of(raw.pop("forecast", None))
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
