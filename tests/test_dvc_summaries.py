"""``python -m aegisbench.pipeline.summaries``: the small files DVC reads (content digest, ladder
summary) refuse what they cannot trust with one line and exit 2, writing nothing. The digest
on a real built repo, under two shard layouts, is checked by tests/test_dvc.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from aegisbench.errors import BadInput
from aegisbench.pipeline.summaries import ladder_failures, ladder_summary, main


def _report(fit=False, **ladders):
    return {"fit": fit, "tolerance": 0.1, "sample_ids": ["a", "b"], "corruptions": ladders}


def _ladder(monotone, *diffs, tol=10.0):
    sev = {f"s{k}": {"target": 1.0, "measured": 1 + d / 100, "diff_pct": d, "on_target": abs(d) <= tol}
           for k, d in enumerate(diffs, 1)}
    return {"monotone": monotone, "on_target": all(s["on_target"] for s in sev.values()), "severities": sev}


def test_ladder_summary_keeps_both_verdicts_and_the_signed_worst_miss():
    report = _report(low_light=_ladder(False, -4.76, 150.0), fog=_ladder(True, 5.0, -12.5, 1.0))
    assert ladder_summary(report) == {
        "ladders": {"fog": {"monotone": True, "on_target": False, "worst_miss_pct": -12.5},
                    "low_light": {"monotone": False, "on_target": False, "worst_miss_pct": 150.0}},
        "ladders_monotone": "1/2", "cells_on_target": "3/5", "tolerance_pct": 10.0, "fit": False}
    assert ladder_failures(ladder_summary(report)) == ["low_light: not monotone"]
    # measured (not fitted): off target is information; fitted: it fails
    assert ladder_failures(ladder_summary(_report(fog=_ladder(True, 30.0)))) == []
    assert ladder_failures(ladder_summary(_report(True, fog=_ladder(True, 30.0)))) == ["fog: fitted but off target"]


def test_an_older_report_with_one_ok_is_refused():
    old = {"ok": True, "corruptions": {"fog": {"monotone": True, "ok": True, "severities": {"s1": {"rel_error": 0.2}}}}}
    try:
        ladder_summary(old)
    except BadInput as exc:
        assert "not a calibration report of this version: 'tolerance' is missing" in str(exc)
    else:
        raise AssertionError("an old report was summarised")
    old["tolerance"] = 0.02
    with pytest.raises(BadInput, match="'corruptions.fog.on_target' is missing"):
        ladder_summary(old)


def test_bad_inputs_exit_2_with_one_line_and_write_nothing(tmp_path, capsys):
    (tmp_path / "report.json").write_text(json.dumps({"ok": True}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    cases = {
        ("ladders", "report.json"): "not a calibration report",
        ("ladders", "broken.json"): "broken.json",
        ("ladders", "missing.json"): "missing.json",
        ("digest", "empty"): "manifest.json",
        ("digest", "nowhere"): "dataset repo folder not found",
    }
    for (what, src), message in cases.items():
        assert main([what, str(tmp_path / src), str(tmp_path / "out.json")]) == 2, (what, src)
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, (what, src, err)
        assert not (tmp_path / "out.json").exists()


def test_runs_as_a_module(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_report(fog=_ladder(True, 25.0))))
    out = tmp_path / "metrics" / "calibration.json"
    proc = subprocess.run([sys.executable, "-m", "aegisbench.pipeline.summaries", "ladders", str(report), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["ladders"] == {"fog": {"monotone": True, "on_target": False,
                                                              "worst_miss_pct": 25.0}}
    report.write_text(json.dumps(_report(fog=_ladder(False, 1.0, 2.0))))  # not monotone: the stage fails
    proc = subprocess.run([sys.executable, "-m", "aegisbench.pipeline.summaries", "ladders", str(report), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "fog: not monotone" in proc.stderr
