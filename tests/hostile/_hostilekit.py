"""Helpers of the hostile-input tests: a folder's files as bytes, and polling a writer
subprocess until it reaches a state (failing, never hanging, if it ends first)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def wait_for(cond, proc: subprocess.Popen, timeout: float = 60.0):
    """Poll ``cond()`` until it is truthy (its value is returned); fail if ``proc`` ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"the writer ended (rc {proc.returncode}) before reaching the awaited state")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("timed out waiting for the writer")
