"""Evaluate a detector on your own Pascal VOC folder, end to end, from Python.

Builds a checksummed dataset repo from the folder (clean plus the corruptions you ask for),
runs an Ultralytics / torchvision detector over every config, scores it under the
frozen-threshold rule (threshold chosen once on clean validation) and prints the
per-condition table with 95 % intervals; the table is also written as CSV.

    python examples/evaluate_voc_folder.py --voc /data/hit-uav --name hituav --split-mode lists \\
        --class-map Person=person,Car=none,Bicycle=none,OtherVehicle=none,DontCare=ignore \\
        --modality thermal --license CC-BY-4.0 \\
        --weights data/models/reference_sar/weights.pt --work runs/hituav

Everything it writes goes under ``--work``: ``sources/``, ``aegisbench/`` (the dataset repo),
``submissions/<model>/``, ``results/<model>/`` and ``table.csv``. Each step is the library
call the matching ``aegisbench`` command makes (``build``, ``detect``, ``evaluate``,
``export``); see docs/API.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--voc", required=True, help="the VOC folder (JPEGImages/ and Annotations/, or images beside xml)")
    p.add_argument("--name", required=True, help="source name, snake_case")
    p.add_argument("--class-map", required=True, help="CLASS=person|none|ignore,... (every class of the folder)")
    p.add_argument("--split-mode", default="hash", choices=("hash", "folders", "lists"), help="how to split")
    p.add_argument("--modality", default="rgb", choices=("rgb", "thermal"), help="the sensor")
    p.add_argument("--license", default="unknown", help="the folder's SPDX licence id")
    p.add_argument("--conditions", default="low_light_s3,motion_blur_s2,smoke_haze_s2",
                   help="condition configs to build, comma-separated ('all': the 27)")
    p.add_argument("--weights", required=True, help="detector weights (.pt)")
    p.add_argument("--detector", default="yolo", choices=("yolo", "rtdetr", "fasterrcnn"), help="adapter")
    p.add_argument("--imgsz", type=int, default=None, help="model input size (default: native resolution)")
    p.add_argument("--n-resamples", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--work", default="runs/voc_example", help="folder for everything written")
    return p.parse_args(argv)


def build(args, work: Path) -> Path:
    """The dataset repo of the folder: source table, then shards, card and manifest."""
    from aegisbench.builders.build import build_repo
    from aegisbench.builders.sources import materialize_sources
    from aegisbench.params import Params

    class_map = {k: (None if v == "none" else v) for k, v in (kv.split("=", 1) for kv in args.class_map.split(","))}
    params = Params.from_dict({
        "benchmark_version": "0.1.0",
        "paths": {"sources": str(work / "sources"), "dataset": str(work / "aegisbench")},
        "build": {"conditions": [c for c in args.conditions.split(",") if c]},
        "sources": {args.name: {"track": "sar", "kind": "voc", "modality": args.modality, "license": args.license,
                                "options": {"path": args.voc, "class_map": class_map, "target_label": "person",
                                            "split_mode": args.split_mode}}},
    })
    materialize_sources(params)
    manifest = build_repo(params, progress=False)
    print(f"dataset {params.dataset_dir}: {len(manifest['configs'])} configs, digest {manifest['dataset_digest'][:12]}")
    return Path(params.dataset_dir)


def detect(args, repo: Path, work: Path) -> Path:
    """Run the detector over every config and split of the sar track: a submission folder."""
    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect

    detector = load_detector(args.detector, args.weights, DetectorOptions(imgsz=args.imgsz))
    detector.map_classes("person")  # the model's person class, written as the track's label
    out = work / "submissions" / Path(args.weights).stem.replace(" ", "_")
    info = SubmissionInfo(name=out.name, model=f"{args.detector}:{Path(args.weights).name}", team="me")
    report = run_detect(detector, repo, "sar", out, info, RunOptions(progress=False, overwrite=True))
    print(f"detected {report['frames']} images in {report['seconds']:.1f} s")
    return out


def evaluate(args, repo: Path, submission: Path, work: Path):
    """Score the submission; the per-condition recall/precision/F1 table with intervals."""
    import polars as pl

    from aegisbench.evaluation.bootstrap import BootstrapParams
    from aegisbench.evaluation.evaluator import EvaluationParams, evaluate_submission

    params = EvaluationParams(bootstrap=BootstrapParams(n_resamples=args.n_resamples))
    results = evaluate_submission(submission, repo, work / "results", params)
    df = pl.read_parquet(results / "metrics.parquet")
    table = (df.filter(pl.col("metric").is_in(["recall", "precision", "f1"]) & pl.col("stratum").is_null())
             .select("config", "metric", "value", "lo", "hi", "n", "note")
             .sort("config", "metric"))
    table.write_csv(work / "table.csv")
    return table


def main(argv=None) -> int:
    args = parse_args(argv)
    import aegisbench

    aegisbench.pin_isa()  # before NumPy loads: the bytes of every x86 machine
    from aegisbench.errors import BadInput

    work = Path(args.work)
    try:
        repo = build(args, work)
        submission = detect(args, repo, work)
        table = evaluate(args, repo, submission, work)
    except (BadInput, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for row in table.iter_rows(named=True):
        value = "n/a" if row["value"] is None else f"{row['value']:.3f} [{row['lo']:.3f}, {row['hi']:.3f}]"
        print(f"{row['config']:<20} {row['metric']:<10} {value}" + (f"  ({row['note']})" if row["note"] else ""))
    print(f"wrote {work / 'table.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
