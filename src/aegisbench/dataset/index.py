"""Ground truth of a built dataset repo, as the evaluator sees it, and the COCO GT export.

:class:`DatasetIndex` wraps a repo's ``manifest.json``: which ``(config, split)``
pairs belong to a track, the image ids of every split, and (read lazily, without
the ``image`` column) the boxes and sequence fields of every split as
:class:`SplitGT`. COCO integer ids are a deterministic function of the manifest:
within a config, splits of the detection tracks in name order, images in shard
order, numbered from 1.

>>> DETECTION_TRACKS
('sar', 'smoke')
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from aegisbench.atomic import atomic_write_text

from aegisbench.staging import staged_files
from aegisbench.errors import BadInput
from aegisbench.vocab import DETECTION_TRACKS

log = logging.getLogger(__name__)

GT_COLUMNS = ["image_id", "width", "height", "objects", "group_id", "frame_index", "time_s", "fire_start_frame",
              "ignore", "meta"]


@dataclass(frozen=True, eq=False)
class SplitGT:
    """Ground truth of one split of one config, images in shard order."""

    config: str
    split: str
    source: str
    role: str  # "val" or "test"
    image_ids: tuple[str, ...]
    width: np.ndarray  # (n,) int64
    height: np.ndarray
    boxes: tuple[np.ndarray, ...]  # per image (k, 4) float64 xyxy
    labels: tuple[tuple[str, ...], ...]
    group_id: np.ndarray  # (n,) object (str or None)
    frame_index: np.ndarray  # (n,) int64 (-1 = not a sequence frame)
    time_s: np.ndarray  # (n,) float64, NaN = unknown
    fire_start_frame: np.ndarray  # (n,) int64, -1 = none
    ignore: tuple[np.ndarray, ...] = ()  # per image (k, 4) float64 xyxy ignore regions (COCO iscrowd)
    meta: tuple[dict[str, str], ...] = ()  # per image metadata (strata), name -> value

    def __len__(self) -> int:
        return len(self.image_ids)

    @cached_property
    def position(self) -> dict[str, int]:
        return {i: k for k, i in enumerate(self.image_ids)}

    def n_gt(self) -> np.ndarray:
        return np.array([len(b) for b in self.boxes], np.int64)

    def reordered(self, image_ids: tuple[str, ...]) -> SplitGT:
        """The same split with images in the order of ``image_ids`` (same set)."""
        return self.subset([self.position[i] for i in image_ids])

    def subset(self, positions) -> SplitGT:
        """The images at ``positions`` (in that order) as a split of their own."""
        idx = np.asarray(positions, np.int64).reshape(-1)
        return SplitGT(self.config, self.split, self.source, self.role, tuple(self.image_ids[i] for i in idx),
                       self.width[idx], self.height[idx], tuple(self.boxes[i] for i in idx),
                       tuple(self.labels[i] for i in idx), self.group_id[idx], self.frame_index[idx],
                       self.time_s[idx], self.fire_start_frame[idx],
                       tuple(self.ignore[i] for i in idx) if self.ignore else (),
                       tuple(self.meta[i] for i in idx) if self.meta else ())

    def ignore_boxes(self, i: int) -> np.ndarray:
        """Ignore regions of image ``i`` ((0, 4) when none)."""
        return self.ignore[i] if self.ignore else np.zeros((0, 4))

    def strata(self, column: str) -> np.ndarray:
        """Per-image value of metadata ``column`` (object array; None where an image lacks it)."""
        return np.array([m.get(column) for m in self.meta] if self.meta else [None] * len(self), dtype=object)

    def meta_columns(self) -> list[str]:
        """Metadata columns present on any image of the split, sorted."""
        return sorted({k for m in self.meta for k in m})


def _int_column(table: pa.Table, name: str, fill: int) -> np.ndarray:
    return table.column(name).fill_null(fill).to_numpy().astype(np.int64)


def read_split_gt(repo: Path, config: str, split: str, info: dict) -> SplitGT:
    """Read one split's shards (GT columns only); a shard path must stay inside the repo
    (:func:`~aegisbench.dataset.manifest.repo_file`: relative, no ``..``, no symlink)."""
    from aegisbench.dataset.manifest import repo_file
    tables = []
    for shard in info["shards"]:
        path = repo_file(repo, shard["path"])
        try:
            tables.append(pq.read_table(path, columns=GT_COLUMNS))
        except (OSError, pa.ArrowException) as exc:
            raise BadInput(f"cannot read dataset shard: {exc}", where=str(path)) from None
    table = pa.concat_tables(tables) if tables else None
    if table is None or table.num_rows == 0:
        empty = np.zeros(0, np.int64)
        return SplitGT(config, split, info["source"], info["role"], (), empty, empty, (), (),
                       np.zeros(0, object), empty, np.zeros(0), empty)
    bbox = table.column("objects").combine_chunks().field("bbox")
    counts = pc.list_value_length(bbox).fill_null(0).to_numpy().astype(np.int64)
    flat = bbox.flatten().flatten().to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, 4)
    boxes = tuple(np.split(flat, np.cumsum(counts)[:-1])) if len(counts) else ()
    ign = table.column("ignore").combine_chunks()
    icounts = pc.list_value_length(ign).fill_null(0).to_numpy().astype(np.int64)
    iflat = ign.flatten().flatten().to_numpy(zero_copy_only=False).astype(np.float64).reshape(-1, 4)
    ignore = tuple(np.split(iflat, np.cumsum(icounts)[:-1]))
    meta = tuple({m["name"]: m["value"] for m in (v or ())} for v in table.column("meta").to_pylist())
    labels = tuple(tuple(v or ()) for v in table.column("objects").combine_chunks().field("label").to_pylist())
    time_s = table.column("time_s").to_numpy(zero_copy_only=False).astype(np.float64)
    return SplitGT(config, split, info["source"], info["role"], tuple(table.column("image_id").to_pylist()),
                   _int_column(table, "width", 0), _int_column(table, "height", 0), boxes, labels,
                   np.asarray(table.column("group_id").to_pylist(), dtype=object),
                   _int_column(table, "frame_index", -1), time_s, _int_column(table, "fire_start_frame", -1),
                   ignore, meta)


def _with_labels(gt: SplitGT, root: Path, manifest: dict) -> SplitGT:
    """``gt`` with the boxes, labels and ignore regions of the private label repo."""
    from aegisbench.dataset.manifest import repo_file
    info = manifest["splits"].get(gt.config, {}).get(gt.split)
    if info is None:
        raise BadInput(f"has no labels of {gt.config}/{gt.split}", where=str(root))
    rows = {r["image_id"]: r for r in pq.read_table(repo_file(root, info["path"])).to_pylist()}
    if set(rows) != set(gt.image_ids):
        raise BadInput(f"the labels of {gt.config}/{gt.split} are not for this split's images", where=str(root))
    pick = [rows[i] for i in gt.image_ids]
    return dataclasses.replace(
        gt, boxes=tuple(np.asarray(r["objects"]["bbox"], np.float64).reshape(-1, 4) for r in pick),
        labels=tuple(tuple(r["objects"]["label"]) for r in pick),
        ignore=tuple(np.asarray(r["ignore"], np.float64).reshape(-1, 4) for r in pick))


class DatasetIndex:
    """A dataset repo's manifest plus lazily read ground truth.

    ``verify=True`` re-hashes every file and checks every shard's content first
    (:func:`require_verified`); either way the manifest is checked (fields, paths inside the
    repo, every shard listed in ``files``: :func:`load_manifest`)."""

    def __init__(self, repo: str | Path, verify: bool = True, labels: str | Path | None = None):
        from aegisbench.dataset.manifest import load_manifest
        from aegisbench.dataset.verify import require_verified
        self.repo = Path(repo)
        self.manifest = require_verified(self.repo) if verify else load_manifest(self.repo)
        self._gt: dict[tuple[str, str], SplitGT] = {}
        self.withheld = tuple(self.manifest.get("withheld_labels") or ())
        self.labels: tuple[Path, dict] | None = None
        if labels is not None and self.withheld:
            from aegisbench.dataset.labels import load_labels, verify_labels
            if verify:
                report = verify_labels(labels, self.manifest)
                if not report.ok:
                    raise BadInput("the private label repo does not verify: " + "; ".join(report.lines()[:5]),
                                   where=str(labels))
            self.labels = (Path(labels), load_labels(labels, self.manifest))

    @property
    def digest(self) -> str:
        return self.manifest["dataset_digest"]

    @property
    def scoring_digest(self) -> str:
        """The digest of the complete data scoring keys its draws with: the repo's own, or, with
        withheld labels, the digest it has with them (so scores equal an ordinary build's)."""
        return self.labels[1]["full_digest"] if self.labels else self.digest

    def require_labels(self, track: str) -> None:
        """BadInput when splits of ``track`` are withheld and no private label repo was given."""
        missing = sorted({s for _, s in self.keys(track) if s in self.withheld}) if self.labels is None else []
        if missing:
            raise BadInput(f"the labels of {missing} are withheld from this dataset repo: score with its private "
                           "label repo (--labels DIR)", where=str(self.repo))

    @property
    def version(self) -> str:
        return self.manifest["benchmark_version"]

    def track_of(self, source: str) -> str | None:
        return (self.manifest.get("sources", {}).get(source) or {}).get("track")

    def sources(self, track: str) -> list[str]:
        return sorted(n for n, s in self.manifest.get("sources", {}).items() if s.get("track") == track)

    def configs(self) -> list[str]:
        return sorted(self.manifest["configs"])

    def meta(self, config: str) -> dict:
        return self.manifest["configs"][config].get("meta") or {}

    def split_info(self, config: str, split: str) -> dict | None:
        return self.manifest["configs"].get(config, {}).get("splits", {}).get(split)

    def keys(self, track: str) -> list[tuple[str, str]]:
        """Every ``(config, split)`` whose source belongs to ``track``, sorted."""
        return sorted((c, s) for c, cfg in self.manifest["configs"].items() for s, info in cfg["splits"].items()
                      if self.track_of(info["source"]) == track)

    def image_ids(self, config: str, split: str) -> set[str]:
        info = self.split_info(config, split)
        return {i for shard in info["shards"] for i in shard["images"]} if info else set()

    def gt(self, config: str, split: str) -> SplitGT:
        key = (config, split)
        if key not in self._gt:
            info = self.split_info(config, split)
            if info is None:
                raise BadInput(f"the dataset has no split {split!r} in config {config!r}", where=str(self.repo))
            gt = read_split_gt(self.repo, config, split, info)
            if split in self.withheld and self.labels is not None:
                gt = _with_labels(gt, *self.labels)
            self._gt[key] = gt
        return self._gt[key]

    # ------------------------------------------------------------ COCO ids

    def coco_images(self, config: str) -> list[tuple[int, str, str]]:
        """``(coco_id, split, image_id)`` of every image of the detection tracks in ``config``."""
        out, next_id = [], 1
        for split in sorted(self.manifest["configs"][config]["splits"]):
            info = self.split_info(config, split)
            if self.track_of(info["source"]) not in DETECTION_TRACKS:
                continue
            for image_id in self.gt(config, split).image_ids:
                out.append((next_id, split, image_id))
                next_id += 1
        return out


def coco_categories(index: DatasetIndex, config: str) -> dict[str, int]:
    """The COCO category ids of one config's exported GT: its labels sorted, from 1 (a config
    without a box: ``{"object": 1}``); the ``category_id`` a results file must give."""
    labels = set()
    for split in sorted({s for _, s, _ in index.coco_images(config)}):
        labels.update(lab for labs in index.gt(config, split).labels for lab in labs)
    return {lab: k for k, lab in enumerate(sorted(labels), start=1)} or {"object": 1}


def coco_gt(index: DatasetIndex, config: str, splits: set[str] | None = None, *, key_field: str | None = None) -> dict:
    """COCO GT dict of one config (all detection-track splits, or ``splits``).

    ``file_name`` is ``<image_id>.png`` (its stem maps back to our image id);
    ``key_field``, if given, adds ``"<coco_id>.k"`` under that name (its stem is then
    the COCO id whatever characters our image id holds; used to map results back). Ignore
    regions follow the image's boxes as ``iscrowd=1`` annotations, one per category (so
    pycocotools ignores the detections on them, as the evaluator does)."""
    images, anns = [], []
    cats = coco_categories(index, config)
    ann_id = 1
    for coco_id, split, image_id in index.coco_images(config):
        if splits is not None and split not in splits:
            continue
        g = index.gt(config, split)
        k = g.position[image_id]
        img = {"id": coco_id, "file_name": f"{image_id}.png", "width": int(g.width[k]),
               "height": int(g.height[k]), "split": split}
        if key_field:
            img[key_field] = f"{coco_id}.k"
        images.append(img)
        boxes = [(box, cats.get(lab, 1), 0) for box, lab in zip(g.boxes[k], g.labels[k])]
        boxes += [(box, c, 1) for box in g.ignore_boxes(k) for c in sorted(cats.values())]
        for box, cat, crowd in boxes:
            x1, y1, x2, y2 = (float(v) for v in box)
            anns.append({"id": ann_id, "image_id": coco_id, "category_id": cat,
                         "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": crowd})
            ann_id += 1
    return {"info": {"description": f"AegisBench {config}", "version": index.version,
                     "dataset_digest": index.digest},
            "images": images, "annotations": anns,
            "categories": [{"id": i, "name": n} for n, i in sorted(cats.items(), key=lambda kv: kv[1])]}


def export_coco(index: DatasetIndex, out: str | Path) -> list[Path]:
    """Write ``<out>/<config>.json`` (every detection-track split of the config: the GT a
    ``predictions/<config>.json`` results file refers to) and ``<out>/<config>/<split>.json``
    (the same ids, one split). Ids are valid for this dataset digest only. Every file is
    written in a staging folder first and moved into ``out`` only when all are: a failure (a
    full disk) leaves ``out`` as it was (:func:`~aegisbench.staging.staged_files`)."""
    out = Path(out)
    written = []
    with staged_files(out) as staging:
        for config in index.configs():
            splits = sorted({s for _, s, _ in index.coco_images(config)})
            if not splits:
                continue
            atomic_write_text(staging / f"{config}.json", json.dumps(coco_gt(index, config)))
            written.append(out / f"{config}.json")
            for split in splits:
                atomic_write_text(staging / config / f"{split}.json", json.dumps(coco_gt(index, config, {split})))
                written.append(out / config / f"{split}.json")
    log.info("wrote %d COCO GT files to %s", len(written), out)
    return written
