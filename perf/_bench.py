"""Shared plumbing of the perf/ benchmarks: thread pinning, peers, interleaved timing, summary rows.

A benchmark imports this module first; :func:`one_thread` (single-threaded benchmarks) or
:func:`cap` (the others) must run before NumPy, OpenCV or torch load: it imports
:mod:`aegisbench`, whose instruction-set cap only holds for libraries loaded after it.

Every benchmark writes ``--json PATH`` as ``{"benchmark", "rows", "details"}``; a row is
``{work, unit, ours, peer, ratio, target, met}`` (:func:`row`), where ``ratio`` is how many
times ours outperforms the peer on the same work and is ``null`` whenever the peer was not
measured; ``met`` is ``null`` where there is nothing to judge.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                "NUMEXPR_NUM_THREADS", "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")}


def cap() -> None:
    """The instruction-set cap (:func:`aegisbench.pin_isa`) before NumPy/OpenCV/torch load."""
    import aegisbench
    from aegisbench import isa

    aegisbench.pin_isa()
    late = isa.problems()  # a library loaded before the cap keeps its kernels
    if late:
        raise RuntimeError(f"perf/_bench: loaded before the instruction-set cap: {'; '.join(late)}")


def one_thread() -> None:
    """One thread for OpenMP, BLAS and numba in this process and its children, then :func:`cap`."""
    os.environ.update(ONE_THREAD)
    cap()


# ----------------------------------------------------------------- peers

def peer_python(python: str | Path, module: str, how: str) -> str | None:
    """``python`` when it exists and imports ``module``; otherwise print
    ``peer not installed: MODULE (HOW)`` and return None."""
    python = Path(python)
    if python.exists() and subprocess.run([str(python), "-c", f"import {module}"],
                                          capture_output=True).returncode == 0:
        return str(python)
    print(f"peer not installed: {module} ({how})", flush=True)
    return None


class Peer:
    """A persistent peer process (one thread) that answers each request line with one line."""

    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, **ONE_THREAD}, cwd=ROOT)
        self.ready = self._read()

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer process {self.proc.args[:2]} exited (code {self.proc.wait()})")
        return line.strip()

    def ask(self, request: str) -> str:
        self.proc.stdin.write(request + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def interleaved(rounds: int, sides: dict, warmup: int = 1) -> dict[object, list]:
    """Call every side once per round, the order reversed every other round so that neither
    side always goes first; ``warmup`` untimed rounds run first. Returns each side's
    results (whatever its callable returns, e.g. seconds), one per timed round."""
    keys = list(sides)
    out: dict[object, list] = {k: [] for k in keys}
    for r in range(warmup + rounds):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            res = sides[k]()
            if r >= warmup:
                out[k].append(res)
    return out


# ----------------------------------------------------------------- memory, child processes

def peak_rss_mb() -> float:
    """Peak resident memory of this process (``VmHWM``; unlike ``ru_maxrss`` it is not
    inherited through fork + exec, and :func:`reset_peak_rss` can reset it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmHWM not in /proc/self/status")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("VmRSS not in /proc/self/status")


def reset_peak_rss() -> None:
    """Reset ``VmHWM`` to the current resident set (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")


def child_json(script: str | Path, *args: str) -> dict:
    """Run ``script args`` in a fresh interpreter; its last stdout line, parsed as JSON."""
    proc = subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{Path(script).name} {' '.join(map(str, args))}: exit {proc.returncode}: {tail}")
    return json.loads(lines[-1])


# ----------------------------------------------------------------- benchmark input

def bench_params(root: Path, images: int, rows_per_shard: int = 4, firespread: dict | None = None):
    """Params of a small build from the embedded synthetic sources: ``images`` SAR frames
    (1/4 val, 3/4 test; 640x640 and every 5th 2000x1500), a small smoke source, the configs
    ``clean``, ``low_light_s3``, ``motion_blur_s2`` and one WARP level, written under ``root``."""
    import yaml

    from aegisbench.params import Params

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    n_val = max(1, images // 4)
    raw["sources"]["synthetic_sar"]["options"] = {"n_train": 0, "n_val": n_val, "n_test": max(1, images - n_val),
                                                  "images_per_flight": 4}
    raw["sources"]["synthetic_smoke"]["options"] = {"n_train": 0, "n_val": 1, "n_test": 1, "frames_per_sequence": 4}
    raw["build"].update(conditions=["low_light_s3", "motion_blur_s2"], compound=[], rows_per_shard=rows_per_shard,
                        workers=1)
    raw["firespread"] = dict(firespread) if firespread else {"enabled": False}
    raw["paths"] = {"sources": str(root / "sources"), "dataset": str(root / "repo")}
    return Params.from_dict(raw)


def materialize(params) -> None:
    """Write the source tables of ``params``."""
    from aegisbench.builders.sources import materialize_source

    for src in params.sources:
        materialize_source(src, params.benchmark_version, params.sources_dir)


def trained_weights(cfg: str | Path, out: Path, imgsz: int = 64) -> Path:
    """A real Ultralytics checkpoint of the model YAML ``cfg`` (class ``person``), trained one
    epoch on four generated frames (offline, seconds): ``detect`` refuses checkpoints without
    the trainer's record. Its weights are near their initialisation; timings need no more."""
    import shutil

    import cv2
    import numpy as np
    import yaml

    from aegisbench.detectors.ultralytics_adapter import import_ultralytics

    import_ultralytics()
    from ultralytics import YOLO

    work = out.parent / f".{out.stem}-train"
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for sub in ("images", "labels"):
            (work / sub / split).mkdir(parents=True, exist_ok=True)
        for k in range(2):
            cv2.imwrite(str(work / "images" / split / f"{k}.png"), rng.integers(0, 256, (imgsz, imgsz, 3), np.uint8))
            (work / "labels" / split / f"{k}.txt").write_text("0 0.5 0.5 0.25 0.3\n")
    data = work / "data.yaml"
    data.write_text(yaml.safe_dump({"path": str(work.resolve()), "train": "images/train", "val": "images/val",
                                    "names": {0: "person"}}))
    from ultralytics.utils import LOGGER

    level = LOGGER.level
    LOGGER.setLevel(logging.WARNING)  # the trainer's report is noise here
    try:
        YOLO(str(cfg)).train(data=str(data), epochs=1, imgsz=imgsz, batch=2, workers=0, device="cpu", seed=0,
                             deterministic=True, project=str((work / "runs").resolve()), name="run", exist_ok=True,
                             plots=False, amp=False, val=False, verbose=False, pretrained=False, cache=False,
                             save_period=-1)
    finally:
        LOGGER.setLevel(level)
    shutil.copyfile(work / "runs" / "run" / "weights" / "last.pt", out)
    shutil.rmtree(work)
    return out


# ----------------------------------------------------------------- summary rows

def row(work: str, ours, peer=None, *, unit: str = "", ratio: float | None = None, target: str | None = None,
        met: bool | None = None, peer_missing: str | None = None) -> dict:
    """One summary row; ``peer_missing`` names a peer that was not installed (then no ratio)."""
    if peer_missing:
        peer, ratio = None, None
    r = {"work": work, "unit": unit, "ours": ours, "peer": peer, "ratio": ratio, "target": target, "met": met}
    if peer_missing:
        r["peer_missing"] = peer_missing
    return r


def speed_row(work: str, ours: float | None, peer: float | None, *, unit: str, higher_is_better: bool,
              min_ratio: float | None = None, peer_missing: str | None = None) -> dict:
    """A row comparing ours with a peer on the same work: ``ratio`` = how many times faster
    ours is (peer time / our time, or our throughput / theirs), only when both were measured."""
    ratio = None
    if ours and peer and not peer_missing:
        ratio = ours / peer if higher_is_better else peer / ours
    target = None if min_ratio is None else f">= {min_ratio:g}x"
    met = None if ratio is None or min_ratio is None else ratio >= min_ratio
    return row(work, ours, peer, unit=unit, ratio=ratio, target=target, met=met, peer_missing=peer_missing)


def _num(v, unit: str = "") -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        v = f"{v:,}"
    elif isinstance(v, float):
        v = f"{v:.3g}" if abs(v) < 1e5 else f"{v:.2e}"
    return f"{v} {unit}".strip()


def table(rows: list[dict]) -> str:
    """The Markdown table ``work | ours | peer | ratio | target | met`` of ``rows``."""
    out = ["| work | ours | peer | ratio | target | met |", "| --- | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        if r.get("section"):  # a heading row: the benchmark the next rows come from
            out.append(f"| **{r['work']}** | | | | | |")
            continue
        peer = f"not installed: {r['peer_missing']}" if r.get("peer_missing") else _num(r["peer"], r["unit"])
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.3g}x"
        met = {True: "yes", False: "**no**", None: "—", "quick": "— (quick run: not judged)"}[r["met"]]
        cells = [r["work"], _num(r["ours"], r["unit"]), peer, ratio, r["target"] or "—", met]
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)


def finish(name: str, rows: list[dict], json_path: str | Path | None, details=None) -> None:
    """Print the summary table of ``rows`` and write them (with ``details``) to ``json_path``."""
    from aegisbench.atomic import atomic_write_text

    print(f"\nsummary ({name}):\n{table(rows)}", flush=True)
    if json_path:
        atomic_write_text(json_path, json.dumps({"benchmark": name, "rows": rows, "details": details},
                                                indent=1, allow_nan=False) + "\n")
