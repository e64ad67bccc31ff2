"""The one reader of the calibration report (aegisbench/leaderboard/calibration_report.py): a report
the calibrate command writes reads back whole; every malformed one is refused with one line naming
the file and the field, the same line through the ladders stage and through the gallery."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from aegisbench.corruptions.calibrate import calibrate
from aegisbench.errors import BadInput
from aegisbench.leaderboard.calibration_report import (CalibrationReportView, parse_calibration_report,
                                                       read_calibration_report)
from aegisbench.leaderboard.gallery import describe, gallery_view
from aegisbench.pipeline.summaries import ladder_summary, main


@pytest.fixture(scope="module")
def written() -> dict:
    """A report as the calibrate command writes it (to_dict through JSON)."""
    rng = np.random.default_rng(0)
    imgs = {f"f{i}": (rng.random((48, 48, 3)) * 255).astype(np.uint8) for i in range(2)}
    rep = calibrate(imgs, ["low_light", "dust_haze"], measured_on={"sources": ["synthetic_sar"]})
    return json.loads(json.dumps(rep.to_dict(), indent=2, sort_keys=True))


def test_a_written_report_reads_back_whole(written, tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(written))
    view = read_calibration_report(path)
    assert isinstance(view, CalibrationReportView) and view.tolerance == written["tolerance"]
    assert view.fit is False and view.measured_on == {"frames": 2, "sources": ["synthetic_sar"]}
    for name, lad in written["corruptions"].items():
        got = view.ladders[name]
        assert (got.monotone, got.on_target, got.target_source) == (lad["monotone"], lad["on_target"],
                                                                     lad["target_source"])
        for key, cell in lad["severities"].items():
            c = got.severities[key]
            assert (c.measured, c.diff_pct, c.on_target, c.target) == (
                cell["measured"], cell["diff_pct"], cell["on_target"], cell["target"])
    # both consumers take the same view (the summary of a dict is the summary of its view)
    assert ladder_summary(written) == ladder_summary(view)
    d = describe("low_light", view)
    assert d["measured_on"] == "synthetic_sar, 2 frames" and d["verdicts"].startswith("monotone: ")


def _broken(written, path, value):
    doc = copy.deepcopy(written)
    *parents, last = path
    node = doc
    for key in parents:
        node = node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return doc


CASES = [
    (("corruptions",), KeyError, "'corruptions' is missing"),
    (("corruptions",), [], "'corruptions' is not an object (list)"),
    (("tolerance",), "2%", "'tolerance' is not a number (str)"),
    (("tolerance",), True, "'tolerance' is not a number (bool)"),
    (("fit",), "no", "'fit' is not true or false (str)"),
    (("measured_on",), ["x"], "'measured_on' is not an object (list)"),
    (("corruptions", "dust_haze"), 3, "'corruptions.dust_haze' is not an object"),
    (("corruptions", "dust_haze", "monotone"), KeyError, "'corruptions.dust_haze.monotone' is missing"),
    (("corruptions", "dust_haze", "on_target"), 1, "'corruptions.dust_haze.on_target' is not true or false (int)"),
    (("corruptions", "dust_haze", "severities"), None, "'corruptions.dust_haze.severities' is not an object (NoneType)"),
    (("corruptions", "dust_haze", "target_source"), 7, "'corruptions.dust_haze.target_source' is not a string (int)"),
    (("corruptions", "dust_haze", "severities", "s2"), "x", "'corruptions.dust_haze.severities.s2' is not an object"),
    (("corruptions", "dust_haze", "severities", "s2", "measured"), KeyError,
     "'corruptions.dust_haze.severities.s2.measured' is missing"),
    (("corruptions", "dust_haze", "severities", "s2", "diff_pct"), "5", "'corruptions.dust_haze.severities.s2.diff_pct' is not a number"),
    (("corruptions", "dust_haze", "severities", "s3", "on_target"), "yes",
     "'corruptions.dust_haze.severities.s3.on_target' is not true or false"),
]


@pytest.mark.parametrize("path,value,field", CASES, ids=[".".join(c[0]) + f"={c[1]!r}" for c in CASES])
def test_a_malformed_report_is_one_line_naming_file_and_field(written, tmp_path, capsys, path, value, field):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(_broken(written, path, value)))
    with pytest.raises(BadInput) as exc:
        read_calibration_report(report)
    line = str(exc.value)
    assert line.startswith(f"{report}: not a calibration report of this version: ") and field in line
    assert isinstance(exc.value, ValueError) and "\n" not in line
    # the ladders stage: the same line, exit 2, nothing written
    assert main(["ladders", str(report), str(tmp_path / "out.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {line}"] and not (tmp_path / "out.json").exists()
    # the gallery: the same refusal before any thumbnail is cut
    preview = tmp_path / "preview"
    preview.mkdir()
    (preview / "synthetic_sar_grid.png").write_bytes(b"")
    with pytest.raises(BadInput) as gal:
        gallery_view(preview, tmp_path / "site", {}, [], calibration=report)
    assert str(gal.value) == line and not (tmp_path / "site").exists()


def test_not_an_object_at_all():
    with pytest.raises(BadInput, match="^calibration report: not a calibration report .*list"):
        parse_calibration_report([1, 2])
