"""Background loading of dataset-repo images: shards are read and PNGs decoded in worker
threads (pyarrow and OpenCV release the GIL) while the model runs, so the accelerator
is not idle waiting for input.

``split_frames(repo, manifest, config, split)`` lists a split's image ids without
decoding; ``FrameLoader`` yields :class:`FrameBatch` objects (tag + ids + RGB frames)
in shard order, one continuous pipeline over many splits (a batch never mixes tags),
decoding a batch ahead and queueing ``prefetch`` decoded batches for the consumer.

The WARP noise sweep (:mod:`aegisbench.detectors.noise_sweep`) predicts levels that the
repo does not store, from the clean frames with the noise added at the model input:
:func:`input_shards` names the shards such a split is read from and :func:`input_noise`
gives each frame its stable key.

>>> b = FrameBatch(("clean", "sard"), ("a",), [np.zeros((2, 2, 3), np.uint8)], [(2, 2)])
>>> len(b), b.tag
(1, ('clean', 'sard'))
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from aegisbench.dataset.images import decode_image
from aegisbench.detectors.interface import InputNoise
from aegisbench.errors import BadInput
from aegisbench.vocab import CLEAN

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FrameBatch:
    """Consecutive frames of one shard group: its ``tag`` (e.g. ``(config, split)``),
    ``image_ids``, decoded RGB ``images``, ``sizes`` (w, h)."""

    tag: object
    image_ids: tuple[str, ...]
    images: list[np.ndarray]
    sizes: list[tuple[int, int]]

    def __len__(self) -> int:
        return len(self.image_ids)


def shard_paths(repo: str | Path, manifest: dict, config: str, split: str) -> list[Path]:
    """The Parquet shards of one split, in manifest order."""
    try:
        shards = manifest["configs"][config]["splits"][split]["shards"]
    except KeyError:
        raise BadInput(f"no split {split!r} in config {config!r}", where=str(Path(repo) / "manifest.json")) from None
    return [Path(repo) / s["path"] for s in shards]


def split_frames(repo: str | Path, manifest: dict, config: str, split: str) -> list[tuple[str, int, int]]:
    """``(image_id, width, height)`` of every row of a split (no image decoding)."""
    out = []
    for path in shard_paths(repo, manifest, config, split):
        t = pq.read_table(path, columns=["image_id", "width", "height"])
        out += list(zip(t.column("image_id").to_pylist(), t.column("width").to_pylist(),
                        t.column("height").to_pylist()))
    return out


def input_shards(repo: str | Path, manifest: dict, config: str, split: str, at_input: bool = False
                 ) -> tuple[list[Path], frozenset[str] | None]:
    """``(shards, keep)`` a split's frames are read from: its own shards, or with ``at_input``
    (a WARP noise level swept at the model input, ``config`` naming the level) every frame
    of the same split of ``clean``; ``keep`` (image ids to read, None: all) is None for both."""
    if not at_input:
        return shard_paths(repo, manifest, config, split), None
    if split not in manifest["configs"].get(CLEAN, {}).get("splits", {}):
        raise BadInput(f"no clean split {split!r} to add the noise of {config!r} to", where="manifest.json")
    return shard_paths(repo, manifest, CLEAN, split), None


def input_noise(manifest: dict, levels: dict[str, float], tag: tuple[str, str],
                image_ids: Iterable[str]) -> InputNoise | None:
    """The model-input noise of frames of ``tag`` = ``(config, split)`` (None unless the
    config is in ``levels``): key ``(benchmark_version, config, split, image_id)`` per frame."""
    config, split = tag
    if config not in levels:
        return None
    v = manifest["benchmark_version"]
    return InputNoise(levels[config], tuple((v, config, split, i) for i in image_ids))


def _encoded_rows(items: Iterable[tuple], skip: frozenset[str]) -> Iterator[tuple[object, str, bytes, str]]:
    for tag, path, *keep in items:
        keep = keep[0] if keep else None
        pf = pq.ParquetFile(path)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["image_id", "image"])
            ids = t.column("image_id").to_pylist()
            blobs = t.column("image").combine_chunks().field("bytes").to_pylist()
            for image_id, data in zip(ids, blobs):
                if image_id not in skip and (keep is None or image_id in keep):
                    yield tag, image_id, data, f"{path.name}:{image_id}"


_END = object()


def background(produce: Callable[[Callable[[object], bool]], None], depth: int = 2) -> Iterator:
    """Run ``produce(put)`` in a thread and yield what it puts, at most ``depth`` items
    ahead. ``put`` returns False once the consumer has stopped; exceptions raised in the
    thread are re-raised in the consumer.

    >>> list(background(lambda put: [put(i) for i in range(3)]))
    [0, 1, 2]
    """
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            produce(put)
            put(_END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(exc)

    worker = threading.Thread(target=run, name="aegis-loader", daemon=True)
    worker.start()
    try:
        while True:
            item = q.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)


class FrameLoader:
    """Iterate decoded frames of shards in batches of at most ``batch`` frames. ``shards``
    are paths, ``(tag, path)`` pairs or ``(tag, path, keep)`` (only image ids in ``keep``,
    or all when None); a batch holds frames of one tag only. PNGs are
    decoded by ``workers`` threads one batch ahead, ``prefetch`` decoded batches wait for
    the consumer; ``skip`` image ids are not decoded. Errors in the background thread
    are re-raised in the consumer."""

    def __init__(self, shards: Iterable, batch: int = 8, workers: int = 2, prefetch: int = 2,
                 skip: Iterable[str] = ()):
        if batch < 1 or workers < 1 or prefetch < 1:
            raise ValueError("batch, workers and prefetch must be >= 1")
        self.items = [(s[0], Path(s[1]), *s[2:]) if isinstance(s, tuple) else (None, Path(s)) for s in shards]
        self.batch, self.workers, self.prefetch = batch, workers, prefetch
        self.skip = frozenset(skip)

    def _produce(self, put: Callable[[object], bool]) -> None:
        with ThreadPoolExecutor(self.workers, thread_name_prefix="aegis-decode") as pool:
            pending: deque = deque()

            def emit() -> bool:
                tag, items = pending[0][0], []
                while pending and len(items) < self.batch and pending[0][0] == tag:
                    items.append(pending.popleft())
                return put(_batch(tag, items))

            for tag, image_id, data, where in _encoded_rows(self.items, self.skip):
                pending.append((tag, image_id, pool.submit(decode_image, data, where)))
                while len(pending) >= 2 * self.batch:  # one batch decoding behind the one handed out
                    if not emit():
                        return
            while pending:
                if not emit():
                    return

    def __iter__(self) -> Iterator[FrameBatch]:
        return background(self._produce, self.prefetch)


def _batch(tag, items: list) -> FrameBatch:
    images = [f.result() for _, _, f in items]
    return FrameBatch(tag, tuple(i for _, i, _ in items), images, [(im.shape[1], im.shape[0]) for im in images])
