"""A tiny dataset repo whose images carry ignore regions and per-image meta (``time``: day /
night, one test image without it), built by the real pipeline from SourceRecords, plus
submissions made from its ground truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from aegisbench.builders.build import build_repo
from aegisbench.builders.source_table import SourceRecord, write_source_table
from aegisbench.dataset.index import DatasetIndex
from aegisbench.hashing import rng_for
from aegisbench.params import Params
from aegisbench.predictions import Detections

SOURCE = "demo"
CONDITION = "low_light_s1"
IGNORE_BOX = [36.0, 36.0, 60.0, 60.0]
ON_IGNORE = [40.0, 40.0, 56.0, 56.0]  # inside IGNORE_BOX: crowd IoU 1, plain IoU 0.44
N_VAL, N_TEST = 4, 9

_CACHE: dict[str, Path] = {}


def has_ignore(i: int) -> bool:
    return i % 3 == 0


def time_of(split: str, i: int) -> str | None:
    """day for even, night for odd images; the last test image has no ``time``."""
    if split == "test" and i == N_TEST - 1:
        return None
    return "day" if i % 2 == 0 else "night"


def records():
    for split, n in (("train", 1), ("val", N_VAL), ("test", N_TEST)):
        for i in range(n):
            img = rng_for("test-metakit", split, i).integers(0, 256, (64, 64, 3), dtype=np.uint8)
            x = float(4 + i % 4)
            boxes = [[x, 6.0, x + 16.0, 28.0]] + ([[6.0, 40.0, 22.0, 58.0]] if i % 2 else [])
            t = time_of(split, i)
            yield SourceRecord.from_image(
                f"{SOURCE}_{split}_{i:03d}", split, SOURCE, img, boxes=boxes, labels=["person"] * len(boxes),
                group_id=f"g{split}{i}",
                ignore=np.array([IGNORE_BOX] if has_ignore(i) else [], np.float32).reshape(-1, 4),
                meta=(("time", t),) if t is not None else ())


def meta_repo(tmp_path_factory) -> Path:
    """Build (once per session) the repo: clean and CONDITION, one sar source."""
    if "repo" not in _CACHE:
        root = tmp_path_factory.mktemp("metarepo")
        write_source_table(records(), root / "sources" / f"{SOURCE}.parquet")
        params = Params.from_dict({
            "benchmark_version": "0.1.0",
            "paths": {"sources": str(root / "sources"), "dataset": str(root / "repo")},
            "build": {"rows_per_shard": 4, "conditions": [CONDITION]},
            "sources": {SOURCE: {"track": "sar", "kind": "synthetic_sar", "license": "mit",
                                 "description": "demo with ignore regions and day/night meta"}},
        })
        build_repo(params, progress=False)
        _CACHE["repo"] = Path(params.dataset_dir)
    return _CACHE["repo"]


def gt_detections(index: DatasetIndex, *, on_ignore: bool = True, drop=lambda split, image_id, meta: False
                  ) -> dict:
    """(config, split, image_id) -> the GT boxes at score 0.9, plus (``on_ignore``) one box at
    0.95 inside every ignore region; ``drop(split, image_id, meta)`` leaves an image empty."""
    out = {}
    for config, split in index.keys("sar"):
        g = index.gt(config, split)
        for k, image_id in enumerate(g.image_ids):
            if drop(split, image_id, g.meta[k]):
                continue
            boxes, scores = [g.boxes[k]], [np.full(len(g.boxes[k]), 0.9)]
            if on_ignore and len(g.ignore_boxes(k)):
                boxes.append(np.array([ON_IGNORE]))
                scores.append(np.array([0.95]))
            out[(config, split, image_id)] = Detections(np.concatenate(boxes), np.concatenate(scores))
    return out
