"""Throughput of ``aegisbench detect`` against the framework's own batch prediction.

Same images, same model, same batch size, same input size, in one process (so the same
torch thread count on both sides: the one the Ultralytics predictor sets on CPU, cores - 1,
or ``--threads``):

* framework: ``ultralytics`` ``model.predict(source=<folder of PNGs>, batch=B, stream=True)``
  (its own loader reads and decodes the files);
* ours: the runner's inner loop - Parquet shards of the dataset repo read and PNGs
  decoded by the background :class:`~aegisbench.detectors.loader.FrameLoader`,
  ``Detector.predict`` (tiling plan, remap, merge), Detections collected and written
  with ``write_parquet_predictions``.

The frames are the whole-frame-sized images (no tiling, so both sides do identical
model work) of the clean splits of one source; large frames are timed separately
through the tiler (tiles/s, ours only). Both sides run ``--repeat`` times, interleaved
(the order flipped every round, after one untimed warm-up round); medians are reported.
Without ``--dataset`` a small repo is built from the embedded synthetic sources
(``--images`` SAR frames) in a temporary folder first.
Prints images/s of each side and the ratio ours / framework (target >= 0.9), and
checks that both produced the same number of boxes.

Run: ``.venv/bin/python perf/detect.py [--dataset data/aegisbench] [--weights W] [--device cuda] [--json out.json]``
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

import pyarrow.parquet as pq  # noqa: E402

PEER = "ultralytics"
PEER_HOW = ".venv/bin/pip install -e '.[detect]'"
MIN_RATIO = 0.9


def frames_of(repo: Path, manifest: dict, source: str) -> tuple[list[tuple[str, str]], dict[str, tuple[int, int]]]:
    """(config, split) pairs of the clean splits of ``source`` and image_id -> (w, h)."""
    from aegisbench.detectors.loader import shard_paths

    pairs = [("clean", s) for s in (f"{source}_val", source) if s in manifest["configs"]["clean"]["splits"]]
    sizes = {}
    for c, s in pairs:
        for path in shard_paths(repo, manifest, c, s):
            t = pq.read_table(path, columns=["image_id", "width", "height"])
            sizes.update(zip(t.column("image_id").to_pylist(),
                             zip(t.column("width").to_pylist(), t.column("height").to_pylist())))
    return pairs, sizes


def export_pngs(repo: Path, manifest: dict, pairs, keep: set[str], folder: Path) -> int:
    from aegisbench.detectors.loader import shard_paths

    n = 0
    for c, s in pairs:
        for path in shard_paths(repo, manifest, c, s):
            t = pq.read_table(path, columns=["image_id", "image"])
            for image_id, img in zip(t.column("image_id").to_pylist(), t.column("image").to_pylist()):
                if image_id in keep:
                    (folder / f"{image_id}.png").write_bytes(img["bytes"])
                    n += 1
    return n


class Framework:
    """``model.predict`` over the PNG folder (the framework's own loader), warmed up."""

    def __init__(self, weights: str, folder: Path, args, device: str):
        from ultralytics import YOLO

        from aegisbench.detectors.ultralytics_adapter import precision_args

        self.model, self.folder = YOLO(weights), folder
        self.kw = dict(imgsz=args.imgsz, conf=args.conf, batch=args.batch, device=device, verbose=False,
                       save=False, **precision_args(args.half))
        list(self.model.predict(source=str(next(folder.glob("*.png"))), **self.kw))

    def run(self) -> tuple[float, int]:
        t = time.perf_counter()
        boxes = sum(len(r.boxes) for r in self.model.predict(source=str(self.folder), stream=True, **self.kw))
        return time.perf_counter() - t, boxes


class Ours:
    """The runner's loop: background shard decoding, ``Detector.predict``, Parquet writing."""

    def __init__(self, detector, repo: Path, manifest: dict, pairs, skip: set[str], args, out: Path):
        from aegisbench.detectors.loader import FrameLoader, shard_paths

        self.detector, self.repo, self.manifest, self.pairs, self.skip = detector, repo, manifest, pairs, skip
        self.args, self.out = args, out
        first = next(iter(FrameLoader(shard_paths(repo, manifest, *pairs[0]), batch=1)))
        detector.predict(first.images)

    def run(self) -> tuple[float, int, int]:
        from aegisbench.detectors.loader import FrameLoader, shard_paths
        from aegisbench.predictions import write_parquet_predictions

        t = time.perf_counter()
        w0 = self.detector.stats.windows
        entries = {}
        shards = [((c, s), p) for c, s in self.pairs for p in shard_paths(self.repo, self.manifest, c, s)]
        for fb in FrameLoader(shards, batch=self.args.batch, workers=self.args.loader_workers, skip=self.skip):
            for image_id, det in zip(fb.image_ids, self.detector.predict(fb.images)):
                entries[(*fb.tag, image_id)] = det
        write_parquet_predictions(entries, self.out / "predictions.parquet")
        return (time.perf_counter() - t, sum(len(d) for d in entries.values()),
                self.detector.stats.windows - w0)


def build_small(root: Path, images: int) -> Path:
    """A small verified repo from the embedded synthetic sources (clean + two conditions)."""
    from aegisbench.builders.build import build_repo

    params = bench_params(root, images)
    materialize(params)
    build_repo(params, progress=False)
    return Path(params.dataset_dir)


def measure(args, repo: Path, tmp: Path) -> tuple[list[dict], dict]:
    """Interleaved runs of both sides on ``repo``; the summary rows and the details."""
    import torch

    from aegisbench.builders.manifest import require_verified
    from aegisbench.detectors.interface import DetectorOptions, load_detector, resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    manifest = require_verified(repo)
    device = resolve_device(args.device)
    pairs, sizes = frames_of(repo, manifest, args.source)
    whole = {i for i, (w, h) in sizes.items() if max(w, h) <= args.imgsz}
    large = set(sizes) - whole
    weights = args.weights or str(trained_weights("yolov8n.yaml", tmp / "yolov8n.pt"))
    (tmp / "png").mkdir()
    n = export_pngs(repo, manifest, pairs, whole, tmp / "png")
    if n == 0:
        raise SystemExit(f"no frame of {args.source} fits in {args.imgsz} px")
    opts = DetectorOptions(device=device, batch=args.batch, half=args.half, conf=args.conf, imgsz=args.imgsz)
    framework = Framework(weights, tmp / "png", args, device)
    ours = Ours(load_detector("yolo", weights, opts), repo, manifest, pairs, large, args, tmp)
    runs = interleaved(args.repeat, {"framework": framework.run, "ours": ours.run})
    f_s = statistics.median(r[0] for r in runs["framework"])
    o_s = statistics.median(r[0] for r in runs["ours"])
    f_boxes, o_boxes = runs["framework"][-1][1], runs["ours"][-1][1]
    res = {"device": device, "torch_threads": torch.get_num_threads(), "images": n, "batch": args.batch,
           "imgsz": args.imgsz, "repeat": args.repeat, "framework_images_per_s": round(n / f_s, 2),
           "ours_images_per_s": round(n / o_s, 2), "ratio": round(f_s / o_s, 3),
           "boxes_framework": f_boxes, "boxes_ours": o_boxes}
    what = f"{n} whole frames, batch {args.batch}, {args.imgsz} px, {device}, torch threads {res['torch_threads']}"
    rows = [speed_row(f"detect images/s vs ultralytics model.predict ({what})", n / o_s, n / f_s, unit="img/s",
                      higher_is_better=True, min_ratio=MIN_RATIO),
            row(f"boxes, same frames and model ({what})", o_boxes, f_boxes, unit="boxes", target="equal",
                met=o_boxes == f_boxes)]
    if large:
        tiled = load_detector("yolo", weights, DetectorOptions(device=device, batch=args.batch, half=args.half,
                                                               conf=args.conf))
        tiled_run = Ours(tiled, repo, manifest, pairs, whole, args, tmp).run
        tiled_runs = [tiled_run() for _ in range(args.repeat)]
        t_s = statistics.median(r[0] for r in tiled_runs)
        res.update(large_frames=len(large), large_images_per_s=round(len(large) / t_s, 2),
                   tiles_per_s=round(tiled_runs[-1][2] / t_s, 2))
        rows.append(row(f"tiled large frames (ours only; large frames: {len(large)})", res["tiles_per_s"],
                        unit="tiles/s"))
    return rows, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", help="a built dataset repo (default: build a small one in a temporary folder)")
    ap.add_argument("--images", type=int, default=16, help="SAR images of the small repo without --dataset")
    ap.add_argument("--source", default="synthetic_sar")
    ap.add_argument("--weights", help="a trained Ultralytics .pt (default: yolov8n from its YAML, trained one epoch"
                    " on four generated frames)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--conf", type=float, default=0.001)
    ap.add_argument("--half", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per side (default 3)")
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--json", help="write the summary rows and details here")
    args = ap.parse_args(argv)
    if args.dataset and not Path(args.dataset).is_dir():
        raise SystemExit(f"{args.dataset}: no dataset repo there (build one, or leave --dataset out)")
    if importlib.util.find_spec(PEER) is None:
        print(f"peer not installed: {PEER} ({PEER_HOW})")
        print("our side wraps the same library, so nothing was measured")
        finish("detect", [row("detect images/s vs ultralytics model.predict", None, unit="img/s",
                              target=f">= {MIN_RATIO:g}x", peer_missing=PEER)], args.json)
        return 2
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    import_ultralytics()
    with tempfile.TemporaryDirectory(prefix="aegis-bench-detect-") as tmp:
        tmp = Path(tmp)
        repo = Path(args.dataset) if args.dataset else build_small(tmp / "build", args.images)
        rows, res = measure(args, repo, tmp)
    print(f"ours / framework throughput: {res['ratio']:.3f} (target >= {MIN_RATIO:g}; medians of {args.repeat})")
    if res["boxes_framework"] != res["boxes_ours"]:
        print(f"WARNING: box counts differ ({res['boxes_ours']} vs {res['boxes_framework']})", file=sys.stderr)
    finish("detect", rows, args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
