"""``python -m aegisbench.pipeline.summaries``: the small files DVC reads (content digest, ladder
summary) refuse what they cannot trust with one line and exit 2, writing nothing. The digest
on a real built repo, under two shard layouts, is checked by tests/test_dvc.py."""

from __future__ import annotations

import json
import subprocess
import sys

from aegisbench.pipeline.summaries import ladder_summary, main


def test_ladder_summary_keeps_monotone_and_worst_miss_only():
    report = {"ok": False, "rtol": 0.1, "sample_ids": ["a", "b"], "corruptions": {
        "low_light": {"monotone": False, "ok": False, "clean": 0.4, "messages": ["s2 >= s1"], "severities": {
            "s1": {"mean": 0.2, "std": 0.1, "target": 0.21, "rel_error": -0.0476},
            "s2": {"mean": 0.25, "std": 0.1, "target": 0.1, "rel_error": 1.5}}},
        "fog": {"monotone": True, "severities": {"s1": {"rel_error": None}}}}}
    assert ladder_summary(report) == {"ok": False, "ladders": {
        "fog": {"monotone": True, "worst_miss": None},
        "low_light": {"monotone": False, "worst_miss": 1.5}}}


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
    report.write_text(json.dumps({"ok": True, "corruptions": {"fog": {"monotone": True, "severities": {
        "s1": {"rel_error": 0.25}}}}}))
    out = tmp_path / "metrics" / "calibration.json"
    proc = subprocess.run([sys.executable, "-m", "aegisbench.pipeline.summaries", "ladders", str(report), str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text == json.dumps({"ladders": {"fog": {"monotone": True, "worst_miss": 0.25}}, "ok": True},
                              indent=1, sort_keys=True) + "\n"
