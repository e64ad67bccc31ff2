"""How validation scales with hostile sizes: time and peak memory of ``validate_submission``.

1. YOLO txt: ``--yolo-lines`` (default 1e5 and 1e6) identical lines in one image's file, every
   other image one line (all duplicates: the message-building path); time should grow
   linearly (10x the lines in at most ~12x the time).
2. Parquet: ``--parquet-rows`` (default 1e6) random valid rows over the images of the track,
   validated with a cap high enough that every row is checked and loaded; peak RSS is
   reported beside the file size.

Each case runs in a fresh subprocess (peak RSS from ``resource.getrusage``; imports are done
before the clock starts). With no ``--dataset`` the tests' tiny two-track repo is built
in a temporary folder first (about 15 s).

Run: ``.venv/bin/python perf/validate_scaling.py`` (``--help`` for sizes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

CHILD = """
import json, resource, sys, time
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.submission import SubmissionInvalid, ValidationLimits, validate_submission
index = DatasetIndex(sys.argv[1], verify=False)
t0 = time.perf_counter()
try:
    validate_submission(sys.argv[2], index, ValidationLimits(max_dets_per_image=int(sys.argv[3])))
    ok = True
except SubmissionInvalid as exc:
    ok = exc.total
print(json.dumps({"seconds": time.perf_counter() - t0, "valid": ok,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _meta(index, folder: Path) -> None:
    from _evalkit import meta
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "submission.yaml").write_text(yaml.safe_dump(meta(index, "sar")))


def yolo_submission(index, folder: Path, lines: int) -> Path:
    _meta(index, folder)
    first = True
    for config, split in index.keys("sar"):
        d = folder / "predictions" / config / split
        d.mkdir(parents=True, exist_ok=True)
        for image_id in index.gt(config, split).image_ids:
            (d / f"{image_id}.txt").write_text("0 0.5 0.5 0.1 0.1 0.9\n" * (lines if first else 1))
            first = False
    return folder


def parquet_submission(index, folder: Path, rows: int, seed: int = 0) -> Path:
    _meta(index, folder)
    rng = np.random.default_rng(seed)
    keys = [(c, s, i, int(g.width[g.position[i]]), int(g.height[g.position[i]]))
            for c, s in index.keys("sar") for g in [index.gt(c, s)] for i in g.image_ids]
    k = rng.integers(0, len(keys), rows)
    k[: len(keys)] = np.arange(len(keys))  # every image covered
    w, h = (np.array([x[j] for x in keys])[k] for j in (3, 4))
    x1, y1 = rng.uniform(0, 0.5, rows) * w, rng.uniform(0, 0.5, rows) * h
    x2, y2 = x1 + rng.uniform(1, 0.4 * w.min(), rows), y1 + rng.uniform(1, 0.4 * h.min(), rows)
    cols = {name: pa.array(np.array([x[j] for x in keys], object)[k], pa.string())
            for j, name in enumerate(("config", "split", "image_id"))}
    cols.update({n: v.astype(np.float32) for n, v in (("x1", x1), ("y1", y1), ("x2", x2), ("y2", y2))})
    cols["score"] = rng.uniform(0, 1, rows).astype(np.float32)
    pq.write_table(pa.table(cols), folder / "predictions.parquet")
    return folder


def measure(repo: Path, folder: Path, cap: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(repo), str(folder), str(cap)], check=True,
                         capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res["file_mb"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", help="a built dataset repo with a sar track (default: build the tiny one)")
    ap.add_argument("--yolo-lines", type=float, nargs="*", default=[1e5, 1e6])
    ap.add_argument("--parquet-rows", type=float, nargs="*", default=[1e6])
    args = ap.parse_args()
    from aegisbench.dataset.index import DatasetIndex
    with tempfile.TemporaryDirectory(prefix="aegisbench-scaling-") as tmp:
        tmp = Path(tmp)
        if args.dataset:
            repo = Path(args.dataset)
        else:
            from _evalkit import tiny_repo

            class _Factory:
                def mktemp(self, name):
                    (tmp / name).mkdir()
                    return tmp / name
            repo = tiny_repo(_Factory())
        index = DatasetIndex(repo, verify=False)
        base = None
        for n in map(int, args.yolo_lines):
            r = measure(repo, yolo_submission(index, tmp / f"yolo{n}", n), 1000)
            base = base or (n, r["seconds"])
            ratio = (r["seconds"] / base[1]) / (n / base[0])
            print(f"yolo    {n:>9} lines  {r['file_mb']:7.1f} MB  {r['seconds']:7.2f} s  "
                  f"peak {r['peak_rss_mb']:6.0f} MB  (time per line vs the first size: {ratio:.2f}x)  "
                  f"problems: {r['valid']}", flush=True)
        for n in map(int, args.parquet_rows):
            r = measure(repo, parquet_submission(index, tmp / f"parquet{n}", n), 10**9)
            print(f"parquet {n:>9} rows   {r['file_mb']:7.1f} MB  {r['seconds']:7.2f} s  "
                  f"peak {r['peak_rss_mb']:6.0f} MB  ({r['peak_rss_mb'] / r['file_mb']:.1f}x the file)  "
                  f"valid: {r['valid']}", flush=True)


if __name__ == "__main__":
    main()
