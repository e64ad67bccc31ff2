"""Previews of the sources (the ``preview`` stage): contact sheets and corruption grids.

:func:`contact_sheet` writes a PNG grid of thumbnails with their boxes, for eyeballing a
source; :func:`write_previews` writes one per source table and, with ``grid``, one frame
under every corruption x severity built for the source's sensor
(:func:`aegisbench.corruptions.preview.preview_grid`: a thermal source gets no row of a
visible-band corruption); :func:`preview_tables` finds the tables of a built repo's sources
and :func:`source_modalities` their sensors.

>>> import tempfile, pathlib, numpy as np
>>> from aegisbench.builders.source_table import SourceRecord
>>> rec = SourceRecord.from_image("a", "test", "demo", np.zeros((40, 60, 3), np.uint8),
...                               boxes=[[5, 5, 20, 30]], labels=["person"])
>>> out = contact_sheet([rec], pathlib.Path(tempfile.mkdtemp()) / "sheet.png", thumb=64)
>>> out.name
'sheet.png'
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from itertools import islice
from pathlib import Path

import cv2
import numpy as np

from aegisbench.fields import check_int
from aegisbench.atomic import atomic_write_bytes
from aegisbench.dataset.manifest import MANIFEST, load_manifest
from aegisbench.builders.source_table import SourceRecord, read_source_table
from aegisbench.errors import BadInput
from aegisbench.params import Params
from aegisbench.vocab import DETECTION_TRACKS, RGB

log = logging.getLogger(__name__)

CAPTION_PX = 18  # caption strip under each tile
_BOX = (255, 40, 40)  # RGB
_BG = (24, 24, 24)


def contact_sheet(records: Iterable[SourceRecord], path: str | Path, columns: int = 6,
                  thumb: int = 256, max_images: int = 36, draw_boxes: bool = True) -> Path:
    """Write a grid of up to ``max_images`` thumbnails (longer side ``thumb`` px, aspect
    kept) with boxes drawn and a caption ``image_id (n boxes)`` per tile; returns ``path``.

    The sheet is ``min(columns, n) * thumb`` wide and ``rows * (t + CAPTION_PX)`` high,
    where ``t`` is the tallest thumbnail. Written atomically as PNG.
    """
    for name, value, lo in (("columns", columns, 1), ("thumb", thumb, 32),
                            ("max_images", max_images, 1)):
        check_int(value, name, lo=lo, error=BadInput, where=f"contact_sheet: {name}")
    tiles = [_tile(rec, thumb, draw_boxes) for rec in islice(records, max_images)]
    if not tiles:
        raise BadInput("no images to put on the contact sheet", where=str(path))
    cols = min(columns, len(tiles))
    rows = math.ceil(len(tiles) / cols)
    th = max(t.shape[0] for t in tiles)
    sheet = np.full((rows * th, cols * thumb, 3), _BG, np.uint8)
    for i, tile in enumerate(tiles):
        r, c = divmod(i, cols)
        sheet[r * th:r * th + tile.shape[0], c * thumb:(c + 1) * thumb] = tile
    ok, buf = cv2.imencode(".png", cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError("PNG encoding of the contact sheet failed")
    path = Path(path)
    atomic_write_bytes(path, buf.tobytes())
    log.info("contact sheet with %d images -> %s", len(tiles), path)
    return path


def _tile(rec: SourceRecord, thumb: int, draw_boxes: bool) -> np.ndarray:
    """One thumbnail (``thumb`` wide, centred) plus its caption strip, RGB uint8."""
    img = rec.image()
    h, w = img.shape[:2]
    scale = thumb / max(h, w)
    tw, tht = max(1, round(w * scale)), max(1, round(h * scale))
    small = cv2.resize(img, (tw, tht), interpolation=cv2.INTER_AREA)
    tile = np.full((tht + CAPTION_PX, thumb, 3), _BG, np.uint8)
    ox, oy = (thumb - tw) // 2, 0
    tile[oy:oy + tht, ox:ox + tw] = small
    if draw_boxes:
        for x1, y1, x2, y2 in rec.boxes.tolist():
            p1 = (ox + int(math.floor(x1 * scale)), oy + int(math.floor(y1 * scale)))
            p2 = (ox + int(math.ceil(x2 * scale)), oy + int(math.ceil(y2 * scale)))
            cv2.rectangle(tile, p1, p2, _BOX, 1)
    caption = f"{rec.image_id} ({len(rec.boxes)})"
    font, fs = cv2.FONT_HERSHEY_SIMPLEX, 0.35
    while fs > 0.2 and cv2.getTextSize(caption, font, fs, 1)[0][0] > thumb - 4:
        fs -= 0.03
    cv2.putText(tile, caption, (2, tht + CAPTION_PX - 5), font, fs, (230, 230, 230), 1, cv2.LINE_AA)
    return tile


def preview_tables(params: Params, dataset: str | Path | None = None) -> dict[str, Path]:
    """``name -> table`` (in ``paths.sources``) of every image source to preview: those of the
    dataset repo ``dataset`` (default ``paths.dataset``, when a repo is built there: a
    ``--source-dir`` build included), else the sources of ``params``. A missing table is
    BadInput naming it and the tables that are there."""
    sources_dir, repo = Path(params.sources_dir), Path(dataset or params.dataset_dir)
    if dataset is not None or (repo / MANIFEST).is_file():
        sources = load_manifest(repo)["sources"]
        names = [n for n, s in sources.items() if s.get("track") in DETECTION_TRACKS]
        origin, where = f"a source of {repo}", str(repo / MANIFEST)
    else:
        names, origin, where = [s.name for s in params.sources], "a source of params.yaml", "params.yaml"
    tables = {n: sources_dir / f"{n}.parquet" for n in names}
    missing = [n for n, t in tables.items() if not t.is_file()]
    if missing:
        there = sorted(p.stem for p in sources_dir.glob("*.parquet")) if sources_dir.is_dir() else []
        raise BadInput(f"source table not found for {', '.join(missing)} ({origin}); tables there: "
                       f"{', '.join(there) or 'none'}; run `aegisbench sources` or pass --source-table",
                       where=str(tables[missing[0]]))
    if not tables:
        raise BadInput(f"no image source to preview ({origin})", where=where)
    return tables


def source_modalities(params: Params | None, dataset: str | Path | None = None) -> dict[str, str]:
    """``name -> sensor modality`` of the sources :func:`preview_tables` finds: the dataset
    repo's manifest (``dataset``, or ``paths.dataset`` when a repo is built there), else
    ``params.yaml``'s sources (none without params: every source is taken as rgb)."""
    repo = Path(dataset) if dataset is not None else Path(params.dataset_dir) if params is not None else None
    if repo is not None and (repo / MANIFEST).is_file():
        return {n: s.get("modality") or RGB for n, s in load_manifest(repo)["sources"].items()}
    return {s.name: s.modality for s in params.sources} if params is not None else {}


def write_previews(tables: dict[str, str | Path], out_dir: str | Path, *, version: str, split: str = "test",
                   grid: bool = False, image_id: str | None = None, geometry: str = "frame",
                   table=None, cell: int = 200, modalities: dict[str, str] | None = None) -> list[Path]:
    """``<out_dir>/<name>.png``: the contact sheet of up to 36 ``split`` images of each source
    table (``tables``: name -> path; a source with no such image is skipped with a warning).
    With ``grid``, also ``<name>_grid.png``: one frame (the first of the split, or
    ``image_id`` from any split) under every corruption and severity of the severity
    ``table`` (default: the built-in one), seeded by (``version``, source, image id) as the
    build is; only the corruptions built for the source's sensor (``modalities``: name ->
    modality, default rgb) have a row. An ``image_id`` found in no table is BadInput.
    Returns the files written.
    """
    from aegisbench.corruptions.preview import grid_corruptions, preview_grid

    check_int(cell, "cell", lo=16, error=BadInput, where="--cell")
    out_dir = Path(out_dir)
    written, found = [], False
    for name, path in tables.items():
        records = list(islice(read_source_table(path, splits=[split]), 36))
        if not records:
            log.warning("source %s has no %s images: no contact sheet", name, split)
            continue
        written.append(contact_sheet(records, out_dir / f"{name}.png"))
        if not grid:
            continue
        rec = records[0] if image_id is None else next(
            (r for r in read_source_table(path) if r.image_id == image_id), None)
        if rec is None:
            continue
        found = True
        written.append(out_dir / f"{name}_grid.png")
        preview_grid(rec.image(), written[-1], key=(version, rec.source, rec.image_id), boxes=rec.boxes,
                     geometry=geometry, table=table, cell=cell,
                     corruptions=grid_corruptions((modalities or {}).get(name, RGB)))
    if grid and image_id is not None and not found:
        raise BadInput(f"image id {image_id!r} not found", where=", ".join(str(p) for p in tables.values()))
    return written
