"""What ``aegisbench leaderboard`` exports for DVC: ``--metrics`` and ``--plots``.

``--metrics FILE`` is a JSON for ``dvc metrics show``: per track, submission, source and
primary metric (detection: recall at the frozen threshold; fire spread: the F2R and F2S
headline metrics), every condition with its interval, plus the submission's floor (the
worst condition and where it is). A null value stays null, with its ``note`` ("0/0",
"not physical for thermal"); plots leave it out. Never one averaged number::

    {"sar": {"reference_sar": {"synthetic_sar": {"recall": {
        "conditions": {"clean": {"hi": 0.85, "lo": 0.75, "value": 0.8}, ...},
        "floor": {"at": "low_light_s3", "hi": 0.0, "lo": 0.0, "value": 0.0}}}}}}

``--plots DIR`` holds severity curves as data for ``dvc plots show`` (template
``severity`` in ``.dvc/plots/severity.json``): one CSV per track, source and corruption
(fire spread: per stochasticity ladder and primary metric), columns
``model,severity,value,lo,hi``; severity 0 is the model's own clean row, so every curve
starts at clean (fire spread: at its own S-level 0). The folder is rebuilt and swapped in whole (nothing stale lingers).

Both are deterministic: sorted keys and rows, ``repr`` floats, no timestamps.

>>> plot_name("sar", "synthetic_sar", "low_light")
'sar__synthetic_sar__low_light.csv'
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from pathlib import Path

from aegisbench.atomic import atomic_write_bytes, atomic_write_text, staged_dir
from aegisbench.errors import BadInput
from aegisbench.leaderboard.aggregate import Board
from aegisbench.leaderboard.plots import series_key
from aegisbench.leaderboard.tables import Section, floor_rows, primary_metrics, sections, slug
from aegisbench.vocab import CLEAN

log = logging.getLogger(__name__)
PLOT_COLUMNS = ("model", "severity", "value", "lo", "hi")


def metrics_doc(board: Board) -> dict:
    """track -> submission -> source -> primary metric -> {conditions: {config: cell}, floor}."""
    doc: dict = {}
    for section in sections(board):
        for metric in primary_metrics(section):
            floors = floor_rows(board, section, metric)
            for m in section.models:
                conds = {}
                for c in section.conditions:
                    cell = section.cell(m.submission, c["config"], metric)
                    if cell is not None:
                        conds[c["config"]] = {k: cell[k] for k in ("value", "lo", "hi")}
                        if cell["value"] is None:  # null, never 0: with its reason
                            conds[c["config"]]["note"] = cell.get("note")
                if not conds:
                    continue
                entry: dict = {"conditions": conds}
                fl = floors.get(m.submission)
                if fl is not None:
                    entry["floor"] = {"value": fl["floor"], "lo": fl["lo"], "hi": fl["hi"], "at": ", ".join(fl["at"])}
                per_sub = doc.setdefault(section.track, {}).setdefault(m.submission, {})
                per_sub.setdefault(section.source, {})[metric] = entry
    return doc


def metrics_json(board: Board) -> str:
    return json.dumps(metrics_doc(board), indent=1, sort_keys=True, allow_nan=False) + "\n"


def write_metrics(board: Board, path: str | Path) -> Path:
    """Write the metrics JSON atomically; return its path."""
    path = Path(path)
    atomic_write_text(path, metrics_json(board))
    log.info("leaderboard metrics %s", path)
    return path


def plot_name(track: str, source: str, series: str, metric: str | None = None) -> str:
    """``track__source__series[__metric].csv`` (each part file-safe)."""
    return "__".join(slug(p) for p in (track, source, series, *([metric] if metric else []))) + ".csv"


def curve_name(model: str, submission: str, reference: bool = False) -> str:
    """The ``model`` value of a curve: the model name with its submission id (two submissions
    may share a model name), marked if it is a reference.

    >>> curve_name("YOLO", "reference_sar", True), curve_name("b", "b")
    ('YOLO [reference_sar] (reference)', 'b')
    """
    name = submission if model == submission else f"{model} [{submission}]"
    return f"{name} (reference)" if reference else name


def _series(section: Section) -> list[tuple[str, list[dict]]]:
    """(series key, its points) in condition order, for each series with a severity ladder
    (some condition above severity 0; a lone grid point such as the WARP patch is no curve).
    The clean condition leads as severity 0 unless the series has its own level 0
    (fire spread: S-level 0)."""
    series: dict[str, list[dict]] = {}
    for c in section.conditions:
        if c["config"] != CLEAN:
            series.setdefault(series_key(c), []).append(c)
    clean = [c for c in section.conditions if c["config"] == CLEAN]
    out = []
    for key, conds in series.items():
        if any(c["severity"] > 0 for c in conds):
            out.append((key, conds if any(c["severity"] == 0 for c in conds) else clean + conds))
    return out


def plot_tables(board: Board) -> dict[str, str]:
    """file name -> CSV text of every severity curve of the primary metrics."""
    files: dict[str, str] = {}
    for section in sections(board):
        metrics = primary_metrics(section)
        names = {m.submission: curve_name(m.model, m.submission, m.reference) for m in section.models}
        for metric in metrics:
            for key, conds in _series(section):
                rows = []
                for m in section.models:
                    for c in conds:
                        cell = section.cell(m.submission, c["config"], metric)
                        if cell is None or cell["value"] is None:
                            continue
                        v = cell["value"]
                        lo = v if cell["lo"] is None else cell["lo"]
                        hi = v if cell["hi"] is None else cell["hi"]
                        rows.append((names[m.submission], c["severity"], v, lo, hi))
                if not rows:
                    continue
                name = plot_name(section.track, section.source, key, metric if len(metrics) > 1 else None)
                if name in files:  # two different texts slugged alike: keep both, apart
                    digest = hashlib.sha256(repr((section.track, section.source, key, metric)).encode()).hexdigest()
                    name = f"{name[:-4]}-{digest[:8]}.csv"
                buf = io.StringIO()
                writer = csv.writer(buf, lineterminator="\n")
                writer.writerow(PLOT_COLUMNS)
                writer.writerows((n, s, repr(v), repr(lo), repr(hi)) for n, s, v, lo, hi in rows)
                files[name] = buf.getvalue()
    return dict(sorted(files.items()))


def write_plots(board: Board, folder: str | Path) -> list[Path]:
    """Rebuild ``folder`` with the severity CSVs (staged, then swapped in whole)."""
    folder = Path(folder)
    tables = plot_tables(board)
    with staged_dir(folder) as staging:
        for name, text in tables.items():
            atomic_write_bytes(staging / name, text.encode("utf-8"))
    log.info("leaderboard severity plots %s: %d curves", folder, len(tables))
    return [folder / n for n in tables]


def _inside(path: Path, other: Path) -> bool:
    """True if ``path`` is ``other`` or lies under it."""
    return path == other or other in path.parents


def check_export_paths(*, results: str | Path, dataset: str | Path, out: str | Path,
                       metrics: str | Path | None, plots: str | Path | None) -> None:
    """Refuse ``--metrics`` / ``--plots`` paths that would clobber inputs or each other (BadInput)."""
    res, data, lb = (Path(p).resolve() for p in (results, dataset, out))
    if metrics is not None:
        m = Path(metrics).resolve()
        if Path(metrics).suffix.lower() != ".json":
            raise BadInput("--metrics must name a .json file", where=str(metrics))
        if m.is_dir():
            raise BadInput("--metrics names a folder, expected a .json file", where=str(metrics))
        for flag, other in (("--out", lb), ("--results", res), ("--dataset", data)):
            if _inside(m, other):
                raise BadInput(f"--metrics must not lie inside the {flag} folder", where=str(metrics))
    if plots is None:
        return
    p = Path(plots).resolve()
    if p.exists() and not p.is_dir():
        raise BadInput("--plots names a file, expected a folder", where=str(plots))
    for what, other in (("the current folder", Path.cwd().resolve()), ("the --results folder", res),
                        ("the --dataset folder", data), ("the --out folder", lb)):
        if _inside(other, p):
            raise BadInput(f"--plots would replace {what}", where=str(plots))
    if _inside(p, lb) or _inside(p, res) or _inside(p, data):
        raise BadInput("--plots must not lie inside the --out, --results or --dataset folder", where=str(plots))
    if metrics is not None and _inside(Path(metrics).resolve(), p):
        raise BadInput("--metrics must not lie inside the --plots folder", where=str(metrics))
    if p.is_dir():
        foreign = sorted(q.name for q in p.iterdir() if not (q.is_file() and q.suffix == ".csv"))
        if foreign:
            raise BadInput(f"not a severity-plots folder (it holds {foreign[0]!r}); refusing to replace it",
                           where=str(plots))
