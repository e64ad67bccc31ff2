"""Try a reference-detector recipe and score it as the leaderboard scores the reference row
(issue 36 items 1 and 3): the clean test recall at the threshold the evaluator freezes on clean
validation with the track's rule (sar: every validation score; smoke: seed 001's grid
k/100, k = 1..20), on the clean config of a built dataset, with the tiling of the row's own
``detect`` line in dvc.yaml. ``train-reference``'s own scores (``train.json``) use the track's
rule too and tile at ``--score-tile`` (the detect default unless given): they are the row's
numbers when given the row's tile (``tests/test_dvc.py`` checks both scorers against the
evaluate stage). This script scores on the built dataset's clean config instead of the source
table, and checks that a rebuilt source's val/test frames are the dataset's.

The source is rebuilt with ``--n-train`` train sequences (smoke) or images (sar) and the val and
test frames are checked to be the dataset's own (same SHA-256), so recipes compare on the frames
the rows are scored on. Score existing weights with ``--weights``::

    python perf/reference_recipes.py --weights data/models/reference_smoke/weights.pt --source synthetic_smoke
    python perf/reference_recipes.py --source synthetic_smoke --n-train 48 --epochs 10 --work /tmp/rr

Prints one JSON line and appends it to ``--log`` (default ``<work>/recipes.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from aegisbench import isa

isa.pin()  # the detect stage's kernels: before NumPy or torch load (else the scores differ in the last bits)

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _aegisbench(*argv: str) -> None:
    from aegisbench.cli import main

    rc = main([*argv, "--no-progress"])
    if rc != 0:
        raise SystemExit(f"aegisbench {argv[0]} exited {rc}")


def source_track(dataset: Path, source: str) -> str:
    """The track the dataset's manifest gives ``source`` (sar or smoke)."""
    from aegisbench.dataset.manifest import load_manifest

    return load_manifest(dataset)["sources"][source]["track"]


def row_tile(dvc_yaml: Path, track: str) -> int:
    """The ``--tile`` of the reference row's ``detect`` line (the detect default otherwise)."""
    from aegisbench.detectors.tiling import TilingParams
    from aegisbench.pipeline.seeds import stage_argv

    params = yaml.safe_load((dvc_yaml.parent / "params.yaml").read_text())
    argv = stage_argv(yaml.safe_load(dvc_yaml.read_text()), f"detect_reference_{track}", "detect", params)
    return int(argv[argv.index("--tile") + 1]) if "--tile" in argv else TilingParams().tile


def clean_shards(dataset: Path, source: str, split: str) -> list[Path]:
    """The clean config's shards of ``source``'s test or val split."""
    name = f"{source}_val" if split == "val" else source
    files = sorted((dataset / "clean").glob(f"{name}-*.parquet"))
    if not files:
        raise SystemExit(f"{dataset}/clean has no {name} shards")
    return files


def clean_rows(dataset: Path, source: str, split: str, columns: list[str]) -> list[dict]:
    return [row for f in clean_shards(dataset, source, split) for row in pq.read_table(f, columns=columns).to_pylist()]


def score_row_way(weights: Path, dataset: Path, source: str, tile: int) -> dict:
    """Clean test recall / precision at the threshold frozen on clean val with the track's rule;
    frames decoded and batched by the detect stage's own loader (the same arrays, the same
    batches of 8 frames), so the scores are the row's."""
    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.loader import FrameLoader
    from aegisbench.detectors.tiling import TilingParams
    from aegisbench.evaluation import freeze_threshold, match_images
    from aegisbench.evaluation.threshold import TRACK_RULE, f1_curve, rule_grid
    from aegisbench.kernels import portable

    from aegisbench.detectors.trained import trained_gemm

    train = json.loads((weights.parent / "train.json").read_text())
    gemm = trained_gemm(str(weights))  # the kernels it was trained on, as `detect --gemm trained`
    matches, objects = {}, 0
    with portable(1, gemm=gemm):
        det = load_detector("yolo", weights, DetectorOptions(imgsz=train.get("detect_imgsz"), gemm=gemm,
                                                             tiling=TilingParams(tile=tile)))
        for split in ("val", "test"):
            truth = {r["image_id"]: r for r in clean_rows(dataset, source, split, ["image_id", "objects", "ignore"])}
            preds, gts, ign = [], [], []
            for batch in FrameLoader(clean_shards(dataset, source, split), batch=8):
                preds += det.predict(batch.images)
                for image_id in batch.image_ids:
                    gts.append(np.asarray(truth[image_id]["objects"]["bbox"], np.float32).reshape(-1, 4))
                    ign.append(np.asarray(truth[image_id]["ignore"], np.float32).reshape(-1, 4))
            matches[split] = match_images([d.xyxy for d in preds], [d.score for d in preds], gts, ignore_xyxy=ign)
            objects = sum(len(g) for g in gts)
    rule = TRACK_RULE[source_track(dataset, source)]
    threshold, val_f1 = freeze_threshold(matches["val"], rule_grid(rule))
    at = f1_curve(matches["test"], [threshold])
    return {"gemm": gemm, "rule": rule, "threshold": threshold, "val_f1": round(val_f1, 4),
            "test_recall": round(float(at["recall"][0]), 4), "test_precision": round(float(at["precision"][0]), 4),
            "test_objects": objects}


def same_eval_frames(table: Path, dataset: Path, source: str) -> int:
    """Refuse a rebuilt source whose val/test frames are not the dataset's; returns their count."""
    t = pq.read_table(table, columns=["split", "sha256"]).to_pylist()
    ours = sorted(r["sha256"] for r in t if r["split"] in ("val", "test"))
    theirs = sorted(r["sha256"] for split in ("val", "test") for r in clean_rows(dataset, source, split, ["sha256"]))
    if ours != theirs:
        raise SystemExit(f"{table}: its val/test frames are not those of {dataset}/clean (another benchmark_version?)")
    return len(ours)


def train(args, work: Path) -> Path:
    params = yaml.safe_load(Path(args.params).read_text())
    params["paths"]["sources"] = str(work / "sources")
    if args.n_train is not None:
        params["sources"][args.source]["options"] = {**(params["sources"][args.source].get("options") or {}),
                                                     "n_train": args.n_train}
    work.mkdir(parents=True, exist_ok=True)
    p = work / "params.yaml"
    p.write_text(yaml.safe_dump(params, sort_keys=False))
    if not (work / "sources" / f"{args.source}.parquet").exists():
        _aegisbench("sources", "--params", str(p), "--only", args.source)
    same_eval_frames(work / "sources" / f"{args.source}.parquet", Path(args.dataset), args.source)
    out = work / f"model_n{args.n_train}_e{args.epochs}_s{args.seed}"
    extra = [] if args.epochs is None else ["--epochs", str(args.epochs)]
    _aegisbench("train-reference", "--params", str(p), "--source", args.source, "--out", str(out),
                "--seed", str(args.seed), "--no-score", *extra)
    return out / "weights.pt"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, choices=["synthetic_sar", "synthetic_smoke"])
    ap.add_argument("--weights", help="score these weights (train.json beside them) instead of training")
    ap.add_argument("--n-train", type=int, help="train sequences (smoke) / images (sar) of the rebuilt source")
    ap.add_argument("--epochs", type=int, help="override the recipe's epochs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--dataset", default="aegisbench", help="built dataset repo whose clean config scores")
    ap.add_argument("--dvc-yaml", default=str(ROOT / "dvc.yaml"), help="where the row's detect line is read")
    ap.add_argument("--work", default="runs/reference_recipes")
    ap.add_argument("--log", help="JSON lines appended here (default <work>/recipes.jsonl)")
    args = ap.parse_args(argv)
    work = Path(args.work)
    t0 = time.perf_counter()
    weights = Path(args.weights) if args.weights else train(args, work)
    train_s = time.perf_counter() - t0
    line = {"source": args.source, "weights": str(weights), "n_train": args.n_train, "epochs": args.epochs,
            "seed": args.seed, "train_minutes": None if args.weights else round(train_s / 60, 1),
            **score_row_way(weights, Path(args.dataset), args.source,
                            row_tile(Path(args.dvc_yaml), source_track(Path(args.dataset), args.source)))}
    print(json.dumps(line))
    log = Path(args.log) if args.log else work / "recipes.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
