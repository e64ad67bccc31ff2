"""Preview grid: one frame under every corruption and severity, as one PNG.

Rows are corruptions (registry order; for a source of one sensor, only those whose physics
holds for it: :func:`grid_corruptions`), columns are clean, s1, s2, s3. Corruptions
are applied at full resolution (so pixel-unit parameters scale as in the dataset)
and each tile is then shrunk to ``cell`` px on its longer side.

>>> import numpy as np, tempfile, pathlib
>>> img = np.full((60, 80, 3), 120, np.uint8)
>>> out = pathlib.Path(tempfile.mkdtemp()) / "grid.png"
>>> grid = preview_grid(img, out, cell=32, corruptions=["smoke_haze", "low_light"])
>>> out.exists(), grid.shape[2]
(True, 3)
>>> grid_corruptions("thermal")
['inundation', 'rain_streaks', 'motion_blur']
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from aegisbench.atomic import atomic_write_bytes
from aegisbench.corruptions.conditions import apply_condition
from aegisbench.corruptions.optics import check_image
from aegisbench.corruptions.registry import SEVERITIES, SeverityTable, get_spec, names
from aegisbench.hashing import pixel_sha256
from aegisbench.vocab import CLEAN, MODALITIES, corruption_config, severity_key

_FONT = cv2.FONT_HERSHEY_SIMPLEX


def grid_corruptions(modality: str | None = None) -> list[str]:
    """The rows of a preview grid: every corruption (registry order), or with ``modality``
    (:data:`aegisbench.vocab.MODALITIES`) those built for a source of that sensor."""
    if modality is not None and modality not in MODALITIES:
        raise ValueError(f"modality must be one of {MODALITIES}, got {modality!r}")
    return [n for n in names() if modality is None or modality in get_spec(n).modalities]


def _tile(image: np.ndarray, cell: int) -> np.ndarray:
    h, w = image.shape[:2]
    s = cell / max(h, w)
    size = (max(1, round(w * s)), max(1, round(h * s)))
    small = cv2.resize(image, size, interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
    canvas = np.full((cell, cell, 3), 32, np.uint8)
    y, x = (cell - size[1]) // 2, (cell - size[0]) // 2
    canvas[y:y + size[1], x:x + size[0]] = small
    return canvas


def _label(text: str, width: int, height: int) -> np.ndarray:
    canvas = np.full((height, width, 3), 255, np.uint8)
    scale = 0.45
    (tw, th), _ = cv2.getTextSize(text, _FONT, scale, 1)
    scale *= min(1.0, (width - 6) / max(tw, 1))
    (tw, th), _ = cv2.getTextSize(text, _FONT, scale, 1)
    cv2.putText(canvas, text, (max(3, (width - tw) // 2), (height + th) // 2), _FONT, scale,
                (0, 0, 0), 1, cv2.LINE_AA)
    return canvas


def preview_grid(image: np.ndarray, out_path: str | Path, *, key: tuple | None = None,
                 corruptions: list[str] | None = None, table: SeverityTable | None = None,
                 cell: int = 200, geometry: str = "frame", boxes=None) -> np.ndarray:
    """Render the grid, write it as PNG atomically to ``out_path`` and return it (RGB)."""
    check_image(image)
    chosen = list(corruptions) if corruptions is not None else names()
    for name in chosen:
        get_spec(name)
    key = key if key is not None else ("preview", pixel_sha256(image)[:16])
    label_w, label_h, gap = 130, 22, 2
    clean_tile = _tile(image, cell)
    rows = [np.hstack([_label("", label_w, label_h)]
                      + [_label(t, cell + gap, label_h) for t in (CLEAN, *(severity_key(s) for s in SEVERITIES))])]
    for name in chosen:
        tiles = [clean_tile] + [
            _tile(apply_condition(corruption_config(name, s), image, key=key, table=table, geometry=geometry,
                                  boxes=boxes), cell)
            for s in SEVERITIES]
        padded = [np.pad(t, ((gap, 0), (gap, 0), (0, 0)), constant_values=255) for t in tiles]
        rows.append(np.hstack([_label(name, label_w, cell + gap)] + padded))
    grid = np.vstack(rows)
    ok, buf = cv2.imencode(".png", cv2.cvtColor(grid, cv2.COLOR_RGB2BGR))
    if not ok:  # pragma: no cover - OpenCV failure
        raise RuntimeError("PNG encoding failed")
    atomic_write_bytes(out_path, buf.tobytes())
    return grid
