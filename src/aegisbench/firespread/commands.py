"""CLI of the fire-spread track: ``firespread-baselines``, ``firespread-simulate``,
``firespread-report`` and ``firespread-ndws``. Fire-spread submissions are checked and
scored by the shared ``aegisbench validate`` / ``aegisbench evaluate``.

Exit status follows the project: 0 ok, 2 bad input (one line naming file/row/field), 1 internal error.
"""

from __future__ import annotations

import argparse
import logging

from aegisbench.cli import command
from aegisbench.cli_options import add_dataset_option, add_out_option, add_params_option, add_results_option
from aegisbench.fields import deprecated_alias
from aegisbench.kernels import GEMMS
from aegisbench.overlap import declare_io
from aegisbench.errors import BadInput
from aegisbench.paths import SUBMISSIONS

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "firespread-baselines", "write the reference forecasters' submissions",
                "Ensemble oracle, persistence, a spread heuristic and a small ConvLSTM trained on the train "
                "initial conditions, each as submissions/<name>/ for `validate` and `evaluate`.",
                ["aegisbench firespread-baselines",
                 "aegisbench firespread-baselines --only persistence,convlstm --convlstm-steps 60 --dtype float16"])
    add_dataset_option(p)
    p.add_argument("--submissions", default=SUBMISSIONS, metavar="DIR",
                   help="the folder of submission folders: writes <submissions>/<forecaster>/")
    deprecated_alias(p, "--out", "--submissions")
    p.add_argument("--only", help="comma-separated subset of oracle,persistence,spread_heuristic,convlstm")
    p.add_argument("--convlstm-steps", type=int, help="training steps of the ConvLSTM (default 300)")
    p.add_argument("--convlstm-hidden", type=int, help="hidden channels of the ConvLSTM (default 8)")
    p.add_argument("--convlstm-gemm", choices=GEMMS, help="BLAS of the ConvLSTM's CPU convolutions: torch's MKL "
                   "path (default) or NumPy's OpenBLAS (faster; other weights and maps)")
    p.add_argument("--dtype", choices=["float32", "float16"], default="float32", help="stored probability type")
    p.add_argument("--verified", action="store_true", help="attest each forecaster's submission with this project's "
                   "private key (private/): the leaderboard shows its rows as verified (run here)")
    declare_io(p, reads={"dataset": "--dataset"}, writes={"submissions": "--submissions"})
    p.set_defaults(func=cmd_baselines)

    p = command(sub, "firespread-simulate", "run one fire-spread ensemble and print its macro statistics",
                "One initial condition at one S-Level with the params.yaml fire-spread model: depletion "
                "steps, final E[Z] and SD[Z], the largest SD[Z_t].",
                ["aegisbench firespread-simulate --ic 0 --s-level 20",
                 "aegisbench firespread-simulate --ic 3 --s-level 60 --realizations 50"])
    add_params_option(p, "params file with a firespread section")
    p.add_argument("--ic", type=int, default=0, help="initial condition index")
    p.add_argument("--s-level", type=int, default=20, help="S-Level, 0..100 (stochasticity of the spread)")
    p.add_argument("--realizations", type=int, help="ensemble size (default: firespread.realizations)")
    p.set_defaults(func=cmd_simulate)

    p = command(sub, "firespread-report", "seed 003 Fig. 3 (SD[Z_t] per S-Level) and the F2R-vs-F2S table "
                "stratified by Var[Z_t]",
                "Reads the fire-spread statistic of the dataset and the fire-spread results; replaces --out "
                "whole.",
                ["aegisbench firespread-report",
                 "aegisbench firespread-report --results results --out reports/firespread"])
    add_dataset_option(p)
    add_results_option(p, "results folder (fire-spread results are read from it)", metavar=None)
    add_out_option(p, "report folder (replaced whole)", default="reports/firespread")
    declare_io(p, reads={"dataset": "--dataset", "results": "--results"}, writes={"out": "--out"})
    p.set_defaults(func=cmd_report)

    p = command(sub, "firespread-ndws", "score forecasts on Next Day Wildfire Spread TFRecords",
                "Reads NDWS .tfrecord files without TensorFlow and scores a forecast (persistence or a "
                "Parquet file) with the fire-spread metrics and bootstrap intervals.",
                ["aegisbench firespread-ndws ndws/next_day_wildfire_spread_test_00.tfrecord",
                 "aegisbench firespread-ndws ndws/*.tfrecord --forecast my_forecast.parquet --out reports/ndws "
                 "--n-resamples 200"])
    p.add_argument("tfrecords", nargs="+", help="NDWS .tfrecord files (no TensorFlow needed)")
    p.add_argument("--forecast", default="persistence",
                   help="'persistence' or a Parquet file with columns sample (int), probability (64x64)")
    add_out_option(p, "write metrics.parquet and calibration.png here")
    p.add_argument("--n-resamples", type=int, default=1000, dest="n_boot", metavar="N",
                   help="bootstrap resamples (samples)")
    deprecated_alias(p, "--n-boot", "--n-resamples")
    p.add_argument("--threshold", type=float, default=0.5, help="probability above which a cell is burnt")
    declare_io(p, reads={"tfrecords": "tfrecords"}, writes={"out": "--out"})  # --forecast may be a word
    p.set_defaults(func=cmd_ndws)


def _positive(v: int | None, name: str) -> None:
    if v is not None and v < 1:
        raise BadInput("must be >= 1", where=name)


def cmd_baselines(args) -> int:
    from aegisbench.forecasters.convlstm import ConvLSTMConfig
    from aegisbench.forecasters.baselines import write_baselines
    from aegisbench.forecasters.simple import BASELINES
    names = [n.strip() for n in args.only.split(",")] if args.only else list(BASELINES)
    bad = [n for n in names if n not in BASELINES]
    if bad:
        raise BadInput(f"unknown baseline(s) {bad}; expected {list(BASELINES)}", where="--only")
    _positive(args.convlstm_steps, "--convlstm-steps")
    _positive(args.convlstm_hidden, "--convlstm-hidden")
    kw = {k: v for k, v in (("steps", args.convlstm_steps), ("hidden", args.convlstm_hidden),
                            ("gemm", args.convlstm_gemm)) if v is not None}
    for folder in write_baselines(args.dataset, args.submissions, names, ConvLSTMConfig(**kw), dtype=args.dtype):
        print(f"wrote {folder}")
        if args.verified:
            from aegisbench.attestation import attest
            from aegisbench.dataset.manifest import load_manifest
            attest(folder, dataset_digest=load_manifest(args.dataset)["dataset_digest"], weights_sha256=None,
                   by="aegisbench firespread-baselines")
    return 0


def cmd_simulate(args) -> int:
    from aegisbench.firespread.ensemble import z_moments
    from aegisbench.builders.firespread import run_ensemble
    from aegisbench.firespread.layout import make_initial_condition
    from aegisbench.params.firespread import FirespreadParams
    from aegisbench.params import Params
    p = FirespreadParams.load(args.params)
    version = Params.load(args.params).benchmark_version
    n = args.realizations or p.realizations
    _positive(n, "--realizations")
    if not 0 <= args.s_level <= 100:
        raise BadInput("must lie in [0, 100]", where="--s-level")
    ic = make_initial_condition(p, version, args.ic)
    ens = run_ensemble(p, version, ic, args.s_level, 0, n)
    zm, zv = z_moments(ens.ignition_time, ic.n_trees, ens.t_max + 1)
    print(f"ic {args.ic} S{args.s_level}: {n} realizations, {ic.n_trees} trees, depletion at step "
          f"{ens.n_steps.min()}..{ens.n_steps.max()}, final E[Z]={zm[-1]:.1f} SD[Z]={zv[-1] ** 0.5:.1f}, "
          f"max SD[Z_t]={zv.max() ** 0.5:.1f}")
    return 0


def cmd_report(args) -> int:
    from aegisbench.leaderboard.firespread_report import write_report
    files = write_report(args.dataset, args.results, args.out)
    print(f"wrote {args.out}: " + ", ".join(f.name for f in files))
    return 0


def cmd_ndws(args) -> int:
    from aegisbench.evaluation.firespread_ndws import score_ndws
    _positive(args.n_boot, "--n-resamples")
    table = score_ndws(args.tfrecords, args.forecast, out=args.out, n_boot=args.n_boot, threshold=args.threshold)
    print(f"scored {len(args.tfrecords)} file(s): {table.num_rows} metric rows"
          + (f" -> {args.out}" if args.out else ""))
    return 0
