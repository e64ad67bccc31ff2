"""Detector inference off the driver: local worker processes or Ray Data actors.

The driver plans **frame jobs** exactly as the in-process loader batches frames: per
``(config, split)``, the split's images in shard order cut into chunks of
``frames_per_batch``. A job names its shard files and image ids only (no pixels), so
workers read and decode their own frames from the shared dataset path and every
executor feeds the model identical batches - the predictions are the local run's. A
job of a WARP noise level of the sweep (noise at the model input) reads the clean
frames and carries the :class:`~aegisbench.detectors.interface.InputNoise` (level and
per-frame keys) its predict call adds, exactly as the local loop does.

* ``local`` with several workers: :func:`~aegisbench.executor.map_tasks` over the jobs;
  each process loads the detector once (:func:`predict_job`).
* ``ray``: a Ray Data pipeline, ``map_batches`` over the jobs with a pool of
  :class:`DetectorActor` (one model per actor): ``num_gpus=1`` per actor and one actor
  per GPU of the cluster when the cluster has GPUs and the device is not ``cpu``,
  otherwise one CPU actor per cluster CPU (at most one per job).

Both yield :class:`JobResult` in plan order (out-of-order completions wait in a small
reorder buffer of box arrays), so the caller writes each config as it completes.

>>> spec = DetectorSpec("yolo", "w.pt", DetectorOptions())
>>> spec.on("cuda:0").options.device
'cuda:0'
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from aegisbench.dataset.images import decode_image
from aegisbench.detectors.interface import DETECTORS, Detector, DetectorOptions, InputNoise, Throughput
from aegisbench.detectors.loader import input_noise, input_shards
from aegisbench.errors import BadInput
from aegisbench.executor import Executor, connect, map_tasks
from aegisbench.predictions import Detections

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DetectorSpec:
    """How a worker builds its detector: registry ``kind``, local ``weights`` path (on
    storage every node sees), ``options``; ``threads`` caps torch CPU threads (None:
    leave them)."""

    kind: str
    weights: str
    options: DetectorOptions
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in DETECTORS:
            raise BadInput(f"unknown detector {self.kind!r}; expected one of {sorted(DETECTORS)}", where="--detector")

    @classmethod
    def of(cls, detector: Detector, threads: int | None = None) -> "DetectorSpec":
        """The spec of a loaded registry detector (its kind, weights and options)."""
        weights = getattr(detector, "weights", None)
        if detector.name not in DETECTORS or not weights:
            raise BadInput(f"detector {detector.name!r} is not a registered detector with a weights file; "
                           "only those run on worker processes or Ray", where="--detector")
        return cls(detector.name, str(Path(weights).resolve()) if Path(weights).exists() else str(weights),
                   detector.options, threads)

    def on(self, device: str, half: bool | None = None) -> "DetectorSpec":
        """The same detector on ``device``, FP16 as ``half`` (None: as before), only on CUDA."""
        half = (self.options.half if half is None else half) and device.startswith("cuda")
        return dataclasses.replace(self, options=dataclasses.replace(self.options, device=device, half=half))

    def load(self) -> Detector:
        from aegisbench.detectors.interface import load_detector

        if self.threads:
            import torch
            torch.set_num_threads(self.threads)
        return load_detector(self.kind, self.weights, self.options)


@dataclass(frozen=True)
class FrameJob:
    """One predict call: ``index`` in the plan, ``tag`` ``(config, split)``, the
    ``(shard path, image ids)`` it reads, in frame order, and the model-input ``noise``
    of those frames (None: none)."""

    index: int
    tag: tuple[str, str]
    rows: tuple[tuple[str, tuple[str, ...]], ...]
    noise: InputNoise | None = None

    @property
    def image_ids(self) -> tuple[str, ...]:
        return tuple(i for _, ids in self.rows for i in ids)


@dataclass(frozen=True)
class JobResult:
    """Detections of one job's frames and the model counters of that call."""

    index: int
    tag: tuple[str, str]
    image_ids: tuple[str, ...]
    detections: tuple[Detections, ...]
    stats: Throughput


def plan_jobs(repo: str | Path, manifest: dict, plan: dict[str, list[str]], configs: Iterable[str],
              frames_per_batch: int, levels: dict[str, float] | None = None) -> list[FrameJob]:
    """The frame jobs of ``configs`` (reading image ids only), in the loader's batch order;
    configs in ``levels`` (``config -> a``) read clean frames and add noise at the model input."""
    levels = levels or {}
    jobs: list[FrameJob] = []
    for config in configs:
        for split in plan[config]:
            frames = []
            paths, keep = input_shards(repo, manifest, config, split, at_input=config in levels)
            for path in paths:
                ids = pq.read_table(path, columns=["image_id"]).column("image_id").to_pylist()
                frames += [(str(Path(path).resolve()), i) for i in ids if keep is None or i in keep]
            for s in range(0, len(frames), frames_per_batch):
                chunk, rows = frames[s:s + frames_per_batch], []
                for path, image_id in chunk:
                    if rows and rows[-1][0] == path:
                        rows[-1][1].append(image_id)
                    else:
                        rows.append((path, [image_id]))
                noise = input_noise(manifest, levels, (config, split), [i for _, i in chunk])
                jobs.append(FrameJob(len(jobs), (config, split), tuple((p, tuple(i)) for p, i in rows), noise))
    return jobs


def read_frames(job: FrameJob) -> list:
    """Decoded RGB frames of a job, in its order (only the job's rows are kept)."""
    images = []
    for path, ids in job.rows:
        t = pq.read_table(path, columns=["image_id", "image"])
        blobs = dict(zip(t.column("image_id").to_pylist(), t.column("image").combine_chunks().field("bytes").to_pylist()))
        for image_id in ids:
            if image_id not in blobs:
                raise BadInput(f"image {image_id!r} is not in the shard", where=path)
            images.append(decode_image(blobs[image_id], f"{Path(path).name}:{image_id}"))
    return images


def run_job(detector: Detector, job: FrameJob) -> JobResult:
    """Read, decode and predict one job with a loaded detector."""
    before = dataclasses.replace(detector.stats)
    frames = read_frames(job)
    dets = detector.predict(frames) if job.noise is None else detector.predict(frames, noise=job.noise)
    s = detector.stats
    return JobResult(job.index, job.tag, job.image_ids, tuple(dets),
                     Throughput(s.frames - before.frames, s.windows - before.windows, s.seconds - before.seconds))


_LOADED: dict[DetectorSpec, Detector] = {}  # one detector per worker process and spec


def predict_job(spec: DetectorSpec, job: FrameJob) -> JobResult:
    """Worker-process entry point: the process's detector for ``spec`` predicts ``job``."""
    if spec not in _LOADED:
        _LOADED.clear()
        _LOADED[spec] = spec.load()
    return run_job(_LOADED[spec], job)


def local_results(spec: DetectorSpec, jobs: list[FrameJob], executor: Executor) -> Iterator[JobResult]:
    """Jobs on local worker processes (threads split between them), in plan order."""
    import functools

    threads = spec.threads or max(1, (os.cpu_count() or 1) // executor.workers)
    return map_tasks(functools.partial(predict_job, dataclasses.replace(spec, threads=threads)), jobs, executor)


# ------------------------------------------------------------------ Ray Data


class DetectorActor:
    """Ray Data actor: loads the detector once, predicts the jobs of each batch."""

    def __init__(self, spec: DetectorSpec):
        import ray

        self.detector = spec.load()
        self.node = ray.get_runtime_context().get_node_id()

    def __call__(self, batch: pa.Table) -> pa.Table:
        out = [pickle.dumps(run_job(self.detector, pickle.loads(b))) for b in batch.column("job").to_pylist()]
        return pa.table({"result": pa.array(out, pa.binary()), "node": pa.array([self.node] * len(out), pa.string())})


@dataclass(frozen=True)
class ActorPool:
    """``size`` actors with ``num_gpus``/``num_cpus`` each, running the detector on ``device``."""

    size: int
    num_gpus: float
    num_cpus: float
    device: str


def actor_pool(requested_device: str, n_jobs: int) -> ActorPool:
    """One actor per GPU of the cluster (device not ``cpu``), else one CPU actor per CPU."""
    import ray

    res = ray.cluster_resources()
    gpus, cpus = int(res.get("GPU", 0)), max(1, int(res.get("CPU", 1)))
    cap = max(1, n_jobs)
    if requested_device != "cpu" and gpus:
        return ActorPool(min(gpus, cap), 1.0, 1.0, "cuda:0")  # Ray sets CUDA_VISIBLE_DEVICES per actor
    if requested_device.startswith("cuda"):
        raise BadInput(f"the Ray cluster has no GPU for --device {requested_device}; use --device auto or cpu",
                       where="--device")
    return ActorPool(min(cpus, cap), 0.0, 1.0, "cpu")


def ray_results(spec: DetectorSpec, jobs: list[FrameJob], pool: ActorPool) -> Iterator[JobResult]:
    """Jobs through Ray Data ``map_batches`` on ``pool`` (Ray already connected), in plan order."""
    import ray
    import ray.data

    if not jobs:
        return
    log.info("Ray detect: %d job(s) on %d actor(s) (%s, %g GPU each)", len(jobs), pool.size, pool.device,
             pool.num_gpus)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ds = ray.data.from_items([{"job": pickle.dumps(j)} for j in jobs], override_num_blocks=min(len(jobs), 1000))
    ds = ds.map_batches(DetectorActor, fn_constructor_kwargs={"spec": spec}, batch_size=1,
                        batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=pool.size),
                        num_gpus=pool.num_gpus or None, num_cpus=pool.num_cpus)
    waiting: dict[int, JobResult] = {}
    per_node: dict[str, int] = {}
    nxt = 0
    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        for blob, node in zip(batch.column("result").to_pylist(), batch.column("node").to_pylist()):
            r = pickle.loads(blob)
            if r.index in waiting or r.index < nxt:  # pragma: no cover - Ray Data ran a job twice
                raise RuntimeError(f"Ray detect returned job {r.index} twice")
            log.debug("ray detect job %d (%d frames) ran on node %s", r.index, len(r.image_ids), node)
            per_node[node] = per_node.get(node, 0) + 1
            waiting[r.index] = r
        while nxt in waiting:
            yield waiting.pop(nxt)
            nxt += 1
    if nxt != len(jobs):  # pragma: no cover - Ray Data lost a row
        raise RuntimeError(f"Ray detect returned {nxt} of {len(jobs)} jobs")
    log.info("ray: %d detect job(s) on %d node(s): %s", nxt, len(per_node),
             ", ".join(f"{n}={c}" for n, c in sorted(per_node.items())))


def worker_spec(detector: Detector, executor: Executor, requested_device: str | None = None,
                half: bool | None = None) -> DetectorSpec:
    """What the workers run: ``detector``'s kind, weights and options; for ``ray`` on the
    actors' device (chosen from ``requested_device``, the user's ``--device``) with FP16
    as ``half`` on CUDA."""
    spec = DetectorSpec.of(detector)
    if executor.kind != "ray":
        return spec
    connect(executor)
    return spec.on(actor_pool(requested_device or spec.options.device, 1 << 30).device, half)


def worker_results(spec: DetectorSpec, jobs: list[FrameJob], executor: Executor) -> Iterator[JobResult]:
    """Results of ``jobs`` on ``executor``'s workers (local processes or Ray actors), in plan order."""
    if executor.kind == "ray":
        connect(executor)
        return ray_results(spec, jobs, actor_pool(spec.options.device, len(jobs)))
    return local_results(spec, jobs, executor)
