"""The machine class of each leaderboard row, and whether another machine gives the same bytes
(issue 36 item 2).

A result's ``provenance.json`` carries ``kernels``, the machine class its model was run (and the
reference trained) with (:func:`aegisbench.kernels.describe`, through ``submission.yaml``; the
evaluator copies it). It is the leaderboard's ``kernels`` column. A class is *portable* when it
is the pinned CPU path: ``x86-64-v3, oneDNN off, MKL COMPATIBLE, <n> thread(s), torch <version>``
gives the same bytes on every x86-64 machine, and so does that path with its convolutions on
NumPy's OpenBLAS (``, conv OpenBLAS <version> Haswell``: the Haswell kernels are pinned by
:mod:`aegisbench.isa`). Anything else is *machine-dependent*: oneDNN on, a
GPU, an unpinned MKL branch, native kernels below x86-64-v3, or a string this project does not
write: the rows may differ on another machine. A submission that recorded none (predictions
handed in without one, numbers from a paper) has a null class.

The string reaches the page, the Markdown and ``CHANGES.md``; for an upload it is the
submitter's text, so it is held to the rule of every other submitter field: one line of plain
text of at most :data:`MAX_KERNELS_CHARS` characters (:func:`~aegisbench.evaluation.metadata.text_problem`),
otherwise it is shown as not recorded, with a warning, like a malformed metadata field.

>>> portability("x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread, torch 2.14.1")
('portable', None)
>>> portability("x86-64-v3, oneDNN off, MKL COMPATIBLE, 1 thread, torch 2.14.1, conv OpenBLAS 0.3.31 Haswell")
('portable', None)
>>> portability("x86-64-v3, oneDNN on, MKL COMPATIBLE, 2 threads, torch 2.14.1")
('machine-dependent', 'oneDNN on')
>>> portability("cuda:0, torch 2.14.1")
('machine-dependent', 'a GPU (cuda:0)')
>>> machine_text(None)
'not recorded'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping

import polars as pl

from aegisbench import isa
from aegisbench.errors import printable
from aegisbench.evaluation.metadata import MAX_FIELD_CHARS, text_problem

log = logging.getLogger(__name__)

#: the leaderboard column (and the provenance field it is read from)
KERNELS = "kernels"
#: longest machine class shown (characters): the limit of every one-line submitter field
MAX_KERNELS_CHARS = MAX_FIELD_CHARS
PORTABLE, MACHINE_DEPENDENT = "portable", "machine-dependent"
#: what each class promises, in the words of the page, the Markdown and CHANGES.md
MEANING = {PORTABLE: "the same bytes on every x86-64 machine",
           MACHINE_DEPENDENT: "rows may differ on another machine"}
NOT_RECORDED = "not recorded"
_THREADS = re.compile(r"[1-9][0-9]* threads?")
_CPU_PROFILE = re.compile(r"x86-64-v[0-9]|native-.+")
#: the convolutions on NumPy's OpenBLAS with those kernels (aegisbench.conv_gemm)
_CONV_BLAS = re.compile(rf"conv OpenBLAS [0-9][0-9A-Za-z.+-]* {re.escape(isa.OPENBLAS_CORE)}")


def recorded_kernels(prov: Mapping, where: str = "") -> str | None:
    """The machine class a result's provenance records, or None: absent, a published row (numbers
    from a paper, computed elsewhere), or not one line of plain text of at most
    :data:`MAX_KERNELS_CHARS` characters (then logged, naming ``where``, and shown as absent)."""
    value = prov.get(KERNELS)
    if value is None or prov.get("status") == "published":
        return None
    why = (f"must be a string, got {type(value).__name__}" if not isinstance(value, str)
           else "is empty" if not value.strip() else text_problem(value, MAX_KERNELS_CHARS))
    if why:
        log.warning("%sprovenance %s %s: shown as not recorded", f"{where}: " if where else "", KERNELS, why)
        return None
    return value.strip()


def by_submission(table: pl.DataFrame) -> dict[str, str | None]:
    """Per submission of a long table, the machine class of its rows (None: not recorded, or a
    table written before the column existed); a table whose rows of one submission name several
    classes gives them sorted, joined by ``; ``. Each class is one line of at most
    :data:`MAX_KERNELS_CHARS` characters (:func:`~aegisbench.errors.printable`: a table read from
    a file is an input like any other)."""
    if KERNELS not in table.columns:
        return {s: None for s in sorted(set(table["submission"].to_list()))}
    per = (table.select("submission", pl.col(KERNELS).cast(pl.String)).unique()
           .group_by("submission").agg(pl.col(KERNELS).drop_nulls().sort()))
    return {r["submission"]: _classes(r[KERNELS]) for r in per.sort("submission").iter_rows(named=True)}


def _classes(values: list[str]) -> str | None:
    """Up to three classes, each bounded, joined by ``; `` (and how many more), or None."""
    shown = [printable(k, MAX_KERNELS_CHARS) for k in values[:3]]
    more = [f"and {len(values) - 3} more"] if len(values) > 3 else []
    return "; ".join(shown + more) or None


def portability(kernels: str | None) -> tuple[str, str | None] | None:
    """``(portable, None)`` for the pinned CPU path, ``(machine-dependent, why)`` otherwise, None
    when no class was recorded."""
    if kernels is None:
        return None
    parts = [p.strip() for p in kernels.split(",")]
    if not _CPU_PROFILE.fullmatch(parts[0]):
        device = parts[0] if len(parts[0]) <= 40 else parts[0][:37] + "..."
        gpu = device.startswith(("cuda", "mps", "xpu", "rocm", "hip"))
        return MACHINE_DEPENDENT, f"a GPU ({device})" if gpu else "not a machine class this project writes"
    if len(parts) not in (5, 6) or not _THREADS.fullmatch(parts[3]) or not parts[4].startswith("torch "):
        return MACHINE_DEPENDENT, "not a machine class this project writes"
    if len(parts) == 6 and not _CONV_BLAS.fullmatch(parts[5]):  # the convolutions on NumPy's BLAS
        pinned = _CONV_BLAS.fullmatch(f"{parts[5].rsplit(' ', 1)[0]} {isa.OPENBLAS_CORE}")
        return MACHINE_DEPENDENT, (f"OpenBLAS's kernels not pinned to {isa.OPENBLAS_CORE}" if pinned
                                   else "the convolutions on an unidentified BLAS")
    if parts[1] != "oneDNN off":
        return MACHINE_DEPENDENT, "oneDNN on" if parts[1] == "oneDNN on" else "oneDNN not off"
    if parts[0] != isa.PROFILE:
        return MACHINE_DEPENDENT, f"{parts[0]} kernels, not the {isa.PROFILE} pins"
    if parts[2] != f"MKL {isa.MKL_BRANCH}":
        return MACHINE_DEPENDENT, f"MKL's branch not pinned to {isa.MKL_BRANCH}"
    return PORTABLE, None


def verdict(kernels: str | None) -> str:
    """What the class promises, one phrase: ``portable: the same bytes on every x86-64 machine``,
    ``machine-dependent (oneDNN on): rows may differ on another machine`` or ``not recorded``
    (plain text: escape it where it is shown; ``why`` may quote a submitter's device name)."""
    said = portability(kernels)
    if said is None:
        return NOT_RECORDED
    kind, why = said
    return f"{kind}{f' ({why})' if why else ''}: {MEANING[kind]}"


def machine_text(kernels: str | None) -> str:
    """The class and its verdict as one line of plain text (escape it where it is shown)."""
    return NOT_RECORDED if kernels is None else f"{kernels} — {verdict(kernels)}"


def machine_view(kernels: str | None) -> dict:
    """What a page shows: the class (empty when not recorded), ``portable`` (True, False, or None
    when not recorded) and the verdict, all plain text for an autoescaping template."""
    said = portability(kernels)
    return {"kernels": kernels or "", "portable": None if said is None else said[0] == PORTABLE,
            "verdict": verdict(kernels)}
