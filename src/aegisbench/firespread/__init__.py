"""The fire-spread track (seed 003): stochastic CA ensembles, the statistic ground truth,
probabilistic forecasts and their F2R / F2S scores.

Modules:

* :mod:`~aegisbench.params.firespread` - the ``firespread:`` section of ``params.yaml``;
* :mod:`~aegisbench.firespread.layout` - initial conditions (forest layout, fire seeds);
* :mod:`~aegisbench.firespread.model` - seed 003's model exactly (its NetLogo generator: 4-neighbour
  asks in random order, Moore heat sums, one p_ignite trial per ask, embers cooling by ``q_die``
  for 12 ticks), a compiled kernel; :func:`simulate_realizations` is the public entry point,
  with the per-realization random streams of :mod:`~aegisbench.firespread.streams`;
* :mod:`~aegisbench.firespread.ensemble` - fire maps, burn counts, ``Z_t`` moments, Dice;
* :mod:`~aegisbench.dataset.firespread_truth` - reading the built configs back;
* :mod:`~aegisbench.forecasters.submission` - forecast Parquet layout and validation;
* :mod:`~aegisbench.evaluation.firespread_scoring` - F2R / F2S scores (from the per-unit sufficient statistics of
  :mod:`~aegisbench.evaluation.firespread_cells`); :mod:`~aegisbench.evaluation.firespread_track` - the
  track plug-in (reading and scoring submissions for ``aegisbench validate`` / ``evaluate``);
* :mod:`~aegisbench.forecasters.baselines` - the reference forecasters' submissions;
* :mod:`~aegisbench.leaderboard.firespread_report` - Fig. 3 (SD[Z_t] per S-Level) and the F2R-vs-F2S table;
* :mod:`~aegisbench.forecasters.simple` / :mod:`~aegisbench.forecasters.convlstm` - baselines;
* :mod:`~aegisbench.evaluation.firespread_ndws` - Next Day Wildfire Spread TFRecords without TensorFlow;
* :mod:`~aegisbench.firespread.commands` - the ``firespread-*`` CLI commands.

What the numbers mean:

1. The model is the seed's released generator (Appendix B), not a re-reading of its prose:
   see :mod:`~aegisbench.firespread.model`. ``S-Level = (1 - p_ignite) * 100`` is, on a
   one-cell corridor, exactly one minus the per-link ignition probability. The seed's
   parameters are the defaults (64x64, density 0.72, q_threshold 5, I_seed 3, q_die 3, 3 seeds).
2. Frame ``t`` is the burnt mask ``0 <= ignition_time <= t``; the seeds burn at frame 1 and
   the front advances one orthogonal step per tick at S-Level 0. ``Z_t`` counts unburnt trees.
   The Dice strata use successive burnt masks, with Dice(empty, empty) = 1.
3. Held-out truth: realizations ``0..eval_realizations-1`` of each test ensemble are the
   ones forecasts are scored against; the statistic (the oracle, the F2S reference) counts
   only the others. The next ``eval_realizations`` realizations of the statistic give the
   ECE floor: what a perfectly calibrated forecaster scores on that many cells.
4. A cell is forecast burnt iff ``p > threshold`` (0.5), as in the seed; ECE uses
   ``ece_bins`` uniform bins (10, the seed's calibration-curve choice; it uses 15 in its
   Var[Z_t] studies).
5. The ensemble oracle is the *unconditional* statistic. A forecaster that conditions on
   the observed frames can beat its Brier (negative ``excess_brier``): information, not an error.
"""

__all__ = ["simulate_realizations"]


def __getattr__(name: str):
    """``aegisbench.firespread.simulate_realizations`` without importing the kernel on every
    ``aegisbench.firespread.*`` import."""
    if name == "simulate_realizations":
        from aegisbench.firespread.model import simulate_realizations
        return simulate_realizations
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
