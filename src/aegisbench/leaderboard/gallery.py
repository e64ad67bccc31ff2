"""The condition gallery of the leaderboard page: what each condition looks like and what
it models.

For every corruption built for a source: one thumbnail per severity (and the clean frame)
of the same frame, cut from the ``preview`` stage's corruption grid
(``<preview>/<source>_grid.png``, written by :func:`aegisbench.corruptions.preview.preview_grid`:
a header row, then one row per corruption in registry order, of every corruption or of those
built for the source's sensor (:func:`~aegisbench.corruptions.preview.grid_corruptions`),
columns clean, s1, s2, s3), its physical model (the registry's summary and the docstring of
its function) and the declared statistic with its target and the fitted parameter at each
severity; with the calibrate stage's report (read and checked by
:mod:`~aegisbench.leaderboard.calibration_report`), also the value measured at each severity, its
difference from the target in %, the frames it was measured on and the ladder's two verdicts,
``monotone`` and ``on target`` (never one ``ok``). A corruption not built for the source's sensor has no row (the source's note on
the page names it). A grid whose size matches none of those layouts is refused (BadInput
naming it): it was not written by this code.

>>> describe("low_light")["ladder"][0]["target"]
'0.2355'
>>> from aegisbench.leaderboard.calibration_report import parse_calibration_report
>>> m = parse_calibration_report({"tolerance": 0.02, "measured_on": {"frames": 20, "sources": ["synthetic_sar"]},
...     "corruptions": {"low_light": {"monotone": True, "on_target": False, "target_source": "HERIDAL", "severities": {
...     f"s{k}": {"measured": 0.2, "diff_pct": -15.0, "on_target": False} for k in (1, 2, 3)}}}})
>>> d = describe("low_light", m)
>>> d["verdicts"], d["ladder"][0]["measured"], d["ladder"][0]["diff"]
('monotone: yes; on target (within 2%): 0 of 3 severities', '0.2', '-15.0%')
"""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np

from aegisbench.atomic import atomic_write_bytes
from aegisbench.dataset.card import corruption_model_text
from aegisbench.corruptions.preview import grid_corruptions
from aegisbench.corruptions.registry import SEVERITIES, get_spec
from aegisbench.errors import BadInput
from aegisbench.leaderboard.calibration_report import CalibrationReportView, read_calibration_report
from aegisbench.vocab import CLEAN, MODALITIES, severity_key

log = logging.getLogger(__name__)
# the layout of preview_grid: label column, header row, gap before every tile
LABEL_W, LABEL_H, GAP = 130, 22, 2
GRID_SUFFIX = "_grid.png"


def describe(name: str, report: CalibrationReportView | None = None) -> dict:
    """Family, model text, sensors, statistic and its declared ladder (target and fitted
    parameter per severity) of one corruption, from the corruption registry; with the
    calibration report, each severity's measured value and its difference in %, the frames
    it was measured on and the ladder's two verdicts."""
    spec = get_spec(name)
    lad = report.ladders.get(name) if report is not None else None
    sev = lad.severities if lad is not None else {}
    ladder = [{"severity": severity_key(s), "target": f"{t:g}",
               "param": f"{getattr(spec.severities[s], spec.fit_param):g}" if s in spec.severities else "",
               **({"measured": f"{sev[severity_key(s)].measured:.4g}",
                   "diff": f"{sev[severity_key(s)].diff_pct:+.1f}%",
                   "on_target": sev[severity_key(s)].on_target} if severity_key(s) in sev else {})}
              for s, t in zip(SEVERITIES, spec.targets)]
    out = {"name": name, "family": spec.family, "model": corruption_model_text(name), "statistic": spec.statistic,
           "direction": "falls" if spec.direction == -1 else "rises", "fit_param": spec.fit_param,
           "ladder": ladder, "sensors": ", ".join(spec.modalities), "sensor_note": spec.modality_note.rstrip("."),
           "verdicts": None, "target_source": None, "measured_on": None}
    if sev:
        on = sum(s.on_target for s in sev.values())
        out.update(verdicts=f"monotone: {'yes' if lad.monotone else 'no'}; on target (within "
                            f"{100 * report.tolerance:g}%): {on} of {len(sev)} severities",
                   target_source=lad.target_source,
                   measured_on=f"{', '.join(map(str, report.measured_on.get('sources') or ['?']))}, "
                               f"{report.measured_on.get('frames', '?')} frames")
    return out


def grid_tiles(path: Path, sensor: str | None = None) -> dict[str, list[np.ndarray]]:
    """corruption -> [clean, s1, s2, s3] tiles (BGR) cut from one preview grid: of the
    corruptions built for ``sensor`` (tried first), for another sensor, or of all."""
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise BadInput("not a readable PNG", where=str(path))
    h, w = img.shape[:2]
    cols = 1 + len(SEVERITIES)
    cell, rest = divmod(w - LABEL_W, cols)
    cell -= GAP
    layouts = [grid_corruptions(m) for m in ([sensor] if sensor in MODALITIES else []) + list(MODALITIES)]
    rows = next((r for r in layouts + [grid_corruptions()] if h == LABEL_H + len(r) * (cell + GAP)), None)
    if rest or cell < 8 or rows is None:
        counts = " or ".join(str(n) for n in sorted({len(r) for r in layouts + [grid_corruptions()]}))
        raise BadInput(f"a {w}x{h} image is not a preview grid of {counts} corruptions x {cols} columns "
                       "(aegisbench preview --grid)", where=str(path))
    out = {}
    for i, name in enumerate(rows):
        y = LABEL_H + i * (cell + GAP) + GAP
        out[name] = [img[y:y + cell, LABEL_W + j * (cell + GAP) + GAP:LABEL_W + (j + 1) * (cell + GAP)]
                     for j in range(cols)]
    return out


def gallery_view(preview: str | Path | None, out: Path, built: dict[str, set[str]], written: list[Path],
                 sensors: dict[str, str] | None = None, calibration: str | Path | None = None) -> dict | None:
    """Write the thumbnails of each source's corruptions under ``out/gallery/`` and return the
    gallery's view (None without a preview folder or a grid in it). ``built``: source -> the
    corruptions built for it (a source not in it, or with none: every row of its grid); ``sensors``:
    source -> its sensor, where known (which grid layout to try first)."""
    if preview is None:
        return None
    preview = Path(preview)
    if not preview.is_dir():
        raise BadInput("no preview folder (run the preview stage: aegisbench preview --grid)", where=str(preview))
    grids = sorted(preview.glob(f"*{GRID_SUFFIX}"))
    if not grids:
        log.warning("%s holds no *%s: no condition gallery", preview, GRID_SUFFIX)
        return None
    report = read_calibration_report(calibration) if calibration is not None else None
    sources = []
    for grid in grids:
        source = grid.name[:-len(GRID_SUFFIX)]
        tiles = grid_tiles(grid, (sensors or {}).get(source))
        rows = []
        for name in [n for n in tiles if not built.get(source) or n in built[source]]:
            thumbs = []
            for label, tile in zip((CLEAN, *(severity_key(s) for s in SEVERITIES)), tiles[name]):
                rel = f"gallery/{source}-{CLEAN if label == CLEAN else f'{name}_{label}'}.png"
                if label != CLEAN or not any(t["src"] == rel for r in rows for t in r["thumbs"]):
                    ok, buf = cv2.imencode(".png", tile)
                    if not ok:  # pragma: no cover - OpenCV failure
                        raise RuntimeError("PNG encoding failed")
                    atomic_write_bytes(out / rel, buf.tobytes())
                    written.append(out / rel)
                thumbs.append({"src": rel, "label": label, "config": CLEAN if label == CLEAN else f"{name}_{label}"})
            rows.append({**describe(name, report), "thumbs": thumbs})
        sources.append({"source": source, "rows": rows})
    return {"sources": sources}
