"""CLI commands of the wrapped detectors: ``detect``, ``warp-detect``, ``train-reference``.

Every check that can fail on user input (dataset verify, output folder, detector name,
weights, device) runs before anything is written; a failure is one line on stderr
and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from aegisbench.cli import command, export_global_options
from aegisbench.cli_options import (add_dataset_option, add_executor_options, add_out_option,
                                     add_params_option)
from aegisbench.fields import deprecated_alias
from aegisbench.overlap import declare_io
from aegisbench.errors import BadInput, as_bad_input
from aegisbench.fields import did_you_mean
from aegisbench.kernels import GEMMS
from aegisbench.vocab import TRACK_LABELS, WARP_GRID

log = logging.getLogger(__name__)
REFERENCE_TEAM = "AegisBench reference"


def _submission_args(p: argparse.ArgumentParser) -> None:
    """The fields ``detect`` writes into submission.yaml."""
    g = p.add_argument_group("submission.yaml")
    g.add_argument("--name", help="submission name (default: the folder name)")
    g.add_argument("--model", help="model description (default: detector and weights file)")
    g.add_argument("--team", help="who made the model (required: the leaderboard shows it on every row), "
                   "unless --reference")
    g.add_argument("--reference", action="store_true", help="a reference row run by the pipeline (dvc.yaml): "
                   f"team defaults to {REFERENCE_TEAM!r}; implies --verified")
    g.add_argument("--verified", action="store_true",
                   help="attest the run with this project's private key (private/): the leaderboard shows the row "
                        "as verified (we ran it), not self-reported")
    g.add_argument("--contact", default="n/a", help="contact (e-mail or URL)")
    g.add_argument("--license", default="MIT", help="license of the predictions")
    g.add_argument("--description", default="Predictions written by aegisbench detect.",
                   help="free-text description")
    g.add_argument("--paper", help="URL of the paper that describes the model (shown on the leaderboard)")
    g.add_argument("--code", help="URL of the code that trains or runs it")
    g.add_argument("--architecture", help="architecture, one line (e.g. YOLO11n); the parameter count is always "
                   "computed from the loaded model")
    g.add_argument("--training-data", help="what it was trained on, one line")


def register(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "detect", "run a wrapped detector over a dataset repo and write a submission",
                "Verifies the dataset, then predicts every image of the track's configs (tiled when larger "
                "than --tile) and writes submissions/<id>/ (submission.yaml + predictions); an interrupted "
                "run resumes per config.",
                ["aegisbench detect --detector yolo --weights yolo11n.pt --track sar --out submissions/my_yolo "
                 "--team 'My lab'",
                 "aegisbench detect --detector rtdetr --weights rtdetr-l.pt --track smoke "
                 "--out submissions/my_rtdetr --team 'My lab' --device cuda:0 --half"])
    _detector_args(p)
    p.add_argument("--track", required=True, metavar="{sar,smoke}", help="sar or smoke")
    p.add_argument("--classes", help="model classes (names or ids, comma-separated) that are the track's target "
                   "(person for sar, smoke for smoke); the others are dropped. Default: the class named like the "
                   "target, or a single-class model's one class")
    add_out_option(p, "the submission folder to make (e.g. submissions/my_yolo)", required=True)
    _submission_args(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing submission folder")
    _executor_args(p, "the model")
    declare_io(p, reads={"weights": "--weights", "dataset": "--dataset"}, writes={"out": "--out"})
    p.set_defaults(func=cmd_detect)

    _register_warp(sub)

    _register_train(sub)


def _register_warp(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "warp-detect", "WARP tests of seed 000: add warp_noise.parquet and warp_patch.parquet to a "
                "smoke submission",
                "Global sanity check: every clean smoke test frame at each --noise-levels level a, the noise "
                "x' = (1 - a) x + a sigma r added to the tensor the model sees. Local deception test: a cloud "
                "patch at every position of a --grid x --grid lattice over each smoke-positive test image. "
                "Settings come from the warp section of --params when given (flags override them); run after "
                "`detect` on the same folder.",
                ["aegisbench warp-detect --detector yolo --weights yolo11n.pt --submission submissions/my_yolo_smoke",
                 "aegisbench warp-detect --detector yolo --weights w.pt --submission submissions/s "
                 "--params params.yaml",
                 "aegisbench warp-detect --detector yolo --weights w.pt --submission submissions/s --only noise "
                 "--noise-levels 0.001:0.4:0.001  # seed 000's 400 levels",
                 "aegisbench warp-detect --detector yolo --weights w.pt --submission submissions/s --only patch "
                 "--grid 10 --images 4"])
    _detector_args(p)
    p.add_argument("--submission", metavar="DIR",  # required (checked by the command: --out, its former name, counts)
                   help="the smoke submission folder detect wrote, required: its WARP rows are added to it")
    deprecated_alias(p, "--out", "--submission")
    add_params_option(p, "read noise_levels, grid and images from its warp section (params.yaml); without it the "
                      "defaults below", default=None, metavar="FILE")
    p.add_argument("--only", choices=("noise", "patch"), help="run one of the two tests (default: both)")
    p.add_argument("--noise-levels", metavar="SPEC", help="noise levels a: comma-separated (0.05,0.1,0.21) or "
                   "start:stop:step, stop included (0.001:0.4:0.001 is seed 000's sweep); default 0.02..0.40 by "
                   "0.02 plus 0.21")
    p.add_argument("--grid", type=int, help=f"patch grid side (default {WARP_GRID}: {WARP_GRID ** 2} positions)")
    p.add_argument("--patch", type=int, help="patch side in px (default: 25 px per 640 px of the frame)")
    p.add_argument("--images", metavar="N|all", help="patch test: smoke-positive test images per source, a seeded "
                   "subsample (CPU runs); default all")
    deprecated_alias(p, "--max-images", "--images")
    p.add_argument("--include-negatives", action="store_true", help="patch test: also run smoke-free images")
    _executor_args(p, "the noise sweep")
    p.add_argument("--verified", action="store_true", help="attest the run with this project's private key (a "
                   "folder whose detect run was attested stays verified without it)")
    declare_io(p, reads={"weights": "--weights", "dataset": "--dataset", "params": "--params"},
               writes={"submission": "--submission"})
    p.set_defaults(func=cmd_warp)


def _executor_args(p: argparse.ArgumentParser, what: str) -> None:
    add_executor_options(p, f"where {what} runs: local (default: this process, or --workers processes) or ray "
                         "(Ray Data actors, one per GPU of the cluster)",
                         "local worker processes, each with its own model (default 1: this process); the CPUs of "
                         "a local Ray started for --executor ray")


def _register_train(sub: argparse._SubParsersAction) -> None:
    p = command(sub, "train-reference", "train the reference detector (Ultralytics YOLO from its model YAML, "
                "offline) on a source's train split",
                "Pinned seed, epochs and recipe from the reference_detector section of --params; writes "
                "weights.pt and train.json (with clean val/test scores unless --no-score). Several "
                "--source/--out pairs train side by side, one process each (--jobs at a time): every "
                "training runs on its own pinned torch threads, so the weights are those of a run alone. "
                "Progress is one line per --progress-interval; Ultralytics' own output only with -v.",
                ["aegisbench train-reference --source synthetic_sar --out data/models/reference_sar",
                 "aegisbench train-reference --source synthetic_sar --out data/models/reference_sar "
                 "--source synthetic_smoke --out data/models/reference_smoke --jobs 2",
                 "aegisbench train-reference --source heridal --out data/models/heridal --epochs 5 -v"])
    add_params_option(p, "params file with a reference_detector section")
    p.add_argument("--source", required=True, action="append",
                   help="source name: a params source or one built with `build --source-dir --name NAME` (its "
                   "table is <paths.sources>/<source>.parquet); repeat it, with one --out each, to train several")
    p.add_argument("--source-table", help="explicit canonical source table (overrides --source lookup; one "
                   "--source only)")
    add_out_option(p, "output folder (weights.pt, train.json), one per --source, in the same order", required=True,
                   action="append")
    p.add_argument("--jobs", type=int, default=1, help="trainings run at the same time, one process each")
    p.add_argument("--epochs", type=int, help="override reference_detector.epochs")
    p.add_argument("--max-images", type=int, help="override reference_detector.max_images (tiny runs)")
    p.add_argument("--seed", type=int, help="override reference_detector.seed (reference.seeds trains seed, seed+1, ...)")
    p.add_argument("--no-score", action="store_true", help="skip scoring on the source's val/test splits")
    p.add_argument("--score-tile", type=int, help="tile side in px of the scoring detection, as `detect --tile` "
                   "(default: detect's; the threshold rule is the source track's, as `evaluate`'s)")
    declare_io(p, reads={"params": "--params", "source_table": "--source-table"}, writes={"out": "--out"})
    p.set_defaults(func=cmd_train_reference)


def _detector_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("detector")
    g.add_argument("--detector", required=True, metavar="{yolo,rtdetr,fasterrcnn}", help="yolo, rtdetr or fasterrcnn")
    g.add_argument("--weights", required=True, help="local trained checkpoint (.pt)")
    add_dataset_option(p)
    g.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, or auto (GPU if present, else CPU)")
    g.add_argument("--batch", type=int, default=8, help="windows (tiles or frames) per forward pass")
    g.add_argument("--half", action="store_true", help="FP16 inference on CUDA")
    g.add_argument("--conf", type=float, default=0.001, help="score floor handed to the model (near zero)")
    g.add_argument("--imgsz", type=_imgsz_arg, help="model input size: pixels, or `trained` for the size "
                   "the train.json beside --weights records (a reference trained on downscaled whole frames) "
                   "(default: native window size)")
    g.add_argument("--threads", type=int, default=1, help="torch threads of a CPU model (results repeat for one "
                   "thread count: every row records it)")
    g.add_argument("--onednn", action="store_true", help="CPU: use oneDNN's kernels (faster; the predictions then "
                   "depend on the CPU, and every row says so)")
    g.add_argument("--gemm", choices=(*GEMMS, "trained"), default="mkl", help="CPU: where the convolutions' "
                   "matrix products run: torch's MKL path, NumPy's OpenBLAS (faster, the same on every x86-64-v3 CPU, "
                   "other bytes; every row says which), or `trained`: what the train.json beside --weights records")
    t = p.add_argument_group("tiling and loading")
    t.add_argument("--tile", type=int, default=1024, help="tile size for frames larger than it")
    t.add_argument("--overlap", type=int, default=256, help="tile overlap in px")
    t.add_argument("--merge-iou", type=float, default=0.5, help="IoU of the seam NMS between tiles")
    t.add_argument("--keep-cut", action="store_true", help="keep boxes cut by an inner tile edge")
    t.add_argument("--frames-per-batch", type=int, default=8, help="frames per predict call")
    t.add_argument("--loader-workers", type=int, default=2, help="image decoding threads")


def _imgsz_arg(text: str) -> int | str:
    if text == "trained":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected pixels or `trained`, got {text!r}") from None


def _options(args):
    from aegisbench.detectors.interface import DetectorOptions
    from aegisbench.detectors.trained import trained_gemm, trained_imgsz
    from aegisbench.detectors.tiling import TilingParams

    with as_bad_input("--tile/--overlap/--merge-iou"):
        tiling = TilingParams(tile=args.tile, overlap=args.overlap, merge_iou=args.merge_iou,
                              drop_cut=not args.keep_cut)
    return DetectorOptions(device=args.device, batch=args.batch, half=args.half, conf=args.conf,
                           imgsz=trained_imgsz(args.weights) if args.imgsz == "trained" else args.imgsz,
                           tiling=tiling, threads=args.threads, onednn=args.onednn,
                           gemm=trained_gemm(args.weights) if args.gemm == "trained" else args.gemm)


def _prepare(args, check=None, on_driver: str | None = None) -> tuple[dict, object]:
    """Verify the dataset, run ``check(manifest)``, then load the detector (nothing written
    yet); ``on_driver`` overrides the device of this process's copy (Ray actors pick their own)."""
    import dataclasses

    from aegisbench.dataset.verify import require_verified
    from aegisbench.detectors.interface import DETECTORS, load_detector

    if args.detector not in DETECTORS:
        raise BadInput(f"unknown detector {args.detector!r}; expected one of {sorted(DETECTORS)}"
                       f"{did_you_mean(args.detector, sorted(DETECTORS))}", where="--detector")
    options = _options(args)
    if on_driver is not None:
        options = dataclasses.replace(options, device=on_driver, half=False)
    manifest = require_verified(args.dataset)
    if check is not None:
        check(manifest)
    return manifest, load_detector(args.detector, args.weights, options)


def cmd_detect(args) -> int:
    from aegisbench.detectors.runner import RunOptions, SubmissionInfo, check_output, run_detect, track_splits

    from aegisbench.evaluation.intake import SUBMISSION_ID

    out = Path(args.out)
    if not SUBMISSION_ID.fullmatch(out.name):  # validate and evaluate take the folder name as the id
        raise BadInput("the folder name is the submission id: 1 to 64 ASCII letters, digits, '.', '_' or '-', "
                       "starting with a letter or digit", where=str(out)[:200])
    team = args.team if args.team is not None else REFERENCE_TEAM if args.reference else None
    if team is None or not team.strip():
        raise BadInput("--team is required: who made the model (only a reference row of the pipeline, "
                       "--reference, goes without)", where="--team")
    run = RunOptions(frames_per_batch=args.frames_per_batch, loader_workers=args.loader_workers,
                     progress=True, overwrite=args.overwrite)
    info = SubmissionInfo(name=args.name or out.name, model=args.model or f"{args.detector}:{Path(args.weights).name}",
                          team=team, contact=args.contact, license=args.license, description=args.description,
                          metadata=_metadata(args))

    def check(manifest: dict) -> None:
        track_splits(manifest, args.track)
        check_output(out, args.overwrite)

    from aegisbench.executor import Executor, connect
    executor = Executor.from_cli(args.executor, args.workers, args.ray_address)
    # a missing or unreachable cluster, or a node that differs, fails here, before anything is written
    connect(executor, (args.dataset, args.weights, out))
    manifest, detector = _prepare(args, check, on_driver="cpu" if executor.kind == "ray" else None)
    detector.map_classes(TRACK_LABELS[args.track], args.classes)
    report = run_detect(detector, args.dataset, args.track, out, info, run, manifest=manifest,
                        executor=executor, device=args.device, half=args.half)
    resumed = report["configs_resumed"]
    print(f"wrote {out}: {report['frames']} images ({report['windows']} tiles) in {report['seconds']:.1f} s, "
          f"{report['images_per_s']:.2f} images/s, {report['tiles_per_s']:.2f} tiles/s"
          + (f"; resumed {resumed} of {report['configs']} configs" if resumed else ""))
    if args.verified or args.reference:
        _attest(out, manifest, args.weights, "aegisbench detect")
    return 0


def _metadata(args) -> dict:
    """``--paper``, ``--code``, ``--architecture``, ``--training-data`` as submission.yaml's
    model metadata, checked like every submission's (BadInput naming the flag)."""
    from aegisbench.evaluation.metadata import check_metadata
    given = {k: v for k, v in (("paper", args.paper), ("code", args.code), ("architecture", args.architecture),
                               ("training_data", args.training_data)) if v is not None}
    clean, bad = check_metadata(given)
    if bad:
        key, why = bad[0]
        raise BadInput(why, where=f"--{key.replace('_', '-')}")
    return clean


def _attest(out: Path, manifest: dict, weights: str, by: str) -> None:
    from aegisbench.attestation import attest
    from aegisbench.hashing import file_sha256
    path = attest(out, dataset_digest=manifest["dataset_digest"], weights_sha256=file_sha256(weights), by=by)
    print(f"attested {out} (verified: run here) in {path}")


def _warp_settings(args):
    """The WARP settings of ``warp-detect``: the warp section of ``--params`` (or the defaults),
    then the flags (each checked, BadInput naming it)."""
    import dataclasses

    from aegisbench.params import WarpTestParams, noise_levels, patch_images
    from aegisbench.readers import read_yaml

    base = WarpTestParams()
    if args.params:
        raw = read_yaml(args.params, "params file")
        base = WarpTestParams.from_dict(raw.get("warp") if isinstance(raw, dict) else None, f"{args.params}: warp")
    over = {}
    if args.noise_levels is not None:
        over["noise_levels"] = noise_levels(args.noise_levels, "--noise-levels")
    if args.grid is not None:
        from aegisbench.fields import check_int
        over["grid"] = check_int(args.grid, "grid", lo=1, error=BadInput, where="--grid")
    if args.images is not None:
        over["images"] = patch_images(args.images if args.images == "all" else _int(args.images, "--images"),
                                      "--images")
    return dataclasses.replace(base, **over)


def _int(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadInput(f"expected a positive integer or all, got {text!r}", where=where) from None


def cmd_warp(args) -> int:
    from aegisbench.detectors.noise_sweep import WARP_NOISE_FILE, run_noise_sweep
    from aegisbench.detectors.runner import RunOptions
    from aegisbench.detectors.warp_runner import WarpParams, run_warp
    from aegisbench.executor import Executor, connect

    settings = _warp_settings(args)
    run = RunOptions(frames_per_batch=args.frames_per_batch, loader_workers=args.loader_workers)
    params = WarpParams(grid=settings.grid, patch=args.patch, images=settings.images,
                        include_negatives=args.include_negatives)
    if not args.submission:
        raise BadInput("give --submission DIR, the smoke submission folder detect wrote", where="warp-detect")
    out = Path(args.submission)
    if not (out / "submission.yaml").is_file():
        raise BadInput("not a submission folder (no submission.yaml); run aegisbench detect first", where=str(out))
    from aegisbench.attestation import holds
    executor = Executor.from_cli(args.executor, args.workers, args.ray_address)
    connect(executor, (args.dataset, args.weights, out))
    manifest, detector = _prepare(args, on_driver="cpu" if executor.kind == "ray" else None)
    attested = holds(out)  # a verified run stays verified when we add its WARP tests
    if args.only != "patch":
        r = run_noise_sweep(detector, args.dataset, out, settings.noise_levels, run, manifest=manifest,
                            executor=executor, device=args.device, half=args.half)
        print(f"wrote {out / WARP_NOISE_FILE}: {r['levels']} noise levels x {r['frames_per_level']} frames, "
              f"{r['images_per_s']:.2f} images/s")
    if args.only != "noise":
        report = run_warp(detector, args.dataset, out, params, variants_per_batch=args.frames_per_batch,
                          progress=True, manifest=manifest)
        print(f"wrote {out / 'warp_patch.parquet'}: {report['images']} images x {params.grid ** 2} positions, "
              f"{report['variants_per_s']:.2f} variants/s")
    if attested or args.verified:
        _attest(out, manifest, args.weights, "aegisbench detect + warp-detect")
    return 0


def cmd_train_reference(args) -> int:
    from aegisbench.detectors.train_jobs import TrainJob, check_score_tile, run_jobs, train_one

    if len(args.source) != len(args.out):
        raise BadInput(f"{len(args.source)} --source but {len(args.out)} --out: give one --out per --source",
                       where="--out")
    if len(set(args.out)) != len(args.out):
        raise BadInput("two trainings would write the same folder", where="--out")
    if args.source_table and len(args.source) > 1:
        raise BadInput("--source-table names one table: give one --source with it", where="--source-table")
    jobs = [TrainJob(source, out, args.source_table, args.epochs, args.max_images, not args.no_score, args.seed,
                     args.score_tile) for source, out in zip(args.source, args.out)]
    check_score_tile(args.score_tile)
    if len(jobs) == 1:
        report = train_one(args.params, jobs[0])
        print(json.dumps({k: report[k] for k in ("train_seconds", "train_cpu_seconds", "scores") if k in report},
                         sort_keys=True))
        return 0
    export_global_options(args)  # -v/-q and --progress-interval reach the children as they reach `run`'s stages
    reports = run_jobs(args.params, jobs, args.jobs, ["--no-progress"] if args.no_progress else [])
    print(json.dumps(reports, sort_keys=True))
    return 0
