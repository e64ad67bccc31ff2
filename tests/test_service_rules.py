"""The rules of a hosted leaderboard as ``params.yaml`` declares them (issue 30 item 5), and the
readers the server shares with the CLI: one line naming the field for every bad value; phases
never overlap; a YAML key given twice is refused wherever YAML is read."""

from __future__ import annotations

import datetime as dt

import pytest

from aegisbench.errors import BadInput
from aegisbench.readers import load_yaml
from aegisbench.service.rules import HostingRules, Phase, day_window, parse_instant

UTC = dt.timezone.utc


@pytest.mark.parametrize("raw, where, why", [
    ({"phases": []}, "hosting.phases", "at least one phase"),
    ({"phases": [{"name": "A b"}]}, "hosting.phases[0].name", "lowercase"),
    ({"phases": [{"name": "a", "daily_limit": 0}]}, "hosting.phases[0].daily_limit", "must lie in"),
    ({"phases": [{"name": "a", "closes": "soon"}]}, "hosting.phases[0].closes", "ISO 8601"),
    ({"phases": [{"name": "a", "opens": "2027-01-02", "closes": "2027-01-01"}]}, "hosting.phases[0].closes",
     "must be after opens"),
    ({"phases": [{"name": "a", "closes": "2027-02-01"}, {"name": "b", "opens": "2027-01-15"}]}, "hosting.phases",
     "overlap"),
    ({"phases": [{"name": "a", "closes": "2027-01-01"}, {"name": "a", "opens": "2030-01-01"}]}, "hosting.phases",
     "names must differ"),
    ({"phases": [{"name": "a"}, {"name": "b", "opens": "2030-01-01"}]}, "hosting.phases", "overlap"),
    ({"phases": [{"name": "a", "typo": 1}]}, "hosting.phases[0]", "unknown key(s) ['typo']"),
    ({"max_upload_bytes": 10}, "hosting.max_upload_bytes", "must lie in"),
    ({"lease_seconds": 0.5}, "hosting.lease_seconds", "must lie in"),
    ({"versioning": "git"}, "hosting.versioning", "must be one of"),
    ({"references": ["../x"]}, "hosting.references[0]", "submission id"),
    ({"quota": 3}, "hosting", "unknown key(s) ['quota']"),
])
def test_bad_rules_name_their_field(raw, where, why):
    with pytest.raises(BadInput) as exc:
        HostingRules.from_dict(raw)
    assert exc.value.where == f"params.yaml: {where}" and why in exc.value.message


def test_the_phase_open_now_and_why_none_is():
    rules = HostingRules.from_dict({"phases": [
        {"name": "dev", "opens": "2027-01-01T00:00:00Z", "closes": "2027-02-01T00:00:00Z", "daily_limit": 5},
        {"name": "test", "opens": "2027-02-01T00:00:00Z", "closes": "2027-03-01", "daily_limit": 1}]})
    at = lambda s: parse_instant(s, "t")  # noqa: E731
    assert rules.phase_at(at("2026-12-31T23:59:59Z")) is None
    assert rules.closed_reason(at("2026-12-31T23:59:59Z")) == (
        "submissions are closed: phase 'dev' opens at 2027-01-01T00:00:00+00:00")
    assert rules.phase_at(at("2027-01-31T23:59:59Z")).name == "dev"
    assert rules.phase_at(at("2027-02-01T00:00:00Z")).name == "test"  # closes is exclusive, opens inclusive
    assert rules.phase_at(at("2027-03-01T00:00:00Z")) is None
    assert rules.closed_reason(at("2027-03-02T00:00:00Z")).endswith("phase 'test' closed at 2027-03-01T00:00:00+00:00")
    assert parse_instant("2027-01-01T01:00:00+01:00", "t") == dt.datetime(2027, 1, 1, tzinfo=UTC)


def test_the_daily_window_is_the_utc_day():
    start, end = day_window(dt.datetime(2027, 5, 3, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5))))
    assert (start.isoformat(), end.isoformat()) == ("2027-05-04T00:00:00+00:00", "2027-05-05T00:00:00+00:00")


def test_defaults_take_uploads_always():
    rules = HostingRules.from_dict(None)
    assert rules.phases == (Phase("open"),) and rules.phase_at(dt.datetime.now(UTC)).name == "open"


@pytest.mark.parametrize("text, line", [
    ("name: a\nteam: b\nname: c\n", 3),
    ("detector:\n  weights: a\n  weights: b\n", 3),
    ("runs:\n  - {a: 1, b: 2, a: 3}\n", 2),
])
def test_a_yaml_key_given_twice_is_refused(text, line):
    with pytest.raises(BadInput) as exc:
        load_yaml(text, "submission.yaml")
    assert exc.value.message.startswith(f"line {line}: key ") and "given twice in one mapping" in exc.value.message


def test_the_same_key_in_different_mappings_is_fine():
    assert load_yaml("a: {x: 1}\nb: {x: 2}\nc: [{x: 1}, {x: 2}]\nd: &r {x: 3}\ne: *r\n", "f") == {
        "a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}], "d": {"x": 3}, "e": {"x": 3}}


def test_first_lookups_of_the_tracks_from_many_threads_all_succeed():
    """The server validates uploads on threads: the first ``get_track`` calls of a fresh process
    race to load the track plug-ins, and none may see an empty registry."""
    code = ("import threading, aegisbench\n"
            "from aegisbench.evaluation.tracks import get_track\n"
            "b = threading.Barrier(16); out = []\n"
            "def go():\n"
            "    b.wait()\n"
            "    try: out.append(get_track('sar').name)\n"
            "    except KeyError as e: out.append(repr(e))\n"
            "ts = [threading.Thread(target=go) for _ in range(16)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print(sorted(set(out)))\n")
    import subprocess
    import sys
    for _ in range(3):
        done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
        assert done.stdout.strip() == "['sar']", done.stdout + done.stderr[-2000:]
