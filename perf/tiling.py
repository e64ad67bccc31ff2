"""Tiled large frames: ``Detector.predict`` against an Ultralytics-only tiling loop.

Same frames (``--frames`` 4000x3000, seeded), same windows (``tile_windows``: 20 tiles of
1024 px with 256 px overlap per frame), same model, batch, input size and score floor
(``--conf 0.001``, the detect default), in one process:

* framework: for each frame, ``model.predict(<the frame's tiles as BGR views>, batch=B)``
  with Ultralytics' NMS wall-clock limit disabled (``max_time_img=inf``: with the limit, at
  conf 0.001 on a loaded CPU its NMS stops and later tiles of the batch get no boxes),
  boxes shifted by the window origin;
* ours: ``Detector.predict(frames)`` of the ``yolo`` adapter (tiling plan, our NMS
  without time limit, exact remap, seam merge, per-frame cap).

Identical boxes are checked bit for bit: the framework's per-window boxes pushed
through our seam merge must equal our output on every frame (and the box count must be
non-zero), otherwise no ratio is printed. Our side does the seam merge on top of the
framework's work. Rounds are interleaved (order flipped every round, one untimed warm-up
round); the ratio is the median over rounds of framework seconds / ours (target >= 0.9).

Run: ``.venv/bin/python perf/tiling.py [--frames 1] [--repeat 3] [--model aegis_yolo_tiny.yaml] [--json out.json]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import ROOT, cap, finish, interleaved, row, speed_row, trained_weights

cap()

from detect import ultralytics_ready  # noqa: E402

import numpy as np  # noqa: E402

MIN_RATIO = 0.9
TINY = ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml"


def make_frames(n: int, width: int, height: int) -> list[np.ndarray]:
    """Seeded RGB frames: smooth random fields plus noise (not flat: the model fires everywhere)."""
    import cv2

    rng = np.random.default_rng(17)
    out = []
    for _ in range(n):
        coarse = rng.integers(0, 256, (height // 40, width // 40, 3), np.uint8)
        img = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
        out.append(np.clip(img.astype(np.int16) + rng.integers(-20, 21, img.shape), 0, 255).astype(np.uint8))
    return out


class Framework:
    """Ultralytics alone: each frame's tiles through ``model.predict``, no NMS time limit."""

    def __init__(self, weights: str, frames: list[np.ndarray], args):
        from ultralytics import YOLO

        from aegisbench.detectors.tiling import TilingParams, tile_windows

        self.model = YOLO(weights)
        self.frames = [np.ascontiguousarray(f[..., ::-1]) for f in frames]  # the framework's own convention: BGR
        self.windows = [tile_windows(f.shape[1], f.shape[0], TilingParams()) for f in frames]
        self.kw = dict(imgsz=args.tile, conf=args.conf, iou=0.7, max_det=300, batch=args.batch, device="cpu",
                       verbose=False, save=False)
        self.threads = args.threads or 1

    def per_window(self) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        """Each frame's per-window ``(xyxy, score)`` in window pixels; tiles of all frames in
        order, ``batch`` per ``predict`` call (a list source is one batch however long)."""
        from aegisbench.detectors.ultralytics_adapter import keep_threads
        from aegisbench.kernels import portable

        crops = [img[y0:y1, x0:x1] for img, wins in zip(self.frames, self.windows) for x0, y0, x1, y1 in wins.tolist()]
        b = self.kw["batch"]
        with portable(self.threads), keep_threads():  # the kernels our detect runs a CPU model on
            res = [r for s in range(0, len(crops), b) for r in self.model.predict(crops[s:s + b], **self.kw)]
        flat = [(r.boxes.xyxy.numpy(), r.boxes.conf.numpy()) for r in res]
        ends = np.cumsum([len(w) for w in self.windows])
        return [flat[e - len(w):e] for e, w in zip(ends, self.windows)]

    def run(self) -> tuple[float, int]:
        t = time.perf_counter()
        n = 0
        for parts, wins in zip(self.per_window(), self.windows):
            shifted = [b + np.asarray(w[:2].tolist() * 2, np.float32) for (b, _), w in zip(parts, wins)]
            n += sum(len(b) for b in shifted)
        return time.perf_counter() - t, n


def no_time_limit():
    """Patch Ultralytics' NMS so its wall-clock limit never fires; returns the undo."""
    from ultralytics.utils import nms

    original = nms.non_max_suppression

    def unlimited(*a, **kw):
        kw["max_time_img"] = float("inf")
        return original(*a, **kw)

    nms.non_max_suppression = unlimited
    return lambda: setattr(nms, "non_max_suppression", original)


def measure(args, tmp: Path) -> tuple[list[dict], dict]:
    import torch

    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.tiling import TilingParams, cap_detections, merge_windows
    from aegisbench.predictions import Detections

    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = TINY if args.model == "tiny" else args.model
    weights = args.weights or str(trained_weights(cfg, tmp / "model.pt"))
    frames = make_frames(args.frames, args.width, args.height)
    ours = load_detector("yolo", weights, DetectorOptions(batch=args.batch, conf=args.conf, threads=args.threads or 1,
                                                           tiling=TilingParams(tile=args.tile)))
    framework = Framework(weights, frames, args)

    def ours_run() -> tuple[float, list]:
        t = time.perf_counter()
        out = ours.predict(frames)
        return time.perf_counter() - t, out

    undo = no_time_limit()
    try:
        runs = interleaved(args.repeat, {"framework": framework.run, "ours": ours_run})
        theirs = framework.per_window()
    finally:
        undo()
    mine = runs["ours"][-1][1]
    boxes = sum(len(d) for d in mine)
    for f, (parts, wins, img) in enumerate(zip(theirs, framework.windows, frames)):
        want = cap_detections(merge_windows([Detections(b, s) for b, s in parts], wins, img.shape[1], img.shape[0],
                                            ours.options.tiling), ours.options.max_det_frame)
        got = mine[f]
        if not (np.array_equal(got.xyxy, want.xyxy) and np.array_equal(got.score, want.score)):
            raise SystemExit(f"tiling benchmark: frame {f}: our boxes differ from the framework's per-window boxes "
                             f"merged ({len(got)} vs {len(want)}); no ratio printed")
    if boxes == 0:
        raise SystemExit("tiling benchmark: no boxes at all (the comparison is empty); no ratio printed")
    ratios = [f[0] / o[0] for f, o in zip(runs["framework"], runs["ours"])]
    f_s = statistics.median(r[0] for r in runs["framework"])
    o_s = statistics.median(r[0] for r in runs["ours"])
    n, tiles = len(frames), sum(len(w) for w in framework.windows)
    res = {"torch_threads": torch.get_num_threads(), "frames": n, "size": f"{args.width}x{args.height}",
           "tiles": tiles, "batch": args.batch, "conf": args.conf, "model": Path(str(cfg)).name,
           "repeat": args.repeat, "ratio": round(statistics.median(ratios), 3), "ratios": [round(r, 3) for r in ratios],
           "framework_tiles_per_s": round(tiles / f_s, 3), "ours_tiles_per_s": round(tiles / o_s, 3),
           "window_boxes": runs["framework"][-1][1], "merged_boxes": boxes}
    what = (f"{n} frame(s) {res['size']}, {tiles} tiles of {args.tile} px, batch {args.batch}, conf {args.conf:g}, "
            f"{res['model']}, cpu, torch threads {res['torch_threads']}")
    rows = [speed_row(f"tiled detect tiles/s vs ultralytics tiling loop, no NMS time limit ({what})",
                      tiles / o_s, tiles / f_s, unit="tiles/s", higher_is_better=True, min_ratio=MIN_RATIO),
            row(f"boxes: framework per-window boxes through our seam merge = ours, bit for bit ({what})", boxes,
                res["window_boxes"], unit="boxes", target="equal after merge", met=True)]
    rows[0]["ratio"], rows[0]["met"] = res["ratio"], res["ratio"] >= MIN_RATIO
    return rows, res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1)
    ap.add_argument("--width", type=int, default=4000)
    ap.add_argument("--height", type=int, default=3000)
    ap.add_argument("--tile", type=int, default=1024)
    ap.add_argument("--model", default="tiny", help="model YAML trained one epoch (default: the repo's tiny YOLO, "
                    "src/aegisbench/detectors/aegis_yolo_tiny.yaml; e.g. yolov8n.yaml)")
    ap.add_argument("--weights", help="a trained Ultralytics .pt instead")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--conf", type=float, default=0.001)
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds per side (default 3)")
    ap.add_argument("--threads", type=int, help="torch CPU threads of both sides (default 1, as detect)")
    ap.add_argument("--json", help="write the summary rows and details here")
    args = ap.parse_args(argv)
    if not ultralytics_ready("tiling", "tiled detect tiles/s vs ultralytics tiling loop", "tiles/s", MIN_RATIO,
                             args.json):
        return 2
    with tempfile.TemporaryDirectory(prefix="aegis-bench-tiling-") as tmp:
        rows, res = measure(args, Path(tmp))
    print(f"ours / framework tiles/s: median {res['ratio']:.3f} over {args.repeat} rounds {res['ratios']} "
          f"(target >= {MIN_RATIO:g}); {res['window_boxes']} window boxes -> {res['merged_boxes']} merged, identical")
    finish("tiling", rows, args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
