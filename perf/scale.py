"""Scale-out throughput: build and detect with 1 and 2 local workers and with a local Ray.

Same inputs for every engine: the embedded synthetic sources at ``--images`` SAR
images (val + test, every 5th frame 2000x1500) plus a small smoke source, the
configs ``clean``, ``low_light_s3``, ``motion_blur_s2``, one WARP level and a small
fire-spread section (its ensemble blocks are build shards too); detection runs the
tiny YOLO of ``aegisbench/detectors/aegis_yolo_tiny.yaml`` (built from its YAML,
untrained, score floor 0.001: about 300 boxes per frame) over every sar split of the built repo.

Prints, per engine, build shards/s and detect images/s, the speed-up against one
local worker, and side by side the dataset digest, the SHA-256 of ``manifest.json``
and of ``predictions.parquet`` - they must be equal (exit 1 otherwise). Ray's start-up
is timed apart from the build; its detect time includes starting the actors (one
model per actor). With ``--memory``, child processes also measure the peak resident
memory of a local one-worker build (sources table, then repo) at 1x, 2x and 4x the
images: it must be flat in the number of images.

Run: ``.venv/bin/python perf/scale.py [--images 24] [--ray-cpus 2] [--memory]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from aegisbench.builders.build import build_repo
from aegisbench.builders.sources import materialize_source
from aegisbench.executor import Executor, connect
from aegisbench.hashing import file_sha256
from aegisbench.params import Params

ROOT = Path(__file__).resolve().parents[1]
FIRESPREAD = {"grid": [32, 32], "realizations": 40, "s_levels": [0, 20], "initial_conditions": 3,
              "test_initial_conditions": [2], "realizations_per_shard": 10}


def scale_params(root: Path, images: int, rows_per_shard: int = 4, firespread: bool = True) -> Params:
    """Params of the benchmark input: ``images`` SAR frames (1/4 val, 3/4 test)."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    n_val = max(1, images // 4)
    raw["sources"]["synthetic_sar"]["options"] = {"n_train": 0, "n_val": n_val, "n_test": max(1, images - n_val),
                                                  "images_per_flight": 4}
    raw["sources"]["synthetic_smoke"]["options"] = {"n_train": 0, "n_val": 1, "n_test": 1,
                                                    "frames_per_sequence": 4}
    raw["build"].update(conditions=["low_light_s3", "motion_blur_s2"], compound=[], warp_noise_levels=[0.1],
                        rows_per_shard=rows_per_shard, workers=1)
    raw["firespread"] = dict(FIRESPREAD) if firespread else {"enabled": False}
    raw["paths"] = {"sources": str(root / "sources"), "dataset": str(root / "repo")}
    return Params.from_dict(raw)


def peak_rss_mb() -> float:
    """Peak resident memory of this process: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``,
    which a child inherits from the parent it was forked from)."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_child(root: Path, images: int, phase: str) -> None:
    """One phase of a local one-worker build in this (fresh) process; prints its peak RSS."""
    params = scale_params(root, images, firespread=False)
    t = time.perf_counter()
    if phase == "sources":
        for src in params.sources:
            materialize_source(src, params.benchmark_version, params.sources_dir)
    else:
        build_repo(params, progress=False, executor=Executor("local", 1))
    print(json.dumps({"images": images, "phase": phase, "peak_rss_mb": round(peak_rss_mb(), 1),
                      "seconds": round(time.perf_counter() - t, 2)}))


def measure_memory(base: int, scales=(1, 2, 4)) -> list[dict]:
    out = []
    for k in scales:
        with tempfile.TemporaryDirectory(prefix="aegis-scale-mem-") as tmp:
            row = {"scale": k, "images": base * k}
            for phase in ("sources", "build"):
                proc = subprocess.run([sys.executable, __file__, "--memory-child", phase, "--root", tmp,
                                       "--images", str(base * k)], capture_output=True, text=True, check=True)
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                row[f"{phase}_peak_rss_mb"], row[f"{phase}_s"] = res["peak_rss_mb"], res["seconds"]
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def run_detect_once(weights: Path, repo: Path, out: Path, executor: Executor) -> tuple[float, dict]:
    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect

    det = load_detector("yolo", weights, DetectorOptions(batch=8))  # conf 0.001: NMS stays far from its time limit
    t = time.perf_counter()
    report = run_detect(det, repo, "sar", out, SubmissionInfo(name="scale", model="aegis_yolo_tiny"),
                        RunOptions(progress=False), executor=executor)
    return time.perf_counter() - t, report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=24, help="SAR images of the input (default 24)")
    ap.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray (default 2)")
    ap.add_argument("--skip-detect", action="store_true")
    ap.add_argument("--memory", action="store_true", help="also peak RSS of a local build at 1x, 2x, 4x the images")
    ap.add_argument("--memory-images", type=int, default=24, help="images at 1x for --memory (default 24)")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--memory-child", choices=["sources", "build"], help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.memory_child:
        memory_child(Path(a.root), a.images, a.memory_child)
        return 0
    engines = [("local x1", Executor("local", 1)), ("local x2", Executor("local", 2)),
               (f"ray ({a.ray_cpus} cpu)", Executor("ray", a.ray_cpus))]
    results: dict = {"images": a.images, "engines": []}
    with tempfile.TemporaryDirectory(prefix="aegis-scale-") as tmp:
        tmp = Path(tmp)
        params = scale_params(tmp, a.images)
        for src in params.sources:
            materialize_source(src, params.benchmark_version, params.sources_dir)
        weights = None
        if not a.skip_detect:
            from aegisbench.detectors.ultralytics_adapter import import_ultralytics
            import_ultralytics()
            from ultralytics import YOLO
            weights = tmp / "tiny.pt"
            YOLO(str(ROOT / "benchmark" / "detectors" / "aegis_yolo_tiny.yaml")).save(weights)
        for name, ex in engines:
            row: dict = {"engine": name}
            if ex.kind == "ray":
                t = time.perf_counter()
                connect(ex)
                row["ray_start_s"] = round(time.perf_counter() - t, 2)
            repo = tmp / f"repo_{len(results['engines'])}"
            t = time.perf_counter()
            manifest = build_repo(params, out=repo, progress=False, executor=ex)
            build_s = time.perf_counter() - t
            shards = sum(len(s["shards"]) for c in manifest["configs"].values() for s in c["splits"].values())
            row.update(build_s=round(build_s, 2), shards=shards, shards_per_s=round(shards / build_s, 2),
                       dataset_digest=manifest["dataset_digest"], manifest_sha256=file_sha256(repo / "manifest.json"))
            if weights is not None:
                det_s, rep = run_detect_once(weights, repo, tmp / f"sub_{len(results['engines'])}", ex)
                row.update(detect_s=round(det_s, 2), frames=rep["frames"],
                           images_per_s=round(rep["frames"] / det_s, 2),
                           predictions_sha256=file_sha256(tmp / f"sub_{len(results['engines'])}" / "predictions.parquet"))
            results["engines"].append(row)
            print(json.dumps(row), flush=True)
    base = results["engines"][0]
    for row in results["engines"]:
        row["build_speedup"] = round(base["build_s"] / row["build_s"], 2)
        if "detect_s" in row:
            row["detect_speedup"] = round(base["detect_s"] / row["detect_s"], 2)
    print(f"\n{'engine':<14}{'shards/s':>10}{'build x':>9}{'img/s':>8}{'detect x':>10}  dataset digest / manifest sha256"
          " / predictions sha256")
    for r in results["engines"]:
        print(f"{r['engine']:<14}{r['shards_per_s']:>10}{r['build_speedup']:>9}{r.get('images_per_s', '-'):>8}"
              f"{r.get('detect_speedup', '-'):>10}  {r['dataset_digest'][:16]} / {r['manifest_sha256'][:16]}"
              f" / {r.get('predictions_sha256', '-')[:16]}")
    same = all(len({r.get(k) for r in results["engines"]}) == 1
               for k in ("dataset_digest", "manifest_sha256", "predictions_sha256"))
    results["identical"] = same
    print("identical bytes across engines:", "yes" if same else "NO")
    if a.memory:
        results["memory"] = measure_memory(a.memory_images)
        print(f"\n{'scale':>5}{'images':>8}{'sources MB':>12}{'build MB':>10}{'build s':>9}")
        for m in results["memory"]:
            print(f"{m['scale']:>5}{m['images']:>8}{m['sources_peak_rss_mb']:>12}{m['build_peak_rss_mb']:>10}"
                  f"{m['build_s']:>9}")
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
