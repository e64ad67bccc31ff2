"""``leaderboard/CHANGES.md``: the cells a rebuild changed, as Markdown (issue 36 item 2).

:func:`render_changes` words a :class:`~aegisbench.leaderboard.changes.Changes` (computed by
:func:`~aegisbench.leaderboard.changes.changed_cells`): one opening line (identical, not
comparable and why, or how many cells changed and how many of them left their old 95%
interval), a summary per submission and source, the machine class (``kernels``) of each such
submission's published and rebuilt rows (flagged when they differ: a portable class promises the
same bytes on every x86-64 machine, a machine-dependent one does not), and every changed, added or
removed cell with its old and new value and interval. Values are shown to six significant digits (a rebuild on
another machine may move one by 1e-5, invisible at the page's three decimals). Sorted, with no
timestamps or paths: two runs over the same tables write the same bytes.
:func:`write_changes` is what ``aegisbench leaderboard`` does before it swaps in a new folder.

>>> cell_text(0.2971234, 0.156, 0.448, None), cell_text(None, None, None, "0/0")
('0.297123 [0.156, 0.448]', 'n/a (0/0)')
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import polars as pl

from aegisbench.atomic import atomic_write_text
from aegisbench.errors import BadInput
from aegisbench.leaderboard.changes import NO_ROWS, Changes, changed_cells, read_table
from aegisbench.leaderboard.export_table import LEADERBOARD_FILE
from aegisbench.leaderboard.machine import verdict
from aegisbench.leaderboard.markdown import md_code, md_escape

log = logging.getLogger(__name__)

CHANGES_FILE = "CHANGES.md"
REPLACED = "the leaderboard it replaces"
_TITLE = "# Changes against the leaderboard this one replaced"
_ABOUT = ("Written by `aegisbench leaderboard` before it swapped this folder in: every cell (submission, "
          "source, condition, metric) whose value, 95% interval or note differs from the leaderboard it "
          "replaced, compared exactly. A rebuild on another machine may change the rows of the models "
          "trained or run there (see docs/RELIABILITY.md, across machines).")


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.6g}"


def cell_text(value: float | None, lo: float | None, hi: float | None, note: str | None) -> str:
    """A cell's value with its interval (``n/a`` and its reason when the value is not defined)."""
    if value is None:
        return "n/a" + (f" ({md_escape(note)})" if note else "")
    return _num(value) + ("" if lo is None or hi is None else f" [{_num(lo)}, {_num(hi)}]")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(r) + " |" for r in (header, ["---"] * len(header), *rows)]


def headline(changes: Changes, against: str = REPLACED) -> str:
    """The one line that says what changed against ``against`` (Markdown)."""
    if changes.not_comparable is not None:
        return f"Not compared with {against}: {md_escape(changes.not_comparable)}."
    if changes.identical:
        return f"Identical to {against} ({changes.compared} cells: every value and interval)."
    return (f"{changes.changed} of {changes.compared} cells changed against {against}, {changes.outside} of "
            f"them outside their old 95% interval; {changes.added} added, {changes.removed} removed.")


def _summary(cells: pl.DataFrame) -> list[str]:
    keys = ["submission", "track", "source"]
    per = (cells.group_by(keys).agg(
        *[(pl.col("change") == c).sum().alias(c) for c in ("changed", "added", "removed")],
        pl.col("outside_old_interval").sum().alias("outside"),
        pl.col("difference").abs().max().alias("largest")).sort(keys))
    rows = [[md_code(r["submission"]), md_escape(r["track"]), md_code(r["source"]), str(r["changed"]),
             str(r["outside"]), str(r["added"]), str(r["removed"]), _num(r["largest"])]
            for r in per.iter_rows(named=True)]
    return _table(["submission", "track", "source", "changed", "outside old interval", "added", "removed",
                   "largest change"], rows)


def _where(r: dict) -> str:
    parts = ([md_code(r["stratum"])] if r["stratum"] is not None else []) + (
        [f"t={r['t']}"] if r["t"] is not None else [])
    return ", ".join(parts)


def _cells(cells: pl.DataFrame) -> list[str]:
    strata = cells["stratum"].is_not_null().any() or cells["t"].is_not_null().any()
    rows = []
    for r in cells.iter_rows(named=True):
        old = cell_text(r["old_value"], r["old_lo"], r["old_hi"], r["old_note"]) if r["change"] != "added" else "—"
        new = cell_text(r["new_value"], r["new_lo"], r["new_hi"], r["new_note"]) if r["change"] != "removed" else "—"
        diff = "" if r["difference"] is None else f"{r['difference']:+.3g}"
        out = {None: "", True: "**yes**", False: "no"}[r["outside_old_interval"]]
        rows.append([md_code(r["submission"]), md_escape(r["track"]), md_code(r["source"]), md_code(r["config"]),
                     md_code(r["metric"]), *([_where(r)] if strata else []), r["change"], old, new, diff, out])
    return _table(["submission", "track", "source", "condition", "metric", *(["stratum, t"] if strata else []),
                   "change", "old [95% interval]", "new [95% interval]", "difference", "outside old interval"],
                  rows)


def _class_text(kernels: str | None) -> str:
    if kernels == NO_ROWS:
        return "no rows"
    return md_escape(verdict(None)) if kernels is None else f"{md_code(kernels)}: {md_escape(verdict(kernels))}"


def _machines(changes: Changes) -> list[str]:
    """Per submission with a listed cell: the machine class of the published and of the rebuilt
    rows, and whether they differ."""
    rows = [[md_code(sub), _class_text(old), _class_text(new),
             "**differs**" if sub in changes.other_machines else "same" if old and old == new else "—"]
            for sub, (old, new) in changes.machines.items()]
    other = changes.other_machines
    lead = (f"The rebuilt rows of {len(other)} submission(s) were computed on another machine class than the "
            f"published rows: {', '.join(md_code(s) for s in other)}." if other else
            "No submission's rows were computed on another recorded machine class than the published ones.")
    return [lead, "", *_table(["submission", "published rows computed on", "rebuilt rows computed on",
                               "machine class"], rows)]


def render_changes(changes: Changes, against: str = REPLACED, title: str = _TITLE, about: str = _ABOUT) -> str:
    """``CHANGES.md``: the headline, then (when cells differ) a summary per submission and source,
    the machine class of each such submission's published and rebuilt rows, and every changed, added
    or removed cell; ``against`` names the older table (Markdown)."""
    out = [title, "", about, "", headline(changes, against), ""]
    if changes.cells.height:
        out += ["## Per submission and source", "", *_summary(changes.cells), "",
                "## Machine class per submission", "", *_machines(changes), "",
                "## Cells", "", *_cells(changes.cells), ""]
    return "\n".join(out)


def _note(line: str) -> str:
    return f"{_TITLE}\n\n{_ABOUT}\n\n{line}\n"


def write_changes(out: str | Path, rebuilt: pl.DataFrame, into: str | Path) -> Path:
    """Compare ``rebuilt`` (the new long table) with the leaderboard published in ``out`` (if
    any), write ``into/CHANGES.md`` atomically and log the outcome: one WARNING line when cells
    changed (how many, how many outside their old interval) or the tables are not comparable."""
    out, target = Path(out), Path(into) / CHANGES_FILE
    published = out / LEADERBOARD_FILE
    if not os.path.lexists(published):
        atomic_write_text(target, _note("No leaderboard was published here before: nothing to compare."))
        log.info("%s: no leaderboard published before, nothing to compare", out)
        return target
    try:
        old = read_table(published, f"the {LEADERBOARD_FILE} it replaces")
    except BadInput as exc:
        text = exc.message
    except OSError as exc:
        text = exc.strerror or type(exc).__name__
    else:
        changes = changed_cells(old, rebuilt)
        atomic_write_text(target, render_changes(changes))
        _log(changes, out / CHANGES_FILE)
        return target
    atomic_write_text(target, _note(f"The leaderboard it replaces could not be read ({md_escape(text)}): "
                                    "nothing compared."))
    log.warning("%s: not compared with the leaderboard it replaces, unreadable: %s", out, text)
    return target


def _log(changes: Changes, where: Path) -> None:
    if changes.not_comparable is not None:
        log.warning("not compared with the leaderboard it replaces: %s (%s)", changes.not_comparable, where)
    elif changes.changed:
        other = changes.other_machines
        log.warning("%d of %d leaderboard cells changed against the leaderboard it replaces, %d outside their "
                    "old 95%% interval (%d added, %d removed)%s: see %s", changes.changed, changes.compared,
                    changes.outside, changes.added, changes.removed,
                    f"; {len(other)} submission(s) rebuilt on another machine class" if other else "", where)
    else:
        log.info("leaderboard cells: %d compared, none changed (%d added, %d removed): %s", changes.compared,
                 changes.added, changes.removed, where)
