"""Accelerator throughput, for a lent GPU (run through ``perf/gpu.sh``): detect images/s at
several batch sizes with FP16, and the torch fire-spread model's cell-updates/s.

* detect: ``run_detect`` (the ``aegisbench detect`` path: background shard decoding,
  ``Detector.predict``, Parquet parts, submission) with yolov8n trained one epoch on
  generated frames (it emits 300 boxes per frame at conf 0.001), on a small repo of 640x640
  SAR frames built from the embedded synthetic source; one untimed warm-up run per batch
  size, then ``--repeat`` timed runs; images/s is the median of the runner's own report
  (predict loop to written parts, model load excluded). ``--half`` is FP16 on CUDA.
* fire spread: seed 003's simulator is a compiled CPU kernel (numba) with no torch
  backend; the torch fire-spread model is the ConvLSTM-CA forecaster
  (:mod:`aegisbench.forecasters.convlstm`), whose autoregressive rollout is timed on the
  device: cell-updates/s = realizations x frames x H x W / seconds (median of repeats).

``--device cuda`` fails (exit 2, one line) when CUDA is absent; ``--device cpu`` with tiny
sizes checks the script itself. Writes ``--out`` (JSON) and a Markdown table beside it.

Run: ``.venv/bin/python perf/gpu.py --device cpu --images 8 --batches 1,8 --grid 64 --out /tmp/gpu.json``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import cap, trained_weights

cap()


def detect_rows(args, tmp: Path) -> list[dict]:
    from detect import build_repo

    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect

    repo = build_repo(tmp / "build", args.images)
    weights = trained_weights("yolov8n.yaml", tmp / "yolov8n.pt")
    rows = []
    for b in args.batches:
        det = load_detector("yolo", weights, DetectorOptions(device=args.device, batch=b, half=args.half, imgsz=640))
        run = RunOptions(frames_per_batch=b, progress=False, overwrite=True)
        info = SubmissionInfo(name="gpu", model="yolov8n")
        speeds = []
        for k in range(args.repeat + 1):
            report = run_detect(det, repo, "sar", tmp / "out", info, run)
            if k:
                speeds.append(report["images_per_s"])
        rows.append({"work": "detect", "batch": b, "half": det.options.half, "device": det.options.device,
                     "images": report["frames"], "images_per_s": statistics.median(speeds), "runs": speeds})
        print(f"detect batch {b:3d} half={det.options.half}: {rows[-1]['images_per_s']:.1f} images/s "
              f"({report['frames']} images, runs {speeds})", flush=True)
    return rows


def firespread_row(args) -> dict:
    import torch

    from aegisbench.forecasters.convlstm import ConvLSTMCA

    dev = torch.device(args.device)
    net = ConvLSTMCA(8, seed=0).to(dev).eval()
    n, g, k, horizon = args.realizations, args.grid, 3, args.horizon
    gen = torch.Generator().manual_seed(0)
    tree = (torch.rand(n, g, g, generator=gen) < 0.6).float().to(dev)
    obs = torch.zeros(n, k, g, g)
    obs[:, :, g // 2, g // 2] = 1
    obs, p = obs.to(dev), torch.full((n,), 0.8, device=dev)
    times = []
    with torch.inference_mode():
        for r in range(args.repeat + 1):
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t = time.perf_counter()
            net(tree, obs, p, horizon)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            if r:
                times.append(time.perf_counter() - t)
    frames = k + horizon
    s = statistics.median(times)
    out = {"work": "firespread convlstm-ca rollout", "device": str(dev), "realizations": n, "grid": g,
           "frames": frames, "cell_updates_per_s": n * frames * g * g / s, "seconds": s}
    print(f"fire spread (ConvLSTM-CA, torch) {n} x {g}x{g} x {frames} frames: "
          f"{out['cell_updates_per_s']:.3g} cell-updates/s", flush=True)
    return out


def markdown(res: dict) -> str:
    lines = [f"device: {res['device_name']}; torch {res['torch']}; {res['seconds']:.0f} s in all", "",
             "| work | batch | FP16 | throughput |", "| --- | ---: | --- | ---: |"]
    for r in res["detect"]:
        lines.append(f"| detect, {r['images']} SAR frames 640x640, yolov8n | {r['batch']} | "
                     f"{'yes' if r['half'] else 'no'} | {r['images_per_s']:.1f} images/s |")
    f = res["firespread"]
    lines.append(f"| fire spread ConvLSTM-CA rollout, {f['realizations']} x {f['grid']}x{f['grid']} x "
                 f"{f['frames']} frames | {f['realizations']} | no | {f['cell_updates_per_s']:.3g} cell-updates/s |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (cpu: checks the script, tiny sizes)")
    ap.add_argument("--half", action="store_true", help="FP16 detection (CUDA only)")
    ap.add_argument("--images", type=int, default=64, help="SAR images per config of the built repo")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--grid", type=int, default=256)
    ap.add_argument("--realizations", type=int, default=64)
    ap.add_argument("--horizon", type=int, default=60)
    ap.add_argument("--out", required=True, help="JSON result (a .md table is written beside it)")
    args = ap.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",")]
    import torch

    if args.device.startswith("cuda"):
        index = int(args.device.split(":")[1]) if ":" in args.device else 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            print(f"perf/gpu.py: error: CUDA device {args.device} is not available "
                  f"({torch.cuda.device_count() if torch.cuda.is_available() else 0} GPU(s) visible); "
                  "run with DEVICE=cpu to check the script", file=sys.stderr)
            return 2
        name = torch.cuda.get_device_name(index)
    else:
        name = "cpu"
    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    import_ultralytics()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aegis-bench-gpu-") as tmp:
        detect = detect_rows(args, Path(tmp))
    res = {"device": args.device, "device_name": name, "torch": torch.__version__, "detect": detect,
           "firespread": firespread_row(args)}
    res["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
