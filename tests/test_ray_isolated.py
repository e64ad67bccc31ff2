"""The suite's Ray-driver tests (marker ``ray_driver``: tests/test_ray.py, tests/test_ray_cluster.py
and the WARP sweep on Ray) in one child pytest.

A Ray process that dies (a raylet or the GCS) ends its driver at once with exit status 1 and no
report; in the suite's own process that would end the whole run with no summary (CI, stop 39:
the output stopped at 77 %, exit 1). In a child, the same death is this test's failure, with the
tail of Ray's own logs. A child that died without pytest's report is run once more (and the first
death is reported as a warning with its logs); a child whose tests failed is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 2400


def _ray_logs(since: float, lines: int = 25) -> str:
    """The last lines of every Ray log written since ``since`` (raylet, GCS, workers' errors, and
    the driver's core log, which says why a driver left with exit status 1)."""
    out = []
    for base in (Path("/tmp/ray"), *Path("/tmp").glob("rc*")):
        # the driver's own log last: the tail below keeps it
        logs = sorted(base.glob("session_*/logs/*"),
                      key=lambda f: (f.parent, "python-core-driver" in f.name, f.name))
        for log in logs:
            try:
                if log.is_file() and log.stat().st_mtime >= since and log.stat().st_size and (
                        log.suffix == ".err" or log.name.startswith(("raylet", "gcs_server", "python-core-driver"))):
                    tail = log.read_text(errors="replace").splitlines()[-lines:]
                    out.append(f"--- {log}\n" + "\n".join(tail))
            except OSError:
                continue
    return "\n".join(out[-16:]) or "(no Ray log written)"


def _child(nodeids: list[str], junit: Path) -> tuple[subprocess.CompletedProcess, bool]:
    """Run ``nodeids`` in a child pytest; True when it wrote its report (did not die)."""
    junit.unlink(missing_ok=True)
    # -v and unbuffered: a child that dies has named the test it died in
    done = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
                           f"--junitxml={junit}", *nodeids], cwd=ROOT, capture_output=True,
                          text=True, timeout=LIMIT_S, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return done, junit.exists()


def test_ray_driver_tests_in_a_child_pytest(ray_driver_tests, tmp_path):
    nodeids = ray_driver_tests
    if not nodeids:
        pytest.skip("no ray_driver test in this session")
    pytest.importorskip("ray")
    junit = tmp_path / "ray.xml"
    start = time.time()
    done, reported = _child(nodeids, junit)
    if not reported:  # a Ray process died and took the driver with it: once more, and say so
        first = f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}\n{_ray_logs(start)}"
        warnings.warn(f"the Ray child pytest died without a report; running it again. {first}")
        start = time.time()
        done, reported = _child(nodeids, junit)
    tail = f"{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
    assert reported, f"the Ray child pytest died twice (exit {done.returncode}):\n{tail}\n{_ray_logs(start)}"
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert done.returncode == 0, f"Ray-driver tests failed in the child pytest:\n{tail}"
    assert int(suite.get("tests")) == len(nodeids), tail
    if int(suite.get("skipped")):  # shown here: the child's skips are not in this session's summary
        skips = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
        warnings.warn(f"{suite.get('skipped')} Ray-driver test(s) skipped in the child: {skips}")
