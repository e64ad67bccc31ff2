"""Helpers of the hostile-input tests: a folder's files as bytes, and polling a writer
subprocess until it reaches a state (failing, never hanging, if it ends first)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def wait_for(cond, proc: subprocess.Popen | None, timeout: float = 60.0):
    """Poll ``cond()`` until it is truthy (its value is returned); fail if ``proc`` (a writer
    process, or None for a thread of this one) ends first or the time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the writer ended (rc {proc.returncode}) before reaching the awaited state")
        time.sleep(0.02)
    if proc is not None:
        proc.kill()
    pytest.fail(f"timed out after {timeout:g} s waiting for the awaited state")
