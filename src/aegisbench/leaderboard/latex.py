"""The LaTeX of ``aegisbench export --format latex``: one booktabs table per track, source and
metric, a row per condition (in the leaderboard's order: clean, then each family's corruptions
by severity), a column per model, each cell the value and its 95% interval ``[lo, hi]`` as
the leaderboard shows them. A value that is not defined is ``n/a`` with its reason in a note
under the table (never 0); a condition a model was not scored on is ``--``. Text from the
results (model names, sources, conditions) is escaped, so the tables compile with
``\\usepackage{booktabs}`` alone (pdflatex, UTF-8 input).

>>> tex("a_b & 50% {x} <y> ~$")
'a\\\\_b \\\\& 50\\\\% \\\\{x\\\\} \\\\textless{}y\\\\textgreater{} \\\\textasciitilde{}\\\\$'
>>> tex("α†τ–Zoë 中")
'$\\\\alpha$\\\\dag{}$\\\\tau$--Zoë ?'
"""

from __future__ import annotations

import re
import string

from aegisbench.errors import BadInput
from aegisbench.leaderboard.tables import F2R_HEAT, F2S_HEAT, DETECTION_HEAT, better, fmt_interval, fmt_value, label
from aegisbench.metrics import REGISTRY
from aegisbench.vocab import FIRESPREAD, TRACKS

_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
        ">": r"\textgreater{}", "|": r"\textbar{}", '"': "''", "–": "--", "—": "---", "−": "-", "†": r"\dag{}",
        "‡": r"\ddag{}", "…": r"\dots{}", "α": r"$\alpha$", "β": r"$\beta$", "γ": r"$\gamma$",
        "τ": r"$\tau$", "σ": r"$\sigma$", "≥": r"$\geq$", "≤": r"$\leq$", "×": r"$\times$", "±": r"$\pm$",
        "∞": r"$\infty$", "°": r"\textdegree{}", "\u00a0": "~"}
#: non-ASCII characters kept as they are: Latin-1 letters, which pdflatex's UTF-8 input sets
_LATIN1_LETTERS = {chr(c) for c in range(0xC0, 0x100)} - {"×", "÷"}
PREAMBLE = ("% aegisbench export --format latex: per-condition tables, value [95% interval].\n"
            "% Needs \\usepackage{booktabs}; cite the benchmark and its sources with leaderboard/CITATION.bib\n"
            "% (\\cite{aegisbench}).\n")


def tex(text) -> str:
    """``text`` as LaTeX text: specials escaped, a few symbols as commands, control characters
    as spaces, any other character pdflatex may not set as ``?``."""
    out = []
    for c in str(text):
        if c in _TEX:
            out.append(_TEX[c])
        elif c in string.printable[:-5] or c in _LATIN1_LETTERS:
            out.append(c)
        else:
            out.append(" " if not c.isprintable() else "?")
    return "".join(out)


def latex_metrics(rows: list[dict]) -> list[dict]:
    """The rows of each source's primary metrics (detection: recall; fire spread: F2R F1 and
    F2S Brier), what a paper's table shows when no ``--metric`` is named."""
    keep = []
    for (track, source) in dict.fromkeys((r["track"], r["source"]) for r in rows):
        present = {r["metric"] for r in rows if (r["track"], r["source"]) == (track, source)}
        groups = (F2R_HEAT, F2S_HEAT) if track == FIRESPREAD else (DETECTION_HEAT,)
        primary = {next(m for m in g if m in present) for g in groups if any(m in present for m in g)}
        keep += [r for r in rows if (r["track"], r["source"]) == (track, source) and r["metric"] in primary]
    if not keep:
        raise BadInput("no primary metric (recall; F2R F1 and F2S Brier on fire spread) among the rows: "
                       "name the metrics to export", where="--metric")
    return keep


def _label(*parts: str) -> str:
    return "tab:aegisbench-" + "-".join(re.sub(r"[^A-Za-z0-9]+", "-", p).strip("-") or "x" for p in parts)


def _headers(models: list[tuple[str, str]]) -> list[str]:
    """The column heads: the model name, with its submission id where two share a name."""
    names = [m for _, m in models]
    return [tex(m if names.count(m) == 1 else f"{m} [{s}]") for s, m in models]


def _cell(row: dict | None, notes: dict[str, str]) -> str:
    if row is None:
        return "--"
    metric, value = row["metric"], row["value"]
    if value is None:
        note = row["note"] or "not defined"
        mark = notes.setdefault(note, "abcdefghijklmnopqrstuvwxyz"[len(notes) % 26])
        return rf"n/a\textsuperscript{{{mark}}}"
    interval = fmt_interval(metric, row["lo"], row["hi"])
    return tex(fmt_value(metric, value) + (f" {interval}" if interval else ""))


def _caption(track: str, source: str, metric: str, rows: list[dict]) -> str:
    versions = sorted({(r["dataset_version"], r["evaluator_version"]) for r in rows} - {(None, None)},
                      key=str)
    text = (f"{tex(label(metric, track))} ({tex(better(metric))}) per condition on \\texttt{{{tex(source)}}} "
            f"({tex(track)} track): value [95\\% interval].")
    if len(versions) == 1:
        dv, ev = versions[0]
        text += f" AegisBench dataset {tex(dv)}, evaluator {tex(ev)}."
    return text


def _notes(notes: dict[str, str], rows: list[dict], models: list[tuple[str, str]], missing: bool) -> list[str]:
    lines = [rf"\textsuperscript{{{mark}}}n/a: {tex(note)}." for note, mark in notes.items()]
    if missing:
        lines.append("--: not scored on this condition.")
    status = {r["submission"]: r["status"] for r in rows if r["status"]}
    shown = dict(zip([s for s, _ in models], _headers(models)))
    unverified = [f"{shown[s]} ({tex(st)})" for s, st in status.items() if st != "verified"]
    if unverified:
        lines.append("Not verified by the benchmark's own run: " + ", ".join(unverified) + ".")
    return lines


def not_built(rows: list[dict]) -> dict[str, str]:
    """condition -> sensor, of the conditions not built for the source's sensor: every row of
    them has no value and the evaluator's note ``not physical for <sensor>`` (one line under
    the table names them, as the page does; they are not rows of n/a)."""
    import re

    out: dict[str, str | None] = {}
    for r in rows:
        m = re.fullmatch(r"not physical for (\S+)", str(r["note"] or "")) if r["value"] is None else None
        prev = out.get(r["condition"], "")
        out[r["condition"]] = m.group(1) if m and prev in ("", m.group(1)) else None
    return {c: s for c, s in out.items() if s}


def latex_table(track: str, source: str, metric: str, rows: list[dict]) -> str:
    """One table environment: ``rows`` are one track, source and metric's export rows."""
    models = list(dict.fromkeys((r["submission"], r["model"]) for r in rows))
    skipped = not_built(rows)
    rows = [r for r in rows if r["condition"] not in skipped]
    conds = sorted({r["condition"]: r["_order"] for r in rows}.items(), key=lambda c: (c[1], c[0]))
    cells = {(r["submission"], r["condition"]): r for r in rows}
    notes: dict[str, str] = {}
    body = []
    for cond, _ in conds:
        head = tex(cond)  # a row must not start with "[" (the optional argument of the previous row's \\)
        body.append(" & ".join([("{}" if head.startswith("[") else "") + head]
                               + [_cell(cells.get((s, cond)), notes) for s, _ in models]) + r" \\")
    missing = any(cells.get((s, c)) is None for c, _ in conds for s, _ in models)
    lines = [r"\begin{table}[htbp]", r"\centering", r"\small",
             rf"\caption{{{_caption(track, source, metric, rows)}}}", rf"\label{{{_label(track, source, metric)}}}",
             rf"\begin{{tabular}}{{@{{}}l*{{{len(models)}}}{{c}}@{{}}}}", r"\toprule",
             " & ".join(["Condition", *_headers(models)]) + r" \\", r"\midrule", *body, r"\bottomrule",
             r"\end{tabular}"]
    foot = _notes(notes, rows, models, missing)
    if skipped:
        foot.append(f"Not built for the {tex(', '.join(sorted(set(skipped.values()))))} sensor (its physics does not "
                    f"hold): {tex(', '.join(skipped))}.")
    if foot:
        lines += [r"\par\smallskip", r"{\footnotesize " + r" \quad ".join(foot) + r"\par}"]
    return "\n".join([*lines, r"\end{table}", ""])


def latex_tables(rows: list[dict]) -> str:
    """Every table of ``rows`` (export rows with ``_order``), by track, source and metric
    (registry order), after a comment naming what they need."""
    rank = {t: i for i, t in enumerate(TRACKS)}
    order = {m: i for i, m in enumerate(REGISTRY.names())}
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["track"], r["source"], r["metric"]), []).append(r)
    keys = sorted(groups, key=lambda k: (rank.get(k[0], len(rank)), k[0], k[1], order.get(k[2], len(order)), k[2]))
    return PREAMBLE + "\n" + "\n".join(latex_table(*k, groups[k]) for k in keys)
