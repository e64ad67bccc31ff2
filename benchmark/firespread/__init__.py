"""The fire-spread track (seed 003): stochastic CA ensembles, the statistic ground truth,
probabilistic forecasts and their F2R / F2S scores.

Modules:

* :mod:`~aegisbench.firespread.params` - the ``firespread:`` section of ``params.yaml``;
* :mod:`~aegisbench.firespread.layout` - initial conditions (forest layout, fire seeds);
* :mod:`~aegisbench.firespread.model` - the heat-accumulation CA (numpy, sparse, bit-exact),
  :mod:`~aegisbench.firespread.torch_backend` (dense, CPU/CUDA) and the counter-based
  random streams of :mod:`~aegisbench.firespread.streams`;
* :mod:`~aegisbench.firespread.ensemble` - fire maps, burn counts, ``Z_t`` moments, Dice;
* :mod:`~aegisbench.firespread.truth` - reading the built configs back;
* :mod:`~aegisbench.firespread.submission` - forecast Parquet layout and validation;
* :mod:`~aegisbench.firespread.scoring` / :mod:`~aegisbench.firespread.evaluate` - scores;
* :mod:`~aegisbench.firespread.forecasters` / :mod:`~aegisbench.firespread.convlstm` - baselines;
* :mod:`~aegisbench.firespread.ndws` - Next Day Wildfire Spread TFRecords without TensorFlow;
* :mod:`~aegisbench.firespread.commands` - the ``firespread-*`` CLI commands.

Where Appendix B of seed 003 leaves the model open, these choices are made (and are
what the numbers mean):

1. Eq. (6) is used as written: a tree gains the heat ``q`` of every FIRE neighbour in
   ``N_R``; embers add ``q_die`` each. Heat saturates at the seed heat
   ``I_seed * q_threshold`` (without a bound, eq. (6) triples the heat at every step of
   a straight front). Heat is exact fixed point (1024 units per ``q_threshold``).
2. ``p_ignite`` is one Bernoulli trial per step in which a tree gains heat and is above
   ``q_threshold`` (the heat crossing "triggers" the state change). A tree next to a
   fire therefore gets a few chances (fire step + ember steps), not infinitely many, so
   fires can die out at high S-levels as §3.3 describes; the seeds get one trial at step 1.
3. Fire lasts one step; an ember radiates ``q_die`` and loses ``q_die`` per step and
   goes dark (dead) once its heat is no longer above ``q_threshold``. With the defaults
   (``I_seed = 1.5``, ``q_die = 0.5``) an ember radiates for exactly one step.
4. The defaults (iid forest density 0.45 on 64x64, two seeds in the central half, Moore
   radius 1) put the CA near its percolation threshold, where ``Var[Z_t]`` at the end of
   the run rises from 0 at S-Level 0, peaks around S-Level 20 and falls again as fires
   die early (seed 003 Fig. 3).
5. Frame ``t`` is the burnt mask after ``t`` steps (``0 <= ignition_time <= t``);
   ``Z_t`` counts unburnt trees. The forecast target is the burnt mask; Dice strata use
   successive burnt masks, with Dice(empty, empty) = 1.
6. The ensemble oracle is the *unconditional* statistic. Its Brier against one
   realization is the floor for forecasts that do not use the observed frames; a
   forecaster that conditions on the first frames can go below it (negative
   ``excess_brier``), which is information, not an error.
"""
