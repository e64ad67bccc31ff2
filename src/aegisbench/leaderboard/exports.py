"""What ``aegisbench leaderboard`` exports for DVC: ``--metrics`` and ``--plots``.

``--metrics FILE`` is a compact JSON for ``dvc metrics show`` (a few values per model, so the
table fits a screen; every cell with its interval stays in ``leaderboard.parquet`` and in
``aegisbench export``): per submission, source and primary metric (detection: recall at the
frozen threshold; fire spread: the F2R and F2S headline metrics) its ``clean`` value
(detection), its ``floor`` (the worst condition) and ``floor_at`` (where; ties counted), each
value with its 95% interval (``clean_lo``/``clean_hi``, ``floor_lo``/``floor_hi``; absent when
the metric has none), and, when the source has several condition families, the ``worst``
value of each family. Never one averaged number::

    {"reference_sar": {"synthetic_sar": {"recall": {"clean": 0.8, "clean_lo": 0.74, "clean_hi": 0.86,
        "floor": 0.0, "floor_lo": 0.0, "floor_hi": 0.02, "floor_at": "low_light_s3 (+2 tied)",
        "worst": {"flood": 0.41, "optics": 0.0}}}}}

``--plots DIR`` holds the severity curves twice, one pair per track, source and corruption
(fire spread: per stochasticity ladder and primary metric). ``NAME.svg`` is a titled image
for ``dvc plots show`` (shown as it is: no Vega, nothing fetched, readable offline), the y axis
named after the metric, the x axis the severity (0 = the model's own clean) or, for fire
spread, the S-Level; one line per model with its 95% interval as a band. ``NAME.json`` is the
same curve as data, one record per model and condition (``model``, ``submission``,
``condition``, ``severity``, ``metric``, ``value``, ``lo``, ``hi``), which ``dvc.yaml`` declares
with ``x: severity``, ``y: value`` and the template :data:`DVC_TEMPLATE` (a line per model, its
interval as a band, dashed per revision), so ``dvc plots diff`` overlays two experiments. The
folder is rebuilt and swapped in whole (nothing stale lingers).

Both are deterministic: sorted keys and rows, ``repr`` floats, no timestamps.

>>> plot_name("sar", "synthetic_sar", "low_light")
'sar__synthetic_sar__low_light.svg'
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from aegisbench.atomic import atomic_write_bytes, atomic_write_text

from aegisbench.staging import staged_dir
from aegisbench.errors import BadInput
from aegisbench.leaderboard.aggregate import Board, direction
from aegisbench.leaderboard.plots import RC, mpl_text, series_key, tick_label
from aegisbench.leaderboard.tables import Section, fixed_scale, label, primary_metrics, sections, slug
from aegisbench.vocab import CLEAN, FIRESPREAD

log = logging.getLogger(__name__)
PLOT_SUFFIXES = (".svg", ".json", ".csv")  # what a plots folder may hold (.csv: written by earlier versions)
#: the Vega-Lite template of the curves' data (``dvc.yaml``: ``template:``), relative to the project
DVC_TEMPLATE = "src/aegisbench/templates/dvc_severity_plot.json"


def _where(at: list[str]) -> str:
    """``low_light_s3``, or ``low_light_s3 (+2 tied)`` when several conditions share the floor."""
    return at[0] + (f" (+{len(at) - 1} tied)" if len(at) > 1 else "")


def _interval(name: str, lo: float | None, hi: float | None) -> dict:
    """``{name_lo: lo, name_hi: hi}``, or nothing when the value has no interval."""
    return {} if lo is None or hi is None else {f"{name}_lo": lo, f"{name}_hi": hi}


def metrics_doc(board: Board) -> dict:
    """submission -> source -> primary metric -> {clean, clean_lo, clean_hi, floor, floor_lo, floor_hi,
    floor_at, worst: {family: value}}."""
    doc: dict = {}
    for section in sections(board):
        for metric in primary_metrics(section):
            sign = direction(metric)
            floors = board.floors.filter((board.floors["track"] == section.track)
                                         & (board.floors["source"] == section.source)
                                         & (board.floors["metric"] == metric))
            fams = board.families.filter((board.families["track"] == section.track)
                                         & (board.families["source"] == section.source)
                                         & (board.families["metric"] == metric)
                                         & board.families["severity"].is_null())
            several = fams["family"].n_unique() > 1
            for fl in floors.iter_rows(named=True):
                entry: dict = {"floor": fl["floor"], "floor_at": _where(fl["at"]),
                               **_interval("floor", fl["lo"], fl["hi"])}
                if fl[CLEAN] is not None:
                    clean = section.cell(fl["submission"], CLEAN, metric) or {}
                    entry.update(clean=fl[CLEAN], **_interval(CLEAN, clean.get("lo"), clean.get("hi")))
                if several and sign is not None:
                    mine = fams.filter(fams["submission"] == fl["submission"])
                    entry["worst"] = {r["family"]: r["min"] if sign > 0 else r["max"]
                                      for r in mine.iter_rows(named=True)}
                doc.setdefault(fl["submission"], {}).setdefault(section.source, {})[metric] = entry
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
    """``track__source__series[__metric].svg`` (each part file-safe)."""
    return "__".join(slug(p) for p in (track, source, series, *([metric] if metric else []))) + ".svg"


def curve_name(model: str, submission: str, reference: bool = False) -> str:
    """The legend entry of a curve: the model name with its submission id (two submissions
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


def curve_rows(section: Section, metric: str, conds: list[dict]) -> list[tuple]:
    """``(model row, [(severity, value, lo, hi), ...])`` of every model with a value on ``conds``."""
    out = []
    for m in section.models:
        pts = []
        for c in conds:
            cell = section.cell(m.submission, c["config"], metric)
            if cell is None or cell["value"] is None:
                continue
            v = cell["value"]
            pts.append((c["severity"], v, v if cell["lo"] is None else cell["lo"], v if cell["hi"] is None else cell["hi"]))
        if pts:
            out.append((m, pts))
    return out


def curve_svg(section: Section, metric: str, key: str, conds: list[dict], curves: list[tuple]) -> bytes:
    """One titled severity-curve chart: metric (y, by its display name) against severity or
    S-Level (x), one line per model, its interval as a band."""
    fire = section.track == FIRESPREAD
    name = label(metric, section.track)
    with matplotlib.rc_context(RC):
        legend, below, plot, above = 0.15 + 0.19 * len(curves), 0.62, 2.4, 0.45  # inches
        height = legend + below + plot + above
        fig = Figure(figsize=(6.4, height))
        ax = fig.add_axes((0.1, (legend + below) / height, 0.86, plot / height))
        for m, pts in curves:
            xs, vs, los, his = zip(*pts)
            ax.fill_between(xs, los, his, color=m.colour, alpha=0.16, linewidth=0)
            ax.plot(xs, vs, color=m.colour, marker="o", markersize=3.5, linewidth=1.6,
                    label=mpl_text(curve_name(m.model, m.submission, m.reference)))
        ticks = {c["severity"]: (str(c["severity"]) if fire else tick_label(c)) for c in conds}
        ax.set_xticks(sorted(ticks), [ticks[s] for s in sorted(ticks)])
        ax.set_xlabel("S-Level (stochasticity of ignition)" if fire else "severity (0 = the model's own clean)")
        ax.set_ylabel(mpl_text(name))
        fixed = fixed_scale(metric)
        if fixed is not None:
            pad = 0.03 * (fixed[1] - fixed[0])
            ax.set_ylim(fixed[0] - pad, fixed[1] + pad)
        ax.grid(axis="y", color="#dddddd", linewidth=0.6)
        ax.set_title(mpl_text(f"{name} vs {'S-Level' if fire else 'severity'}: {key} on {section.source}"),
                     fontsize=10)
        fig.legend(loc="lower center", ncol=1, frameon=False, fontsize=8)
        fig.text(0.995, 0.995, "band: 95% interval", ha="right", va="top", fontsize=7.5, color="#555555")
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def curve_data(section: Section, metric: str, conds: list[dict]) -> bytes:
    """The curves of ``conds`` as data for ``dvc plots``: a JSON list of one record per model and
    condition with a value (``model`` as the legend names it, ``severity`` the x axis, ``value``
    and its interval ``lo``/``hi``, null when there is none), models in the section's order."""
    records = []
    for m in section.models:
        name = curve_name(m.model, m.submission, m.reference)
        for c in conds:
            cell = section.cell(m.submission, c["config"], metric)
            if cell is None or cell["value"] is None:
                continue
            records.append({"model": name, "submission": m.submission, "condition": c["config"],
                            "severity": c["severity"], "metric": metric, "value": cell["value"],
                            "lo": cell["lo"], "hi": cell["hi"]})
    return (json.dumps(records, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()


def plot_images(board: Board) -> dict[str, bytes]:
    """file name -> bytes of every severity curve of the primary metrics: ``NAME.svg`` (the
    image) and ``NAME.json`` (its data, :func:`curve_data`)."""
    files: dict[str, bytes] = {}
    for section in sections(board):
        metrics = primary_metrics(section)
        for metric in metrics:
            for key, conds in _series(section):
                curves = curve_rows(section, metric, conds)
                if not curves:
                    continue
                name = plot_name(section.track, section.source, key, metric if len(metrics) > 1 else None)
                if name in files:  # two different texts slugged alike: keep both, apart
                    digest = hashlib.sha256(repr((section.track, section.source, key, metric)).encode()).hexdigest()
                    name = f"{name[:-4]}-{digest[:8]}.svg"
                files[name] = curve_svg(section, metric, key, conds, curves)
                files[name[:-4] + ".json"] = curve_data(section, metric, conds)
    return dict(sorted(files.items()))


def write_plots(board: Board, folder: str | Path) -> list[Path]:
    """Rebuild ``folder`` with the severity curves, SVG and JSON (staged, then swapped in whole)."""
    folder = Path(folder)
    images = plot_images(board)
    with staged_dir(folder) as staging:
        for name, data in images.items():
            atomic_write_bytes(staging / name, data)
    log.info("leaderboard severity plots %s: %d curves (SVG and JSON)", folder, len(images) // 2)
    return [folder / n for n in images]


def _inside(path: Path, other: Path) -> bool:
    """True if ``path`` is ``other`` or lies under it."""
    return path == other or other in path.parents


def check_export_paths(*, results: str | Path | None, dataset: str | Path, out: str | Path,
                       metrics: str | Path | None, plots: str | Path | None) -> None:
    """Refuse ``--metrics`` / ``--plots`` paths that would clobber inputs or each other (BadInput);
    ``results`` None: results folders are named one by one (none to protect as a whole)."""
    data, lb = (Path(p).resolve() for p in (dataset, out))
    res = Path(results).resolve() if results is not None else data
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
        foreign = sorted(q.name for q in p.iterdir() if not (q.is_file() and q.suffix in PLOT_SUFFIXES))
        if foreign:
            raise BadInput(f"not a severity-plots folder (it holds {foreign[0]!r}); refusing to replace it",
                           where=str(plots))
