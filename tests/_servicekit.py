"""Helpers of the hosted-leaderboard tests: a project over the tiny dataset repo, the real
``aegisbench serve`` and ``aegisbench worker`` as subprocesses on 127.0.0.1, teams, uploads
made from the dataset's ground truth."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import yaml

from _evalkit import gt_table, write_submission
from aegisbench.dataset.index import DatasetIndex, export_coco

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_project(root: Path, repo: Path, hosting: dict | None = None, n_resamples: int = 20) -> Path:
    """A benchmark project at ``root`` over the dataset repo ``repo`` with ``hosting`` rules."""
    root.mkdir(parents=True, exist_ok=True)
    params = {"benchmark_version": DatasetIndex(repo, verify=False).version, "paths": {"dataset": str(repo)},
              "evaluation": {"n_resamples": n_resamples}, "warp": {"grid": 3},
              "hosting": {"lease_seconds": 4, "versioning": "none", **(hosting or {})}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def cli(*args: str, env: dict | None = None, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """``aegisbench ARGS`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-P", "-m", "aegisbench.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"aegisbench {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc


def add_team(project: Path, name: str, admin: bool = False, db: str | None = None) -> str:
    args = ["team", "add", name, "--project", str(project), *(["--admin"] if admin else []),
            *(["--db", db] if db else [])]
    return cli(*args).stdout.strip().splitlines()[-1]


def wait_for(predicate, timeout: float = 60.0, every: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class Proc:
    """A background ``aegisbench`` command in its own process group, stopped at exit."""

    def __init__(self, args: list[str], env: dict | None = None, log: Path | None = None):
        self.log = log
        out = open(log, "ab") if log else subprocess.DEVNULL
        self.p = subprocess.Popen([sys.executable, "-P", "-m", "aegisbench.cli", *args], stdout=out, stderr=out,
                                  env={**os.environ, **(env or {})}, start_new_session=True)

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, sig)
            self.p.wait(30)

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(40)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log and self.log.exists() else ""


class Server(Proc):
    def __init__(self, project: Path, db: str | None = None, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(["serve", "--project", str(project), "--port", str(self.port), "--no-verify"]
                         + (["--db", db] if db else []), env, project / f"serve-{self.port}.log")
        wait_for(self._up, 60, 0.2, f"the server on {self.url}\n{self.tail()}")

    def _up(self) -> bool:
        if self.p.poll() is not None:
            raise AssertionError(f"the server exited {self.p.returncode}:\n{self.tail()}")
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


class Worker(Proc):
    def __init__(self, project: Path, db: str | None = None, env: dict | None = None, processes: int = 1,
                 extra: list[str] = ()):
        super().__init__(["worker", "--project", str(project), "--no-verify", "--processes", str(processes),
                          *extra] + (["--db", db] if db else []), env, project / f"worker-{time.monotonic_ns()}.log")


def gt_submission(folder: Path, index: DatasetIndex, track: str = "sar", **meta) -> Path:
    return write_submission(folder, index, track, gt_table(index, track), **meta)


def files_of(folder: Path) -> list:
    """The form parts of a submission folder (parquet form)."""
    return [("submission", ("submission.yaml", (folder / "submission.yaml").read_bytes())),
            ("predictions", ("predictions.parquet", (folder / "predictions.parquet").read_bytes()))]


def upload(server: Server, token: str | None, files, timeout: float = 60) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(server.url + "/api/v1/submissions", files=files, headers=headers, timeout=timeout)


def api(server: Server, token: str, path: str) -> dict:
    r = httpx.get(server.url + path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    r.raise_for_status()
    return r.json()


def wait_final(server: Server, token: str, sid: str, timeout: float = 90) -> dict:
    def done():
        row = api(server, token, f"/api/v1/submissions/{sid}")
        return row if row["status"] in ("failed", "error") or row["revision"] is not None else None
    return wait_for(done, timeout, 0.2, f"{sid} to be final")


def coco_files(index: DatasetIndex, table: dict, gt_dir: Path) -> dict[str, bytes]:
    """COCO results JSON per config (``<config>.json`` -> bytes) of a predictions table."""
    export_coco(index, gt_dir)
    out = {}
    for config in sorted({k[0] for k in table}):
        gt = json.loads((gt_dir / f"{config}.json").read_text())
        ids = {(im["split"], Path(im["file_name"]).stem): im["id"] for im in gt["images"]}
        res = [{"image_id": ids[(s, i)], "category_id": 1,
                "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])], "score": float(sc)}
               for (c, s, i), det in sorted(table.items()) if c == config for b, sc in zip(det.xyxy, det.score)]
        out[f"{config}.json"] = json.dumps(res).encode()
    return out


def yolo_files(index: DatasetIndex, table: dict) -> dict[str, bytes]:
    """Ultralytics txt lines per image (``<config>/<split>/<image_id>.txt`` -> bytes)."""
    out = {}
    for (c, s, i), det in sorted(table.items()):
        g = index.gt(c, s)
        w, h = int(g.width[g.position[i]]), int(g.height[g.position[i]])
        lines = [f"0 {(b[0] + b[2]) / 2 / w:.8f} {(b[1] + b[3]) / 2 / h:.8f} {(b[2] - b[0]) / w:.8f} "
                 f"{(b[3] - b[1]) / h:.8f} {sc:.6f}" for b, sc in zip(det.xyxy, det.score)]
        out[f"{c}/{s}/{i}.txt"] = ("\n".join(lines) + "\n").encode()
    for c, s in index.keys("sar"):  # a split with no box still has its images: declare them with empty files
        for i in index.gt(c, s).image_ids:
            out.setdefault(f"{c}/{s}/{i}.txt", b"")
    return out


def zip_bytes(members: dict[str, bytes], prefix: str = "") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(prefix + name, data)
    return buf.getvalue()
