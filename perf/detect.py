"""Throughput of the real ``aegisbench detect`` against the framework's own batch prediction.

Same frames, same model, same batch size, same input size, in one process, both models on
the kernels ``detect`` runs a CPU model on (:func:`aegisbench.kernels.portable`: oneDNN off,
one torch thread), each side timed end to end from the checkpoint file:

* framework: ``YOLO(weights).predict(source=<folder of PNGs>, batch=B, imgsz=S, stream=True)``
  (its own loader reads and decodes the files; nothing is written);
* ours: ``aegisbench detect --detector yolo --track sar --batch B --frames-per-batch B
  --imgsz S`` run through the CLI entry point in this process (dataset verify, model
  load, background shard decoding, ``Detector.predict``, per-config Parquet parts,
  ``predictions.parquet`` and ``submission.yaml``).

The frames are every frame of the SAR track (clean and one condition config) of a small
repo built from the embedded synthetic sources (all frames 640x640, so no tiling and both
sides do identical model work; tiling is timed by ``perf/tiling.py``). The model is
yolov8n trained one epoch on four generated frames: it emits ``max_det`` (300) boxes per
frame at ``--conf 0.001``, so NMS, result conversion and Parquet writing all run. The
benchmark refuses to print a ratio unless both sides produced bit-identical boxes and
scores on every frame and the box count is non-zero. Both sides run ``--repeat`` times,
interleaved (order flipped every round, after one untimed warm-up round); the ratio is
the median over rounds of framework seconds / our seconds (target >= 0.95). CPU seconds
of the process (all threads: our decoding threads, the framework's inline decoding) are
reported beside it: on a shared, loaded machine they move less than wall time.

Run: ``.venv/bin/python perf/detect.py [--images 24] [--repeat 5] [--profile] [--json out.json]``
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import bench_params, cap, finish, interleaved, materialize, row, speed_row, trained_weights

cap()

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

PEER = "ultralytics"
PEER_HOW = ".venv/bin/pip install -e '.[detect]'"
MIN_RATIO = 0.95
TRACK = "sar"


def ultralytics_ready(bench: str, work: str, unit: str, min_ratio: float, json_path) -> bool:
    """Import Ultralytics offline; when it is not installed print ``peer not installed`` and a
    row without ratio (our side wraps the same library, so nothing is measured) and return False."""
    if importlib.util.find_spec(PEER) is None:
        print(f"peer not installed: {PEER} ({PEER_HOW})")
        print("our side wraps the same library, so nothing was measured")
        finish(bench, [row(work, None, unit=unit, target=f">= {min_ratio:g}x", peer_missing=PEER)], json_path)
        return False
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    import_ultralytics()
    return True


def build_repo(root: Path, images: int) -> Path:
    """A verified repo whose SAR track is ``images`` 640x640 frames per config (clean, low_light_s3)."""
    from aegisbench.builders.build import build_repo as build
    from aegisbench.params import Params

    raw = dict(bench_params(root, images).raw)
    sar = dict(raw["sources"]["synthetic_sar"])
    sar["options"] = {**sar["options"], "large_fraction": 0.0}
    raw["sources"] = {**raw["sources"], "synthetic_sar": sar}
    raw["build"] = {**raw["build"], "conditions": ["low_light_s3"]}
    params = Params.from_dict(raw)
    materialize(params)
    build(params, progress=False)
    return Path(params.dataset_dir)


def export_pngs(repo: Path, folder: Path) -> list[tuple[str, str, str]]:
    """Write every frame of the track as ``config__split__image_id.png`` (the stored PNG
    bytes); returns the ``(config, split, image_id)`` keys."""
    from aegisbench.dataset.verify import require_verified
    from aegisbench.detectors.loader import shard_paths
    from aegisbench.detectors.runner import track_splits

    manifest = require_verified(repo)
    keys = []
    for config, splits in track_splits(manifest, TRACK).items():
        for split in splits:
            for path in shard_paths(repo, manifest, config, split):
                t = pq.read_table(path, columns=["image_id", "image"])
                for image_id, img in zip(t.column("image_id").to_pylist(), t.column("image").to_pylist()):
                    (folder / f"{config}__{split}__{image_id}.png").write_bytes(img["bytes"])
                    keys.append((config, split, image_id))
    return keys


class Framework:
    """``YOLO(weights).predict`` over the PNG folder (the framework's own loader)."""

    def __init__(self, weights: str, folder: Path, args):
        self.weights, self.folder = weights, folder
        self.kw = dict(imgsz=args.imgsz, conf=args.conf, batch=args.batch, device="cpu", verbose=False, save=False)

    def run(self) -> tuple[float, dict]:
        from ultralytics import YOLO

        from aegisbench.detectors.ultralytics_adapter import keep_threads
        from aegisbench.kernels import portable

        t, c = time.perf_counter(), time.process_time()
        boxes = {}
        with portable(1), keep_threads():  # the kernels detect runs a CPU model on: oneDNN off, one thread
            for r in YOLO(self.weights).predict(source=str(self.folder), stream=True, **self.kw):
                b = r.boxes
                boxes[tuple(Path(r.path).stem.split("__"))] = (b.xyxy.numpy().astype(np.float32),
                                                              b.conf.numpy().astype(np.float32))
        return time.perf_counter() - t, boxes, time.process_time() - c


class Ours:
    """``aegisbench detect`` through the CLI entry point, in this process."""

    def __init__(self, weights: str, repo: Path, out: Path, args):
        self.out = out
        self.argv = ["detect", "--detector", "yolo", "--weights", weights, "--dataset", str(repo), "--track", TRACK,
                     "--out", str(out), "--batch", str(args.batch), "--frames-per-batch", str(args.batch),
                     "--imgsz", str(args.imgsz), "--conf", str(args.conf), "--loader-workers",
                     str(args.loader_workers), "--no-progress", "--overwrite", "--team", "perf"]

    def run(self) -> tuple[float, dict]:
        import contextlib
        import io

        from aegisbench.cli import main

        t, c = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(self.argv)
        s, cpu = time.perf_counter() - t, time.process_time() - c
        if rc != 0:
            raise SystemExit(f"aegisbench detect exited {rc}")
        return s, read_predictions(self.out / "predictions.parquet"), cpu


def read_predictions(path: Path) -> dict:
    t = pq.read_table(path)
    keys = list(zip(*(t.column(c).to_pylist() for c in ("config", "split", "image_id"))))
    xyxy = np.stack([t.column(c).to_numpy() for c in ("x1", "y1", "x2", "y2")], axis=1).astype(np.float32)
    score = t.column("score").to_numpy().astype(np.float32)
    out: dict = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return {k: (xyxy[v], score[v]) for k, v in out.items()}


def compare(ours: dict, framework: dict, keys: list) -> tuple[int, int, list[str]]:
    """Boxes of each side and the frames whose boxes or scores differ (bit for bit)."""
    empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32))
    bad = []
    for k in keys:
        (ob, os_), (fb, fs) = ours.get(k, empty), framework.get(k, empty)
        if not (np.array_equal(ob, fb) and np.array_equal(os_, fs)):
            bad.append(f"{'/'.join(k)}: {len(ob)} vs {len(fb)} boxes")
    return sum(len(v[1]) for v in ours.values()), sum(len(v[1]) for v in framework.values()), bad


def profile(ours: Ours, top: int = 25) -> None:
    """One run of our side under cProfile: the functions with most cumulative time."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    ours.run()
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(top)
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def measure(args, repo: Path, tmp: Path) -> tuple[list[dict], dict]:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    weights = args.weights or str(trained_weights("yolov8n.yaml", tmp / "yolov8n.pt"))
    (tmp / "png").mkdir()
    keys = export_pngs(repo, tmp / "png")
    n = len(keys)
    framework = Framework(weights, tmp / "png", args)
    ours = Ours(weights, repo, tmp / "out", args)
    if args.profile:
        ours.run()
        profile(ours)
    runs = interleaved(args.repeat, {"framework": framework.run, "ours": ours.run})
    o_boxes, f_boxes, bad = compare(runs["ours"][-1][1], runs["framework"][-1][1], keys)
    if bad or o_boxes == 0:
        why = f"{len(bad)} frame(s) differ, e.g. {bad[0]}" if bad else "no boxes at all (the comparison is empty)"
        raise SystemExit(f"detect benchmark: boxes not identical: {why}; no ratio printed")
    ratios = [f[0] / o[0] for f, o in zip(runs["framework"], runs["ours"])]
    f_s = statistics.median(r[0] for r in runs["framework"])
    o_s = statistics.median(r[0] for r in runs["ours"])
    ratio = statistics.median(ratios)
    cpu_ratios = [f[2] / o[2] for f, o in zip(runs["framework"], runs["ours"])]
    res = {"torch_threads": torch.get_num_threads(), "images": n, "batch": args.batch, "imgsz": args.imgsz,
           "conf": args.conf, "repeat": args.repeat, "framework_images_per_s": round(n / f_s, 2),
           "ours_images_per_s": round(n / o_s, 2), "ratio": round(ratio, 3),
           "ratios": [round(r, 3) for r in ratios], "cpu_ratio": round(statistics.median(cpu_ratios), 3),
           "cpu_ratios": [round(r, 3) for r in cpu_ratios], "boxes": o_boxes, "boxes_per_image": round(o_boxes / n, 1)}
    what = (f"{n} frames 640x640, batch {args.batch}, imgsz {args.imgsz}, conf {args.conf:g}, cpu, "
            f"torch threads {res['torch_threads']}")
    rows = [speed_row(f"aegisbench detect images/s vs ultralytics model.predict ({what})", n / o_s, n / f_s,
                      unit="img/s", higher_is_better=True, min_ratio=MIN_RATIO),
            row(f"CPU seconds (all threads), framework / ours, median of rounds ({what})",
                round(statistics.median(o[2] for o in runs["ours"]), 2),
                round(statistics.median(f[2] for f in runs["framework"]), 2), unit="s", ratio=res["cpu_ratio"]),
            row(f"boxes, bit-identical on every frame ({what})", o_boxes, f_boxes, unit="boxes", target="equal",
                met=o_boxes == f_boxes)]
    rows[0]["ratio"], rows[0]["met"] = ratio, ratio >= MIN_RATIO  # median of per-round ratios
    return rows, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=24, help="SAR images per config of the built repo (default 24)")
    ap.add_argument("--weights", help="a trained Ultralytics .pt (default: yolov8n from its YAML, trained one epoch"
                    " on four generated frames)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--conf", type=float, default=0.001)
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds per side (default 5)")
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--threads", type=int, help="torch CPU threads outside the models (both run on one, as detect)")
    ap.add_argument("--profile", action="store_true", help="first profile one run of our side (cProfile)")
    ap.add_argument("--json", help="write the summary rows and details here")
    args = ap.parse_args(argv)
    if not ultralytics_ready("detect", "detect images/s vs ultralytics model.predict", "img/s", MIN_RATIO, args.json):
        return 2
    with tempfile.TemporaryDirectory(prefix="aegis-bench-detect-") as tmp:
        tmp = Path(tmp)
        rows, res = measure(args, build_repo(tmp / "build", args.images), tmp)
    print(f"ours / framework throughput: median {res['ratio']:.3f} over {args.repeat} rounds {res['ratios']} "
          f"(target >= {MIN_RATIO:g}); CPU seconds framework / ours: median {res['cpu_ratio']:.3f} {res['cpu_ratios']}; "
          f"{res['boxes']} boxes ({res['boxes_per_image']}/image), bit-identical")
    finish("detect", rows, args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
