"""Speed of the evaluator: COCO mAP against its peers, and what the bootstrap intervals cost.

1. COCO mAP on the same GT/results files: ours (``aegisbench.evaluation.coco_map``) against
   pycocotools (in this venv) and faster-coco-eval (a persistent process of
   ``.venv-peers-eval`` when it is there), each side the same number of times, interleaved
   (:func:`_bench.interleaved`: the order flipped every round, one untimed warm-up round);
   medians, and a check that our numbers equal pycocotools'.
2. The bootstrap intervals through the real evaluator: a sar dataset repo built by the real
   builder (clean, the 27 corruptions and the compound conditions of ``params.yaml``;
   ``--images`` test and ``--val-images`` val frames with 0-6 persons, some ignore regions)
   and a submission of detector-like predictions (jittered hits whose rate falls with
   severity, duplicates, 10-60 low-score false positives per frame). Every round scores it
   plain (no draw, no interval: the scorer hands its metrics no bootstrap) and as
   ``aegisbench evaluate`` does (one draw per split; recall, precision, F1 and mAP50
   intervals; the effectiveness-score bootstrap), interleaved, twice over: in memory
   (``evaluate``, what the command runs between validation and writing) and as the command
   runs (``evaluate_submission`` with ``--no-verify``: validation, scoring, writing). The
   overhead is the median over rounds of (with - plain) / plain, in wall and in CPU time,
   printed with whether it meets the target (< 20%, effectiveness-score bootstrap included).
   Apart from the rounds (wrapped functions cost a little), the CPU time of each part of the
   intervals per evaluation: the shared draw, the per-condition recall / precision / F1 /
   mAP50 intervals, the per-condition effectiveness-score bootstrap.

One thread (BLAS included) and ``aegisbench`` before numpy (:func:`_bench.one_thread`).

Run: ``.venv/bin/python perf/evaluate.py [--images 40,200] [--rounds 9] [--skip-coco] [--json out.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import inspect
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _bench import ROOT, Peer, finish, interleaved, one_thread, peer_python, row, speed_row

one_thread()

import numpy as np  # noqa: E402
import yaml  # noqa: E402

from aegisbench.evaluation.coco import coco_map  # noqa: E402
from aegisbench.hashing import rng_for  # noqa: E402

FCE_HOW = "python3 -m venv .venv-peers-eval && .venv-peers-eval/bin/pip install faster-coco-eval"
PYCOCO_HOW = ".venv/bin/pip install -e '.[test]'"
SOURCE, FRAME = "perf_sar", 320  # small square frames: the build takes seconds
TARGET = 20.0  # % of a plain evaluation (issue 17)
FCE_PEER = r"""
import contextlib, io, json, sys, time
from faster_coco_eval import COCO, COCOeval_faster
print("ready", flush=True)
for line in sys.stdin:
    gt_path, res_path = json.loads(line)
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(gt_path); dt = gt.loadRes(res_path)
        ev = COCOeval_faster(gt, dt, "bbox", print_function=lambda *a, **k: None)
        ev.evaluate(); ev.accumulate(); ev.summarize()
    print(json.dumps({"seconds": time.perf_counter() - t, "map50_95": float(ev.stats[0]),
                      "map50": float(ev.stats[1])}), flush=True)
"""


def clocked(fn):
    """(wall s, CPU s) of ``fn()`` after a collection."""
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


# ------------------------------------------------------------------ 1. COCO mAP


def coco_workload(folder: Path, n_img: int, n_cat: int) -> tuple[Path, Path]:
    rng = rng_for("benchmark", "coco", n_img, n_cat)
    images = [{"id": i + 1, "file_name": f"{i}.jpg", "width": 640, "height": 640} for i in range(n_img)]
    anns, res = [], []
    for im in images:
        for _ in range(int(rng.integers(0, 12))):
            x, y = rng.uniform(0, 560, 2)
            w, h = rng.uniform(4, 80, 2)
            c = int(rng.integers(1, n_cat + 1))
            anns.append({"id": len(anns) + 1, "image_id": im["id"], "category_id": c, "bbox": [x, y, w, h],
                         "area": w * h, "iscrowd": int(rng.random() < 0.02)})
            for _ in range(int(rng.integers(0, 5))):
                j = rng.normal(0, 4, 4)
                res.append({"image_id": im["id"], "category_id": c, "score": round(float(rng.random()), 3),
                            "bbox": [x + j[0], y + j[1], max(w + j[2], 1.0), max(h + j[3], 1.0)]})
        for _ in range(int(rng.integers(0, 30))):
            x, y = rng.uniform(0, 560, 2)
            res.append({"image_id": im["id"], "category_id": int(rng.integers(1, n_cat + 1)),
                        "score": round(float(rng.random()), 3), "bbox": [x, y, *rng.uniform(4, 80, 2)]})
    gt_path, res_path = folder / "gt.json", folder / "results.json"
    gt_path.write_text(json.dumps({"images": images, "annotations": anns,
                                   "categories": [{"id": c + 1, "name": f"c{c}"} for c in range(n_cat)]}))
    res_path.write_text(json.dumps(res))
    print(f"COCO workload: {n_img} images, {n_cat} categories, {len(anns)} GT boxes, {len(res)} detections")
    return gt_path, res_path


def _pycoco(gt_path: Path, res_path: Path) -> dict:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        ev = COCOeval(gt, gt.loadRes(str(res_path)), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {"map50_95": float(ev.stats[0]), "map50": float(ev.stats[1])}


def bench_coco(folder: Path, n_img: int, n_cat: int, rounds: int) -> tuple[list[dict], dict]:
    gt_path, res_path = coco_workload(folder, n_img, n_cat)
    work = f"COCO mAP, {n_img} images, {n_cat} categories"
    outs: dict[str, dict] = {}

    def local(name, fn):
        def side():
            t = time.perf_counter()
            outs[name] = fn(gt_path, res_path)
            return time.perf_counter() - t
        return side

    sides = {"ours": local("ours", coco_map)}
    has_pycoco = importlib.util.find_spec("pycocotools") is not None
    if has_pycoco:
        sides["pycocotools"] = local("pycocotools", _pycoco)
    else:
        print(f"peer not installed: pycocotools ({PYCOCO_HOW})")
    fce_py = peer_python(ROOT / ".venv-peers-eval" / "bin" / "python", "faster_coco_eval", FCE_HOW)
    with contextlib.ExitStack() as stack:
        if fce_py:
            peer = stack.enter_context(Peer([fce_py, "-c", FCE_PEER]))

            def fce():
                outs["faster-coco-eval"] = json.loads(peer.ask(json.dumps([str(gt_path), str(res_path)])))
                return outs["faster-coco-eval"]["seconds"]
            sides["faster-coco-eval"] = fce
        times = {k: statistics.median(v) for k, v in interleaved(rounds, sides).items()}
    ours = outs["ours"]
    print(f"  ours              {times['ours']:7.3f} s  map50={ours['map50']:.6f} map50_95={ours['map50_95']:.6f}"
          f" (medians of {rounds} interleaved runs per side)")
    rows, same = [], None
    for name, how in (("pycocotools", PYCOCO_HOW), ("faster-coco-eval", FCE_HOW)):
        if name not in times:
            rows.append(speed_row(f"{work} vs {name}", times["ours"], None, unit="s", higher_is_better=False,
                                  peer_missing=name))
            continue
        ref = outs[name]
        if name == "pycocotools":
            same = (ours["map50"], ours["map50_95"]) == (ref["map50"], ref["map50_95"])
        print(f"  {name:17s} {times[name]:7.3f} s  (ours is {times[name] / times['ours']:.1f}x faster; "
              f"map50 {ref['map50']:.6f}, map50_95 {ref['map50_95']:.6f})")
        rows.append(speed_row(f"{work} vs {name}", times["ours"], times[name], unit="s", higher_is_better=False))
    rows.append(row(f"{work}: mAP50 and mAP50-95 equal pycocotools'", same, target="identical", met=same,
                    peer_missing=None if has_pycoco else "pycocotools"))
    return rows, {"seconds": times, "numbers": outs}


# ----------------------------------------------------- 2. intervals, real evaluator


def _records(n_val: int, n_test: int):
    """Source records: noise frames with 0-6 boxes, an ignore region on every 7th frame."""
    from aegisbench.builders.source_table import SourceRecord
    for split, n in (("train", 1), ("val", n_val), ("test", n_test)):
        for i in range(n):
            rng = rng_for("perf-evaluate", "record", split, i)
            k = int(rng.integers(0, 7))
            wh = np.exp(rng.uniform(np.log(8), np.log(64), (k, 2)))
            xy = rng.uniform(0, FRAME - wh)
            yield SourceRecord.from_image(
                f"{SOURCE}_{split}_{i:04d}", split, SOURCE, rng.integers(60, 200, (FRAME, FRAME, 3), dtype=np.uint8),
                boxes=np.concatenate([xy, xy + wh], axis=1).round(1), labels=["person"] * k, group_id=f"flight{i // 5}",
                ignore=np.array([[10.0, 10.0, 40.0, 40.0]] if i % 7 == 3 else [], np.float32).reshape(-1, 4),
                meta=(("view", "oblique" if i % 3 == 0 else "nadir"),))


def build_workload_repo(root: Path, n_val: int, n_test: int) -> Path:
    """The dataset repo of the workload (the real builder; kept under ``root``)."""
    from aegisbench.builders.build import build_repo
    from aegisbench.builders.source_table import write_source_table
    from aegisbench.params import Params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    repo = root / f"repo_{n_val}_{n_test}"
    if (repo / "manifest.json").exists():
        return repo
    write_source_table(_records(n_val, n_test), root / f"sources_{n_val}_{n_test}" / f"{SOURCE}.parquet")
    params = Params.from_dict({
        "benchmark_version": raw["benchmark_version"],
        "paths": {"sources": str(root / f"sources_{n_val}_{n_test}"), "dataset": str(repo)},
        "build": {"rows_per_shard": 64, "conditions": ["all"], "compound": raw["build"]["compound"]},
        "sources": {SOURCE: {"track": "sar", "kind": "synthetic_sar", "license": "mit",
                             "description": "perf workload: noise frames with boxes"}}})
    t = time.perf_counter()
    build_repo(params, progress=False)
    print(f"  built the workload repo in {time.perf_counter() - t:.0f} s: {repo}")
    return repo


def predictions(index) -> dict:
    """(config, split, image_id) -> Detections, as a detector with a near-zero score floor gives."""
    from aegisbench.predictions import Detections
    out = {}
    for config, split in index.keys("sar"):
        sev = max((int(p[1:]) for p in config.split("_") if p[:1] == "s" and p[1:].isdigit()), default=0)
        p_det = 0.9 - 0.2 * sev - (0.1 if "__" in config else 0.0)
        g = index.gt(config, split)
        for image_id, boxes in zip(g.image_ids, g.boxes):
            r = rng_for("perf-evaluate", config, split, image_id)
            hit = boxes[r.random(len(boxes)) < p_det]
            jit = hit + r.normal(0, 2.0, hit.shape) * (hit[:, 2:] - hit[:, :2]).repeat(2, axis=1) * 0.05
            dup = hit[r.random(len(hit)) < 0.3]
            dup = dup + r.normal(0, 3, dup.shape)
            n_fp = int(r.integers(10, 60))
            xy = r.uniform(0, FRAME - 60, (n_fp, 2))
            b = np.clip(np.concatenate([jit, dup, np.concatenate([xy, xy + r.uniform(5, 60, (n_fp, 2))], axis=1)]),
                        0, FRAME - 1)
            b[:, 2:] = np.maximum(b[:, 2:], b[:, :2] + 1)
            s = np.concatenate([r.uniform(0.3, 1.0, len(jit)), r.uniform(0.05, 0.5, len(dup)), r.beta(1, 8, n_fp)])
            out[(config, split, image_id)] = Detections(b, np.maximum(s.round(3), 0.001))
    return out


def write_workload_submission(root: Path, index) -> Path:
    from aegisbench.predictions import write_parquet_predictions
    folder = root / f"sub_{index.digest[:12]}" / "perf_detector"
    if not (folder / "submission.yaml").exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_parquet_predictions(predictions(index), folder / "predictions.parquet")
        meta = {"name": "perf detector", "team": "perf", "track": "sar", "model": "synthetic",
                "contact": "perf@example.org", "license": "mit", "description": "detector-like predictions",
                "dataset_version": index.version, "dataset_digest": index.digest}
        (folder / "submission.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return folder


@contextlib.contextmanager
def no_intervals():
    """The evaluator without a bootstrap: no draw, and every condition's scorer hands its
    metrics no resamples (each interval is then absent)."""
    from aegisbench.evaluation import detection, scoring
    draw, boot = detection.Resamples.draw, scoring.ConditionScorer._bootstrap
    detection.Resamples.draw = classmethod(lambda cls, *args, **kw: None)
    scoring.ConditionScorer._bootstrap = lambda self, *args: None
    try:
        yield
    finally:
        detection.Resamples.draw, scoring.ConditionScorer._bootstrap = draw, boot


def bench_intervals(workdir: Path, n_val: int, n_test: int, n_resamples: int, rounds: int
                    ) -> tuple[list[dict], dict]:
    from aegisbench.evaluation.bootstrap import BootstrapParams
    from aegisbench.dataset.index import DatasetIndex
    from aegisbench.evaluation.evaluator import EvaluationParams, evaluate, evaluate_submission
    from aegisbench.evaluation.submission import validate_submission

    repo = build_workload_repo(workdir, n_val, n_test)
    index = DatasetIndex(repo, verify=False)
    folder = write_workload_submission(workdir, index)
    sub = validate_submission(folder, index)
    params = EvaluationParams(bootstrap=BootstrapParams(n_resamples=n_resamples))
    size = f"{len(index.configs())} configs x {n_test} images, {n_resamples} resamples"
    print(f"\nintervals through the evaluator: {size}, {sub.predictions.n_boxes()} predicted boxes; {rounds} rounds")
    with_ci = evaluate(sub, index, params).metrics.column("lo").to_pylist()
    with no_intervals():
        assert not any(v is not None for v in evaluate(sub, index, params).metrics.column("lo").to_pylist())
    print(f"  {sum(v is not None for v in with_ci)} of {len(with_ci)} metric rows carry an interval")

    def plain(fn):
        def run():
            with no_intervals():
                fn()
        return run

    runs = {"evaluate()": lambda: evaluate(sub, index, params),
            "evaluate_submission()": lambda: evaluate_submission(folder, repo, workdir / "results", params,
                                                                 verify=False)}
    rows, details = [], {}
    for name, fn in runs.items():
        t = interleaved(rounds, {"plain": lambda: clocked(plain(fn)), "full": lambda: clocked(fn)})
        res = {}
        for k, clock in enumerate(("wall", "cpu")):
            p, f = ([x[k] for x in t[side]] for side in ("plain", "full"))
            over = [100 * (b - a) / a for a, b in zip(p, f)]
            res[clock] = {"plain_s": statistics.median(p), "full_s": statistics.median(f),
                          "overhead_pct": statistics.median(over), "per_round_pct": [round(o, 1) for o in over]}
            print(f"  {name:22s} {clock:4s} plain {res[clock]['plain_s']:.3f} s, with every interval "
                  f"{res[clock]['full_s']:.3f} s; overhead {res[clock]['overhead_pct']:.1f}% (median; rounds: "
                  f"{' '.join(f'{o:.0f}' for o in over)})")
        over = res["wall"]["overhead_pct"]
        print(f"  => intervals, effectiveness-score bootstrap included: {over:.1f}% of a plain {name} (wall; CPU "
              f"{res['cpu']['overhead_pct']:.1f}%): target < {TARGET:g}% {'met' if over < TARGET else 'NOT met'}")
        rows.append(row(f"bootstrap intervals incl. effectiveness, % of a plain {name} ({size}; median of {rounds} "
                        f"interleaved rounds, CPU {res['cpu']['overhead_pct']:.1f}%)", round(over, 1), unit="%",
                        target=f"< {TARGET:g}%", met=over < TARGET))
        details[f"{name} {n_test} images"] = res
    details["parts_ms"] = interval_parts(lambda: evaluate(sub, index, params), rounds)
    return rows, details


def interval_parts(run, rounds: int) -> dict:
    """CPU ms per evaluation spent in each part of the intervals (min over ``rounds`` runs,
    measured apart from the interleaved rounds: the wrappers cost a little themselves)."""
    from aegisbench.evaluation import detection, scoring
    from aegisbench.metrics import detection as metrics_detection
    parts = {"shared draw per split": (detection.Resamples, "draw"),
             "recall/precision/F1/mAP50 per condition": (scoring, "condition_intervals"),
             "effectiveness-score bootstrap per condition": (metrics_detection, "_interval_of")}
    spent = {k: 0.0 for k in parts}
    saved = {k: inspect.getattr_static(obj, attr) for k, (obj, attr) in parts.items()}  # draw: the classmethod

    def timed(k, fn):
        def inner(*args, **kw):
            c = time.process_time()
            try:
                return fn(*args, **kw)
            finally:
                spent[k] += time.process_time() - c
        return inner
    best = {k: float("inf") for k in parts}
    try:
        for k, (obj, attr) in parts.items():
            fn = saved[k]
            setattr(obj, attr, classmethod(timed(k, fn.__func__)) if isinstance(fn, classmethod) else timed(k, fn))
        for _ in range(rounds):
            spent.update({k: 0.0 for k in parts})
            run()
            best = {k: min(best[k], spent[k]) for k in parts}
    finally:
        for k, (obj, attr) in parts.items():
            setattr(obj, attr, saved[k])
    out = {k: round(1000 * v, 2) for k, v in best.items()}
    print("  CPU per evaluate() in each part of the intervals (min of", rounds, "runs):",
          "; ".join(f"{k} {v:.1f} ms" for k, v in out.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coco-images", type=int, default=2000)
    ap.add_argument("--coco-categories", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timed rounds of every comparison")
    ap.add_argument("--images", default="40", help="test frames of the interval workload, comma-separated sizes "
                    "(the embedded default has 40)")
    ap.add_argument("--val-images", type=int, default=24)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--workdir", type=Path, help="keep the workload repos and submissions here (default: a "
                    "temporary folder)")
    ap.add_argument("--skip-coco", action="store_true")
    ap.add_argument("--json", help="write the summary rows and details here")
    args = ap.parse_args(argv)
    rows, details = [], {}
    with tempfile.TemporaryDirectory(prefix="aegis-bench-evaluate-") as tmp:
        if not args.skip_coco:
            r, details["coco"] = bench_coco(Path(tmp), args.coco_images, args.coco_categories, args.rounds)
            rows += r
        for n in (int(v) for v in args.images.split(",")):
            r, details[f"intervals_{n}"] = bench_intervals(args.workdir or Path(tmp), args.val_images, n,
                                                           args.resamples, args.rounds)
            rows += r
    finish("evaluate", rows, args.json, details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
