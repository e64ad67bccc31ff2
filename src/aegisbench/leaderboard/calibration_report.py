"""The one reader of the calibration report (``calibration/report.json``, written by the
``calibrate`` stage through :meth:`aegisbench.corruptions.calibrate.CalibrationReport.to_dict`).

Its shape is checked here once, for every reader (the ``ladders`` stage's summary in
:mod:`aegisbench.pipeline.summaries`, the condition gallery in
:mod:`aegisbench.leaderboard.gallery`): the ``tolerance``; per ladder the two verdicts,
``monotone`` and ``on_target`` (never one ``ok``), and per severity ``measured``, ``diff_pct``
and ``on_target``. Anything else is refused with one line naming the file and the field
(:class:`~aegisbench.errors.BadInput`, a ``ValueError``); numbers keep the type the file gave
them, so what is written from them stays byte for byte what it was.

>>> r = parse_calibration_report({"tolerance": 0.02, "corruptions": {"fog": {"monotone": True,
...     "on_target": False, "severities": {"s1": {"measured": 0.2, "diff_pct": 5.0, "on_target": False}}}}})
>>> r.ladders["fog"].severities["s1"].diff_pct, r.fit, r.tolerance
(5.0, False, 0.02)
>>> parse_calibration_report({"ok": True, "tolerance": 0.02}, where="report.json")
Traceback (most recent call last):
...
aegisbench.errors.BadInput: report.json: not a calibration report of this version: 'corruptions' is missing (run the calibrate stage again)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aegisbench.errors import BadInput
from aegisbench.readers import read_json

#: What the reader calls a report in its messages when it is not given a file name.
DEFAULT_WHERE = "calibration report"
_NUMBER = "a number"


@dataclass(frozen=True)
class SeverityCell:
    """One severity of one ladder: the value measured, its signed difference from the target
    in % and whether it is within the tolerance (``target``: None where the file has none)."""

    measured: float
    diff_pct: float
    on_target: bool
    target: float | None = None


@dataclass(frozen=True)
class LadderCell:
    """One corruption's ladder: its two verdicts, where its targets come from, its severities."""

    monotone: bool
    on_target: bool
    severities: dict[str, SeverityCell]
    target_source: str = ""


@dataclass(frozen=True)
class CalibrationReportView:
    """A checked calibration report: what its readers use of it."""

    tolerance: float
    ladders: dict[str, LadderCell]
    fit: bool = False
    measured_on: dict = field(default_factory=dict)


def _refuse(where: str, key: str, problem: str) -> BadInput:
    return BadInput(f"not a calibration report of this version: {key} {problem} (run the calibrate stage again)",
                    where=where)


def _get(doc: dict, key: str, path: str, where: str, kind: str, required: bool = True) -> Any:
    """``doc[key]`` checked as ``kind`` ("a number", "true or false", "an object", "a string")."""
    if key not in doc:
        if required:
            raise _refuse(where, repr(f"{path}{key}"), "is missing")
        return None
    value = doc[key]
    ok = {_NUMBER: isinstance(value, (int, float)) and not isinstance(value, bool),
          "true or false": isinstance(value, bool), "an object": isinstance(value, dict),
          "a string": isinstance(value, str)}[kind]
    if not ok:
        raise _refuse(where, repr(f"{path}{key}"), f"is not {kind} ({type(value).__name__})")
    return value


def _severity(doc: Any, path: str, where: str) -> SeverityCell:
    if not isinstance(doc, dict):
        raise _refuse(where, repr(path.rstrip(".")), "is not an object")
    return SeverityCell(measured=_get(doc, "measured", path, where, _NUMBER),
                        diff_pct=_get(doc, "diff_pct", path, where, _NUMBER),
                        on_target=_get(doc, "on_target", path, where, "true or false"),
                        target=_get(doc, "target", path, where, _NUMBER, required=False))


def _ladder(doc: Any, path: str, where: str) -> LadderCell:
    if not isinstance(doc, dict):
        raise _refuse(where, repr(path.rstrip(".")), "is not an object")
    sev = _get(doc, "severities", path, where, "an object")
    return LadderCell(monotone=_get(doc, "monotone", path, where, "true or false"),
                      on_target=_get(doc, "on_target", path, where, "true or false"),
                      severities={str(k): _severity(v, f"{path}severities.{k}.", where) for k, v in sev.items()},
                      target_source=_get(doc, "target_source", path, where, "a string", required=False) or "")


def parse_calibration_report(doc: Any, where: str = DEFAULT_WHERE) -> CalibrationReportView:
    """The checked, typed view of a parsed calibration report; BadInput naming ``where`` (the
    file) and the first field that is missing or of the wrong type."""
    if not isinstance(doc, dict):
        raise BadInput(f"not a calibration report (a JSON {type(doc).__name__}, not an object)", where=where)
    ladders = _get(doc, "corruptions", "", where, "an object")
    return CalibrationReportView(
        tolerance=_get(doc, "tolerance", "", where, _NUMBER),
        ladders={str(name): _ladder(lad, f"corruptions.{name}.", where) for name, lad in sorted(ladders.items())},
        fit=bool(_get(doc, "fit", "", where, "true or false", required=False)),
        measured_on=_get(doc, "measured_on", "", where, "an object", required=False) or {})


def read_calibration_report(path: str | Path) -> CalibrationReportView:
    """Read and check the calibration report at ``path`` (:func:`parse_calibration_report`);
    a missing or unparsable file is one BadInput naming it, as every JSON the project reads."""
    return parse_calibration_report(read_json(Path(path), DEFAULT_WHERE), where=str(path))
