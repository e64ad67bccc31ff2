"""The reference detector's training and detection with the convolutions' matrix products on
torch's MKL path (``gemm: mkl``, MKL pinned to its ``COMPATIBLE`` branch: what 0.8.0 runs) and on
NumPy's OpenBLAS (``gemm: openblas``, :mod:`aegisbench.conv_gemm`, Haswell kernels), side by side.

Both sides are the real library calls of the main job: ``train_reference`` with the recipe of
``params.yaml`` for the source (one epoch on ``--train-images`` images; the crops, augmentation
and optimiser as the stage runs them) and ``Detector.predict`` of the trained weights on the
source's val/test frames at the row's input size, both on one torch thread and one BLAS
thread. Rounds are interleaved (order flipped every round, one untimed warm-up round for
detection); ratios are medians of mkl seconds / openblas seconds. The two sides are different
float orders, so their weights differ; the detections' agreement is printed (boxes matched
one to one, largest score difference), not required.

Run: ``.venv/bin/python perf/conv_gemm.py [--source synthetic_smoke] [--rounds 3] [--json out.json]``
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from _bench import ROOT, cap, finish, interleaved, row, speed_row

cap()

import yaml  # noqa: E402

GEMMS = ("mkl", "openblas")


def source_table(work: Path, source: str, n_train: int) -> Path:
    """The embedded ``source`` with ``n_train`` train images/sequences and few val/test ones."""
    from aegisbench.builders.sources import materialize_source
    from aegisbench.params import Params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    small = {"synthetic_sar": {"n_train": n_train, "n_val": 2, "n_test": 6, "images_per_flight": 4},
             "synthetic_smoke": {"n_train": n_train, "n_val": 1, "n_test": 1}}
    raw["sources"][source]["options"] = small[source]
    raw["paths"] = {"sources": str(work / "sources"), "dataset": str(work / "repo")}
    params = Params.from_dict(raw)
    (spec,) = [s for s in params.sources if s.name == source]
    materialize_source(spec, params.benchmark_version, params.sources_dir)
    return Path(params.sources_dir) / f"{source}.parquet"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default="synthetic_smoke", choices=("synthetic_smoke", "synthetic_sar"))
    ap.add_argument("--n-train", type=int, default=2, help="train sequences (smoke) or images (sar) generated")
    ap.add_argument("--train-images", type=int, default=16, help="train images one training epoch sees")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    from aegisbench.builders.source_table import read_source_table
    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.reference import ReferenceParams, train_reference

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())["reference_detector"]
    base = ReferenceParams.from_dict(raw, args.source)
    with tempfile.TemporaryDirectory(prefix="conv-gemm-") as tmp:
        work = Path(tmp)
        table = source_table(work, args.source, args.n_train)
        runs = {g: iter(range(10 ** 6)) for g in GEMMS}
        trained: dict[str, Path] = {}

        def train(gemm: str):
            p = dataclasses.replace(base, epochs=1, max_images=args.train_images, gemm=gemm)
            out = work / f"{gemm}-{next(runs[gemm])}"
            t = time.perf_counter()
            train_reference(table, out, p, score=False)
            trained[gemm] = out / "weights.pt"
            return time.perf_counter() - t

        fit = interleaved(args.rounds, {g: (lambda g=g: train(g)) for g in GEMMS}, warmup=0)
        frames = [r.image() for r in read_source_table(table, ["val", "test"])]
        size = base.inference_imgsz()
        dets = {g: load_detector("yolo", trained["mkl"], DetectorOptions(gemm=g, imgsz=size, batch=8)) for g in GEMMS}
        found: dict[str, list] = {}

        def detect(gemm: str):
            t = time.perf_counter()
            found[gemm] = dets[gemm].predict(frames)
            return time.perf_counter() - t

        seen = interleaved(args.rounds, {g: (lambda g=g: detect(g)) for g in GEMMS}, warmup=1)
    fit_s = {g: statistics.median(v) for g, v in fit.items()}
    det_ips = {g: len(frames) / statistics.median(v) for g, v in seen.items()}
    same_count = all(len(a.score) == len(b.score) for a, b in zip(found["mkl"], found["openblas"]))
    worst = max((float(abs(a.score - b.score).max()) for a, b in zip(found["mkl"], found["openblas"])
                 if len(a.score) and len(a.score) == len(b.score)), default=0.0)
    what = f"{args.source}, {base.crop or 'whole'}-px crops at {base.imgsz}, batch {base.batch}"
    rows = [
        speed_row(f"train_reference, 1 epoch on {args.train_images} images ({what}), s: openblas vs mkl",
                  fit_s["openblas"], fit_s["mkl"], unit="s", higher_is_better=False),
        speed_row(f"detect {len(frames)} val/test frames at {size or 'native'} px, batch 8: openblas vs mkl",
                  det_ips["openblas"], det_ips["mkl"], unit="img/s", higher_is_better=True),
        row("detections of one weights file: same box count per frame, largest score difference",
            f"{'yes' if same_count else 'no'}, {worst:.2g}"),
    ]
    for g in GEMMS:
        print(f"{g}: train rounds {[round(s, 1) for s in fit[g]]} s; detect rounds {[round(s, 2) for s in seen[g]]} s")
    finish("conv_gemm", rows, args.json, details={"train_s": fit, "detect_s": seen})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
