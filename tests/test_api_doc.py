"""docs/API.md runs: every example of the Python API page, in order, as one doctest in an empty
folder (a tiny dataset built, loaded, verified; a submission written, validated, evaluated; its
results read), so the page cannot drift from the library."""

from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "API.md"


def test_the_api_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 40 and result.failed == 0, result
    assert (tmp_path / "demo" / "results" / "oracle_by_day" / "metrics.parquet").is_file()
