"""Throughput of ``aegisbench detect`` against the framework's own batch prediction.

Same images, same model, same batch size, same input size, in one process:

* framework: ``ultralytics`` ``model.predict(source=<folder of PNGs>, batch=B, stream=True)``
  (its own loader reads and decodes the files);
* ours: the runner's inner loop - Parquet shards of the dataset repo read and PNGs
  decoded by the background :class:`~aegisbench.detectors.loader.FrameLoader`,
  ``Detector.predict`` (tiling plan, remap, merge), Detections collected and written
  with ``write_parquet_predictions``.

The frames are the whole-frame-sized images (no tiling, so both sides do identical
model work) of the clean splits of one source; large frames are timed separately
through the tiler (tiles/s, ours only). Runs alternate between the two sides and the
best of ``--repeat`` is kept per side. On CPU both sides use the thread count the
Ultralytics predictor sets (cores - 1).
Prints images/s of each side and the ratio ours / framework (target >= 0.9), and
checks that both produced the same number of boxes.

Run: ``.venv/bin/python perf/detect.py --dataset data/aegisbench [--weights W] [--device cuda]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from aegisbench.builders.manifest import require_verified
from aegisbench.detectors.interface import DetectorOptions, load_detector, resolve_device
from aegisbench.detectors.loader import FrameLoader, shard_paths
from aegisbench.detectors.ultralytics_adapter import import_ultralytics, precision_args
from aegisbench.predictions import write_parquet_predictions


def frames_of(repo: Path, manifest: dict, source: str) -> tuple[list[tuple[str, str]], dict[str, tuple[int, int]]]:
    """(config, split) pairs of the clean splits of ``source`` and image_id -> (w, h)."""
    pairs = [("clean", s) for s in (f"{source}_val", source) if s in manifest["configs"]["clean"]["splits"]]
    sizes = {}
    for c, s in pairs:
        for path in shard_paths(repo, manifest, c, s):
            t = pq.read_table(path, columns=["image_id", "width", "height"])
            sizes.update(zip(t.column("image_id").to_pylist(),
                             zip(t.column("width").to_pylist(), t.column("height").to_pylist())))
    return pairs, sizes


def export_pngs(repo: Path, manifest: dict, pairs, keep: set[str], folder: Path) -> int:
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
        self.detector, self.repo, self.manifest, self.pairs, self.skip = detector, repo, manifest, pairs, skip
        self.args, self.out = args, out
        first = next(iter(FrameLoader(shard_paths(repo, manifest, *pairs[0]), batch=1)))
        detector.predict(first.images)

    def run(self) -> tuple[float, int, int]:
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="data/aegisbench")
    ap.add_argument("--source", default="synthetic_sar")
    ap.add_argument("--weights", help="Ultralytics .pt (default: yolov8n built from its YAML, saved locally)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--conf", type=float, default=0.001)
    ap.add_argument("--half", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    args = ap.parse_args(argv)
    import_ultralytics()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    repo = Path(args.dataset)
    manifest = require_verified(repo)
    device = resolve_device(args.device)
    pairs, sizes = frames_of(repo, manifest, args.source)
    whole = {i for i, (w, h) in sizes.items() if max(w, h) <= args.imgsz}
    large = set(sizes) - whole
    with tempfile.TemporaryDirectory(prefix="aegis-bench-detect-") as tmp:
        tmp = Path(tmp)
        weights = args.weights
        if weights is None:
            from ultralytics import YOLO
            weights = str(tmp / "yolov8n.pt")
            YOLO("yolov8n.yaml").save(weights)
        (tmp / "png").mkdir()
        n = export_pngs(repo, manifest, pairs, whole, tmp / "png")
        if n == 0:
            print(f"no frame of {args.source} fits in {args.imgsz} px", file=sys.stderr)
            return 2
        opts = DetectorOptions(device=device, batch=args.batch, half=args.half, conf=args.conf, imgsz=args.imgsz)
        framework = Framework(weights, tmp / "png", args, device)
        ours = Ours(load_detector("yolo", weights, opts), repo, manifest, pairs, large, args, tmp)
        f_s = o_s = float("inf")
        for _ in range(args.repeat):  # interleaved, so both sides see the same machine load
            (fs, f_boxes), (os_, o_boxes, _) = framework.run(), ours.run()
            f_s, o_s = min(f_s, fs), min(o_s, os_)
        res = {"device": device, "torch_threads": torch.get_num_threads(), "images": n, "batch": args.batch,
               "imgsz": args.imgsz, "framework_images_per_s": round(n / f_s, 2),
               "ours_images_per_s": round(n / o_s, 2), "ratio": round(f_s / o_s, 3),
               "boxes_framework": f_boxes, "boxes_ours": o_boxes}
        if large:
            tiled = load_detector("yolo", weights, DetectorOptions(device=device, batch=args.batch, half=args.half,
                                                                   conf=args.conf))
            tiled_run = Ours(tiled, repo, manifest, pairs, whole, args, tmp)
            t_s, t_windows = float("inf"), 0
            for _ in range(args.repeat):
                s_, _, t_windows = tiled_run.run()
                t_s = min(t_s, s_)
            res.update(large_frames=len(large), large_images_per_s=round(len(large) / t_s, 2),
                       tiles_per_s=round(t_windows / t_s, 2))
    print(json.dumps(res, indent=1))
    print(f"ours / framework throughput: {res['ratio']:.3f} (target >= 0.9)")
    if f_boxes != o_boxes:
        print(f"WARNING: box counts differ ({o_boxes} vs {f_boxes})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
