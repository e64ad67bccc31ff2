"""Scale-out throughput: build and detect with 1 and 2 local workers and with a local Ray.

Same inputs for every engine (:func:`_bench.bench_params`): the embedded synthetic sources
at ``--images`` SAR images (val + test, every 5th frame 2000x1500) plus a small smoke
source, the configs ``clean``, ``low_light_s3``, ``motion_blur_s2``, one WARP level and a
small fire-spread section (its ensemble blocks are build shards too); detection runs the
tiny YOLO of ``src/aegisbench/detectors/aegis_yolo_tiny.yaml`` (built from its YAML and
trained one epoch on generated frames, :func:`_bench.trained_weights`: detect refuses
untrained checkpoints) over every sar split of the built repo.

Prints, per engine, build shards/s and detect images/s, the speed-up against one
local worker, and side by side the dataset digest, the SHA-256 of ``manifest.json``
and of ``predictions.parquet`` - they must be equal. Ray's start-up is timed apart from
the build; its detect time includes starting the actors (one model per actor). Each
engine runs once, one after another (a build is long; speed-ups are indicative).

With ``--memory``, fresh child processes measure the peak resident memory (VmHWM) of a
local one-worker build (sources table, then repo) at ``--memory-scales`` (default 1, 2, 4
and 8) times ``--memory-images``; the target is that the build's peak at every scale stays
within +5 % of its peak at 1x, and it is checked. Exit 1 when the bytes differ or that
target is not met.

Run: ``.venv/bin/python perf/scale.py [--images 24] [--ray-cpus 2] [--memory | --memory-only] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from _bench import (ROOT, bench_params, cap, child_json, finish, materialize, peak_rss_mb, peer_python, row,
                    trained_weights)

cap()

from aegisbench.builders.build import build_repo  # noqa: E402
from aegisbench.executor import Executor, connect  # noqa: E402
from aegisbench.hashing import file_sha256  # noqa: E402

FIRESPREAD = {"grid": [32, 32], "realizations": 40, "s_levels": [0, 20], "initial_conditions": 3,
              "test_initial_conditions": [2], "realizations_per_shard": 10}
MEMORY_GROWTH = 0.05  # the build's peak RSS at N x the images may exceed its peak at 1x by this fraction
RAY_HOW = ".venv/bin/pip install -e '.[ray]'"


def memory_child(root: Path, images: int, phase: str) -> None:
    """One phase of a local one-worker build in this (fresh) process; prints its peak RSS."""
    params = bench_params(root, images)
    t = time.perf_counter()
    if phase == "sources":
        materialize(params)
    else:
        build_repo(params, progress=False, executor=Executor("local", 1))
    print(json.dumps({"images": images, "phase": phase, "peak_rss_mb": round(peak_rss_mb(), 1),
                      "seconds": round(time.perf_counter() - t, 2)}))


def measure_memory(base: int, scales: list[int]) -> list[dict]:
    out = []
    for k in scales:
        with tempfile.TemporaryDirectory(prefix="aegis-scale-mem-") as tmp:
            row_ = {"scale": k, "images": base * k}
            for phase in ("sources", "build"):
                res = child_json(__file__, "--memory-child", phase, "--root", tmp, "--images", base * k)
                row_[f"{phase}_peak_rss_mb"], row_[f"{phase}_s"] = res["peak_rss_mb"], res["seconds"]
            out.append(row_)
            print(json.dumps(row_), flush=True)
    return out


def memory_rows(mem: list[dict]) -> tuple[list[dict], bool]:
    """Print the memory table; the row of the build-memory target and whether it is met."""
    print(f"\n{'scale':>5}{'images':>8}{'sources MB':>12}{'build MB':>10}{'vs 1x':>8}{'build s':>9}")
    base = mem[0]["build_peak_rss_mb"]
    for m in mem:
        m["build_growth"] = m["build_peak_rss_mb"] / base - 1
        print(f"{m['scale']:>5}{m['images']:>8}{m['sources_peak_rss_mb']:>12}{m['build_peak_rss_mb']:>10}"
              f"{m['build_growth']:>+8.1%}{m['build_s']:>9}")
    worst = max(mem[1:], key=lambda m: m["build_growth"], default=mem[0])
    met = all(m["build_growth"] <= MEMORY_GROWTH for m in mem)
    print(f"build peak RSS within +{MEMORY_GROWTH:.0%} of 1x at every scale: {'met' if met else 'not met'} "
          f"(largest: {worst['build_growth']:+.1%} at {worst['scale']}x, {worst['build_peak_rss_mb']} MB"
          f" vs {base} MB)")
    return [row(f"build peak RSS, {worst['images']} vs {mem[0]['images']} images ({worst['scale']}x vs 1x,"
                f" local x1; {worst['build_peak_rss_mb']:.0f} vs {base:.0f} MB)",
                f"{worst['build_growth']:+.1%}", target=f"<= +{MEMORY_GROWTH:.0%}", met=met)], met


def json_diff(a, b, path: str = "") -> list[str]:
    """The paths (``.key[index]``) where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in json_diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in json_diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [path or "."]


def run_detect_once(weights: Path, repo: Path, out: Path, executor: Executor) -> tuple[float, dict]:
    from aegisbench.detectors.interface import DetectorOptions, load_detector
    from aegisbench.detectors.runner import RunOptions, SubmissionInfo, run_detect

    det = load_detector("yolo", weights, DetectorOptions(batch=8))  # conf 0.001: NMS stays far from its time limit
    t = time.perf_counter()
    report = run_detect(det, repo, "sar", out, SubmissionInfo(name="scale", model="aegis_yolo_tiny"),
                        RunOptions(progress=False), executor=executor)
    return time.perf_counter() - t, report


def speed_rows(engines: list[dict]) -> list[dict]:
    """Speed-up of each engine against one local worker (no declared target)."""
    base, rows = engines[0], []
    for r in engines[1:]:
        rows.append(row(f"build shards/s, {r['engine']} vs {base['engine']}", r["shards_per_s"], base["shards_per_s"],
                        unit="shards/s", ratio=r["build_speedup"]))
        if "detect_s" in r:
            rows.append(row(f"detect images/s, {r['engine']} vs {base['engine']}", r["images_per_s"],
                            base["images_per_s"], unit="img/s", ratio=r["detect_speedup"]))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=24, help="SAR images of the input (default 24)")
    ap.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray (default 2)")
    ap.add_argument("--skip-detect", action="store_true")
    ap.add_argument("--memory", action="store_true", help="also check the peak RSS of a local build across scales")
    ap.add_argument("--memory-only", action="store_true", help="only the --memory check (no engines, no detect)")
    ap.add_argument("--memory-images", type=int, default=24, help="images at 1x for --memory (default 24)")
    ap.add_argument("--memory-scales", default="1,2,4,8", help="multiples of --memory-images (default 1,2,4,8)")
    ap.add_argument("--json", "--out", dest="json", help="write the summary rows and details here")
    ap.add_argument("--memory-child", choices=["sources", "build"], help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.memory_child:
        memory_child(Path(a.root), a.images, a.memory_child)
        return 0
    if a.memory_only:
        mem = measure_memory(a.memory_images, [int(k) for k in a.memory_scales.split(",")])
        mem_rows, flat = memory_rows(mem)
        finish("scale", mem_rows, a.json, {"memory": mem})
        return 0 if flat else 1
    engines = [("local x1", Executor("local", 1)), ("local x2", Executor("local", 2))]
    if peer_python(sys.executable, "ray", RAY_HOW):
        engines.append((f"ray ({a.ray_cpus} cpu)", Executor("ray", a.ray_cpus)))
    results: dict = {"images": a.images, "engines": []}
    with tempfile.TemporaryDirectory(prefix="aegis-scale-") as tmp:
        tmp = Path(tmp)
        params = bench_params(tmp, a.images, firespread=FIRESPREAD)
        materialize(params)
        weights = None
        if not a.skip_detect:
            weights = trained_weights(ROOT / "src" / "aegisbench" / "detectors" / "aegis_yolo_tiny.yaml", tmp / "tiny.pt")
        for i, (name, ex) in enumerate(engines):
            r: dict = {"engine": name}
            if ex.kind == "ray":
                t = time.perf_counter()
                connect(ex)
                r["ray_start_s"] = round(time.perf_counter() - t, 2)
            repo = tmp / f"repo_{i}"
            t = time.perf_counter()
            manifest = build_repo(params, out=repo, progress=False, executor=ex)
            build_s = time.perf_counter() - t
            shards = sum(len(s["shards"]) for c in manifest["configs"].values() for s in c["splits"].values())
            r.update(build_s=round(build_s, 2), shards=shards, shards_per_s=round(shards / build_s, 2),
                     dataset_digest=manifest["dataset_digest"], manifest_sha256=file_sha256(repo / "manifest.json"))
            if weights is not None:
                det_s, rep = run_detect_once(weights, repo, tmp / f"sub_{i}", ex)
                r.update(detect_s=round(det_s, 2), frames=rep["frames"],
                         images_per_s=round(rep["frames"] / det_s, 2),
                         predictions_sha256=file_sha256(tmp / f"sub_{i}" / "predictions.parquet"))
            if i:
                first = json.loads((tmp / "repo_0" / "manifest.json").read_text())
                r["manifest_differs_at"] = json_diff(first, json.loads((repo / "manifest.json").read_text()))[:20]
            results["engines"].append(r)
            print(json.dumps(r), flush=True)
    base = results["engines"][0]
    for r in results["engines"]:
        r["build_speedup"] = round(base["build_s"] / r["build_s"], 2)
        if "detect_s" in r:
            r["detect_speedup"] = round(base["detect_s"] / r["detect_s"], 2)
    print(f"\n{'engine':<14}{'shards/s':>10}{'build x':>9}{'img/s':>8}{'detect x':>10}  dataset digest / manifest sha256"
          " / predictions sha256")
    for r in results["engines"]:
        print(f"{r['engine']:<14}{r['shards_per_s']:>10}{r['build_speedup']:>9}{r.get('images_per_s', '-'):>8}"
              f"{r.get('detect_speedup', '-'):>10}  {r['dataset_digest'][:16]} / {r['manifest_sha256'][:16]}"
              f" / {r.get('predictions_sha256', '-')[:16]}")
    keys = ("dataset_digest", "manifest_sha256", "predictions_sha256")
    differ = [k for k in keys if len({r.get(k) for r in results["engines"]}) > 1]
    same = not differ
    results["identical"] = same
    print("identical bytes across engines:", "yes" if same else f"NO ({', '.join(differ)} differ)")
    names = ", ".join(r["engine"] for r in results["engines"])
    rows = [row(f"identical dataset digest, manifest and predictions across {names}",
                "yes" if same else f"no: {', '.join(differ)} differ", target="identical", met=same),
            *speed_rows(results["engines"])]
    flat = True
    if a.memory:
        results["memory"] = measure_memory(a.memory_images, [int(k) for k in a.memory_scales.split(",")])
        mem_rows, flat = memory_rows(results["memory"])
        rows += mem_rows
    finish("scale", rows, a.json, results)
    return 0 if same and flat else 1


if __name__ == "__main__":
    sys.exit(main())
