"""WARP local deception test (seed 000) from a submission's ``warp_patch.parquet``.

The file holds the detections of the smoke model on clean test images of the smoke
sources with a cloud patch pasted at grid position ``position`` (``0 .. grid**2 - 1``,
row-major, ``row = position // grid``, ``col = position % grid``; the patches of
:func:`aegisbench.corruptions.cloud_patch_variants`). Columns: ``image_id`` (str),
``position``, ``row``, ``col`` (int), ``x1, y1, x2, y2, score`` (float), optional
``split`` and ``label`` (str). An (image, position) without rows had no detection.
``submission.yaml`` may say how the test was run (``aegisbench detect`` writes it)::

    warp_patch: {grid: 25, patch_px: null, images: [synthetic_smoke/<image_id>, ...]}

Without ``images`` the test is taken to cover every smoke-positive clean test image.
Patch boxes are :func:`aegisbench.corruptions.grid_boxes` clipped to the frame (``clip=True``),
the boxes the engine pastes at.

At the frozen threshold, over the covered smoke-positive images (at least one GT box):
``alpha_i`` = share of positions where a positive image (a box kept on the clean
image) turns negative, ``beta_i`` = share where a negative one turns positive,
``gamma_i = D_i / A`` with ``D_i`` the kept detections with IoU >= 0.5 against the
patch box (seed 000's Eq. 6: every such detection counts, two on one patch count twice),
and ``gamma_positions`` the share of positions with at least one. Means, the gamma count
table and the per-cell heat map are reported. The global-noise half of WARP is
:mod:`aegisbench.evaluation.warp_noise_eval`.

>>> DEFAULT_GRID
25
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from aegisbench.fields import is_int
from aegisbench.dataset.index import DatasetIndex
from aegisbench.evaluation.formats import number_column, read_parquet_checked
from aegisbench.evaluation.rows import BOX, Frames, Problems, RawRows, check_rows, repeat
from aegisbench.metrics import (deceived_position_rates, deception_counts, deception_heatmap, flip_probabilities,
                                gamma_count_table, gamma_rates)
from aegisbench.vocab import CLEAN, SMOKE, WARP_GRID, WARP_PATCH

log = logging.getLogger(__name__)

DEFAULT_GRID = WARP_GRID
INT_COLUMNS = ("position", "row", "col")


@dataclass(frozen=True, eq=False)
class PatchPredictions:
    """Per (split, image_id): positions (k,), boxes (k, 4) float64, scores (k,) float32.
    ``images``: the images the test was run on (None: every smoke-positive one)."""

    grid: int
    patch_px: int | None
    images: frozenset | None
    entries: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]

    def get(self, split: str, image_id: str):
        e = self.entries.get((split, image_id))
        if e is None:
            return np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0, np.float32)
        return e

    def covers(self, split: str, image_id: str) -> bool:
        return self.images is None or (split, image_id) in self.images


def patch_images(index: DatasetIndex) -> dict[tuple[str, str], tuple[int, int]]:
    """(test split, image_id) -> (w, h) over the clean test splits of the smoke sources."""
    out = {}
    for src in index.sources(SMOKE):
        if index.split_info(CLEAN, src) is not None:
            g = index.gt(CLEAN, src)
            out.update({(src, i): (int(w), int(h)) for i, w, h in zip(g.image_ids, g.width, g.height)})
    return out


def _pos_int(v) -> bool:
    return is_int(v) and v >= 1


def patch_settings(declared, default_grid: int, known: dict, where: str, problems: Problems):
    """``(grid, patch_px, images)`` from the ``warp_patch`` mapping of submission.yaml
    (written by ``aegisbench detect``); the evaluator's grid when absent."""
    if declared is None:
        return default_grid, None, None
    if not isinstance(declared, dict):
        problems.add(where, None, WARP_PATCH, "must be a mapping (grid, patch_px, images)")
        return default_grid, None, None
    grid, patch, images = declared.get("grid", default_grid), declared.get("patch_px"), declared.get("images")
    if not _pos_int(grid):
        problems.add(where, None, "warp_patch.grid", f"must be a positive integer, got {grid!r}")
        grid = default_grid
    if patch is not None and not _pos_int(patch):
        problems.add(where, None, "warp_patch.patch_px", f"must be a positive integer or null, got {patch!r}")
        patch = None
    if images is None:
        return grid, patch, None
    if not isinstance(images, list) or not all(isinstance(x, str) for x in images):
        problems.add(where, None, "warp_patch.images", "must be a list of '<split>/<image_id>' strings")
        return grid, patch, None
    out = set()
    for k, item in enumerate(images):
        split, _, image_id = item.partition("/")
        if (split, image_id) not in known:
            problems.add(where, None, "warp_patch.images", f"entry {k} {item!r} is not a clean test image of a "
                         "smoke source")
        out.add((split, image_id))
    return grid, patch, frozenset(out)


def read_patch_predictions(path: Path, index: DatasetIndex, limits, problems: Problems,
                           grid: int = DEFAULT_GRID, declared=None, meta_where: str = "submission.yaml"
                           ) -> PatchPredictions | None:
    """Check ``warp_patch.parquet`` (every problem collected) and load it; ``declared``
    is the ``warp_patch`` mapping of submission.yaml, if any."""
    known = patch_images(index)
    grid, patch_px, covered = patch_settings(declared, grid, known, meta_where, problems)
    table = read_parquet_checked(path, problems, ("image_id",), (*BOX, "score", *INT_COLUMNS), ("label", "split"))
    if table is None:
        return None
    where = str(path)
    n = table.num_rows
    files = repeat(where, n)
    rows = np.arange(n)
    ints = {}
    for col in INT_COLUMNS:
        v = number_column(table, col)
        bad = ~np.isfinite(v) | (v != np.round(v))
        problems.add_rows(files, rows, col, "null or not an integer", "row", np.flatnonzero(bad))
        ints[col] = np.where(bad, -1, v).astype(np.int64)
    pos = ints["position"]
    bad_pos = (pos < 0) | (pos >= grid * grid)
    problems.add_rows(files, rows, "position", lambda i: f"position {pos[i]} outside 0..{grid * grid - 1}",
                      "row", np.flatnonzero(bad_pos & (pos != -1)))
    for col, expect in (("row", pos // grid), ("col", pos % grid)):
        bad = ~bad_pos & (ints[col] != expect) & (ints[col] != -1)
        problems.add_rows(files, rows, col, lambda i, e=expect, c=col: f"{c} {ints[c][i]} does not match position "
                          f"{pos[i]} (expected {e[i]} on a {grid}x{grid} grid)", "row", np.flatnonzero(bad))
    image_id = np.asarray(table.column("image_id").to_pylist(), dtype=object).reshape(n)
    by_id: dict[str, list[str]] = {}
    for s, i in known:
        by_id.setdefault(i, []).append(s)
    given = (np.asarray(pq.read_table(path, columns=["split"]).column("split").to_pylist(), dtype=object)
             if "split" in pq.read_schema(path).names else np.full(n, None, object))
    split = np.array([g if g is not None else (by_id.get(i, [""])[0] if len(by_id.get(i, [])) < 2 else "?")
                      for g, i in zip(given, image_id)], dtype=object)
    unknown = np.array([(s, i) not in known for s, i in zip(split, image_id)], bool)
    problems.add_rows(files, rows, "image_id", lambda i: f"image {image_id[i]!r} is not in the clean test split "
                      f"{split[i] or 'of a smoke source'!s}" + (" (ambiguous: give a split column)"
                                                                  if split[i] == "?" else ""),
                      "row", np.flatnonzero(unknown))
    unlisted = ~unknown & np.array([covered is not None and (s, i) not in covered for s, i in zip(split, image_id)])
    problems.add_rows(files, rows, "image_id", lambda i: f"image {image_id[i]!r} is not listed under "
                      "warp_patch.images in submission.yaml", "row", np.flatnonzero(unlisted))
    wh = np.array([known.get((s, i), (np.nan, np.nan)) for s, i in zip(split, image_id)], np.float64).reshape(n, 2)
    xyxy = np.stack([number_column(table, c) for c in BOX], axis=1) if n else np.zeros((0, 4))
    raw = RawRows(files, rows, repeat(CLEAN, n), split, image_id, xyxy, number_column(table, "score"),
                  extra=pos, reported=unknown | unlisted | bad_pos)
    valid = check_rows(raw, Frames({}, set(), {}, SMOKE), problems, tolerance_px=limits.frame_tolerance_px,
                       max_dets=limits.max_dets_per_image, membership=False, wh=wh)
    if not valid.all():
        return None
    entries = {}
    key = np.array([f"{s}\x1f{i}" for s, i in zip(split, image_id)], dtype=object)
    for k in np.unique(key):
        sel = np.flatnonzero(key == k)
        s, i = k.split("\x1f", 1)
        entries[(s, i)] = (pos[sel], xyxy[sel], raw.score[sel].astype(np.float32))
    return PatchPredictions(grid, patch_px, covered, entries)


def patch_boxes(width: int, height: int, grid: int, patch_px: int | None = None) -> np.ndarray:
    """Visible patch rectangles (grid**2, 4) float64, as pasted by the corruption engine:
    :func:`aegisbench.corruptions.grid_boxes` clipped to the frame, nothing re-derived."""
    from aegisbench.corruptions import grid_boxes
    return grid_boxes((height, width), grid, patch_px, clip=True).astype(np.float64)


def deception_test(patch: PatchPredictions, gt, original_positive: np.ndarray, threshold: float) -> dict:
    """alpha, beta, gamma, gamma_positions per smoke-positive image of one test split, the
    gamma count table and the heat map. ``original_positive``: per image of ``gt`` (clean outcome)."""
    A = patch.grid * patch.grid
    sel = np.flatnonzero((gt.n_gt() > 0) & np.array([patch.covers(gt.split, i) for i in gt.image_ids], bool))
    patched = np.zeros((len(sel), A), bool)
    counts = np.zeros((len(sel), A), np.int64)
    thr = np.float32(threshold)
    for r, k in enumerate(sel):
        position, boxes, score = patch.get(gt.split, gt.image_ids[k])
        kept = score >= thr
        position, boxes = position[kept], boxes[kept]
        patched[r] = np.bincount(position, minlength=A)[:A] > 0
        order = np.argsort(position, kind="stable")
        per_pos = np.split(boxes[order], np.searchsorted(position[order], np.arange(1, A)))
        counts[r] = deception_counts(patch_boxes(int(gt.width[k]), int(gt.height[k]), patch.grid, patch.patch_px),
                                     per_pos)
    orig = np.asarray(original_positive, bool)[sel]
    if len(sel):
        alpha, beta = flip_probabilities(orig, patched)
    else:
        alpha = beta = np.zeros(0)
    gamma = gamma_rates(counts) if len(sel) else np.zeros(0)
    return {"image_ids": [gt.image_ids[k] for k in sel], "original_positive": orig, "alpha": alpha, "beta": beta,
            "gamma": gamma, "gamma_positions": deceived_position_rates(counts) if len(sel) else np.zeros(0),
            "deceptions": counts.sum(axis=1),
            "gamma_count_table": gamma_count_table(counts) if len(sel) else [],
            "heatmap": deception_heatmap(counts, (patch.grid, patch.grid)) if len(sel)
            else np.zeros((patch.grid, patch.grid), np.int64)}
