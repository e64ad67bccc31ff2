"""Calibration: ladder checks, fitting, the YAML table and the CLI commands."""

from __future__ import annotations

import argparse
import dataclasses
import json

import cv2
import numpy as np
import pytest
import yaml

import aegisbench.corruptions as C
from aegisbench.builders.source_table import SourceRecord, write_source_table
from aegisbench.corruptions import commands
from aegisbench.corruptions import registry as R
from aegisbench.corruptions.samples import synthetic_scene
from aegisbench.errors import BadInput


@pytest.fixture(scope="module")
def sample() -> dict[str, np.ndarray]:
    return {f"img_{i}": synthetic_scene(160 + 16 * i, 200, key=("calib", i)) for i in range(3)}


def test_default_ladders_are_monotone_and_report_serialises(sample):
    report = C.calibrate(sample, measured_on={"sources": ["demo"]})
    assert report.monotone and report.failures() == []
    assert set(report.ladders) == set(C.names())
    assert report.sample_ids == tuple(sample)
    doc = json.loads(json.dumps(report.to_dict()))
    def keys(x):
        return set(x) | {k for v in x.values() if isinstance(v, dict) for k in keys(v)} if isinstance(x, dict) else set()
    assert "ok" not in keys(doc)  # never one ok for two verdicts
    assert doc["measured_on"] == {"frames": 3, "sources": ["demo"]} and doc["tolerance"] == 0.02
    assert doc["monotone"] is True and doc["cells"] == len(C.SEVERITIES) * len(C.names())
    lad = doc["corruptions"]["smoke_haze"]
    assert lad["monotone"] and lad["statistic"] == "rms_contrast" and lad["target_source"].startswith("HERIDAL")
    assert doc["corruptions"]["rain_streaks"]["target_source"].startswith("AegisBench's own")
    s1 = lad["severities"]["s1"]
    assert lad["severities"]["s1"]["measured"] > lad["severities"]["s3"]["measured"]
    # the difference in % and the per-cell verdict, derived again from the numbers
    assert s1["diff_pct"] == pytest.approx(100 * (s1["measured"] - s1["target"]) / s1["target"])
    assert s1["on_target"] == (abs(s1["diff_pct"]) <= 2.0)
    ons = [s["on_target"] for c in doc["corruptions"].values() for s in c["severities"].values()]
    assert doc["cells_on_target"] == sum(ons) and doc["on_target"] == all(ons)
    assert lad["on_target"] == all(s["on_target"] for s in lad["severities"].values())


def test_list_input_is_keyed_by_pixel_hash(sample):
    imgs = list(sample.values())
    a = C.calibrate(imgs, ["low_light"])
    b = C.calibrate(imgs[::-1], ["low_light"])
    assert set(a.sample_ids) == set(b.sample_ids)
    assert a.ladders["low_light"].means == pytest.approx(b.ladders["low_light"].means)


def test_non_monotone_ladder_is_reported(sample):
    table = C.default_table()
    s1, s3 = table.params("smoke_haze", 1), table.params("smoke_haze", 3)
    swapped = table.with_params("smoke_haze", 1, s3).with_params("smoke_haze", 3, s1)
    report = C.calibrate(sample, ["smoke_haze", "low_light"], table=swapped)
    assert not report.monotone
    assert not report.ladders["smoke_haze"].monotone and report.ladders["low_light"].monotone
    assert any(f.startswith("smoke_haze") for f in report.failures())


@pytest.mark.parametrize("name", ["smoke_haze", "low_light", "inundation"])
def test_fit_hits_targets_within_two_percent(name, sample):
    start = C.default_table().with_param(name, 2, C.get_spec(name).fit_param,
                                         getattr(C.default_table().params(name, 1),
                                                 C.get_spec(name).fit_param))
    report = C.calibrate(sample, [name], fit=True, table=start)
    lad = report.ladders[name]
    assert lad.fitted and all(lad.within_tolerance), lad.messages
    assert max(lad.rel_errors) <= 0.02
    assert report.monotone and report.on_target and lad.passed
    values = [lad.params[s][lad.fit_param] for s in (1, 2, 3)]
    assert values[0] < values[1] < values[2]
    # the fitted table reproduces the means
    again = C.calibrate(sample, [name], table=report.table)
    assert again.ladders[name].means == pytest.approx(lad.means)


def test_unreachable_target_is_reported():
    flat = {"flat": np.full((64, 64, 3), 128, np.uint8)}  # Sobel is 0 at every blur length
    report = C.calibrate(flat, ["motion_blur"], fit=True)
    lad = report.ladders["motion_blur"]
    assert not lad.passed and not report.on_target and not any(lad.within_tolerance)
    assert len(lad.messages) == 3
    for s, m in zip((1, 2, 3), lad.messages):
        assert m.startswith(f"s{s}: target mean_sobel") and "unreachable" in m
        assert "length stops at its upper bound 200" in m
    assert [f.split(":")[0] for f in report.failures()] == ["motion_blur s1", "motion_blur s2",
                                                         "motion_blur s3"]


def test_cli_fit_unreachable_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    from aegisbench.builders.source_table import SourceRecord, write_source_table
    from aegisbench.cli import main

    src = tmp_path / "flat.parquet"
    write_source_table([SourceRecord.from_image("flat", "test", "synthetic_sar",
                                                np.full((64, 64, 3), 128, np.uint8),
                                                boxes=[[2, 2, 10, 10]], labels=["person"])], src)
    out, metrics = tmp_path / "t.yaml", tmp_path / "m.json"
    rc = main(["calibrate", "--source-table", str(src), "--sample", "1", "--fit",
               "--corruption", "motion_blur", "--out", str(out), "--metrics", str(metrics),
               "--params", str(tmp_path / "none.yaml")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "motion_blur s3: target mean_sobel 0.0472 is unreachable" in err[0]
    assert "upper bound 200" in err[0]
    assert not out.exists() and not metrics.exists()


def _table_doc(tmp_path):
    path = C.save_table(tmp_path / "t.yaml", C.default_table(), benchmark_version="1.0")
    return path, yaml.safe_load(path.read_text())


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d["corruptions"]["dust_haze"]["severities"].pop("s2"),
     r"dust_haze.severities: missing severity s2"),
    (lambda d: d["corruptions"]["smoke_haze"]["targets"].update(s3=0.2),
     r"smoke_haze.targets.s3: rms_contrast target 0.2 does not fall from s2"),
    (lambda d: d["corruptions"]["low_light"]["severities"]["s3"].update(stops=12.5),
     r"low_light.s3.stops: must lie in \[0.0, 10.0\], got 12.5"),
    (lambda d: d["corruptions"]["water_glare"]["severities"]["s1"].update(glow=1.0),
     r"water_glare.s1.glow: unknown parameter"),
    (lambda d: d["corruptions"]["motion_blur"]["severities"]["s2"].update(length="long"),
     r"motion_blur.s2.length: must be a number"),
])
def test_bad_severity_table_names_corruption_severity_and_field(tmp_path, mutate, fragment, capsys):
    from aegisbench.cli import main

    path, doc = _table_doc(tmp_path)
    mutate(doc)
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInput, match=fragment):
        C.load_table(path)
    img = tmp_path / "g.png"
    src = tmp_path / "s.parquet"
    from aegisbench.builders.source_table import SourceRecord, write_source_table
    write_source_table([SourceRecord.from_image("a", "test", "synthetic_sar", synthetic_scene(40, 40, key=("t",)),
                                                boxes=[[2, 2, 10, 10]], labels=["person"])], src)
    rc = main(["preview", "--source-table", str(src), "--grid", "--image-id", "a", "--out", str(tmp_path),
               "--table", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and str(path) in err[0] and not (tmp_path / "s_grid.png").exists()


def test_targets_in_a_table_drive_the_fit(sample, tmp_path):
    path, doc = _table_doc(tmp_path)
    doc["corruptions"]["smoke_haze"]["targets"] = {"s1": 0.10, "s2": 0.07, "s3": 0.05}
    path.write_text(yaml.safe_dump(doc))
    table = C.load_table(path)
    assert table.targets_for("smoke_haze") == (0.10, 0.07, 0.05)
    report = C.calibrate(sample, ["smoke_haze"], fit=True, table=table)
    assert report.ladders["smoke_haze"].means == pytest.approx((0.10, 0.07, 0.05), rel=0.02)


@pytest.mark.parametrize("image, fragment", [
    (np.zeros((8, 8, 3), np.float32), "float32"),
    (np.zeros((8, 8), np.uint8), r"\(8, 8\)"),
    (np.zeros((8, 8, 4), np.uint8), r"\(8, 8, 4\)"),
])
def test_image_that_is_not_uint8_rgb_names_the_condition(image, fragment):
    with pytest.raises(BadInput, match=rf"condition dust_haze_s2: image: .*{fragment}"):
        C.apply_condition("dust_haze_s2", image, key=("v", "s", "i"))
    with pytest.raises(BadInput, match=rf"low_light: image: .*{fragment}"):
        C.low_light(image, np.random.default_rng(0), stops=1.0)


def test_registry_requires_declared_bounds_and_fit_bounds_inside_them():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class NoBounds:
        x: float = 1.0

    @dataclass(frozen=True)
    class Bounded:
        x: float = 1.0
        BOUNDS = {"x": (0.0, 2.0)}

    for params, bounds, fragment in [(NoBounds, (0.0, 1.0), "BOUNDS must declare"),
                                     (Bounded, (0.0, 3.0), r"leave the declared range")]:
        with pytest.raises(ValueError, match=fragment):
            R.corruption("tmp_unit", family="storm", params=params,
                         severities={s: params() for s in (1, 2, 3)}, statistic="rms_contrast",
                         targets=(0.3, 0.2, 0.1), direction=-1, fit_param="x", fit_bounds=bounds)
    for name in C.names():
        spec = C.get_spec(name)
        lo, hi = spec.params_type.BOUNDS[spec.fit_param]
        assert lo <= spec.fit_bounds[0] < spec.fit_bounds[1] <= hi


def test_save_and_load_table_round_trip(tmp_path, sample):
    report = C.calibrate(sample, ["low_light", "rain_streaks"], fit=True, benchmark_version="9.9.9")
    path = C.save_table(tmp_path / "calibration" / "severities.yaml", report)
    assert [p.name for p in path.parent.iterdir()] == ["severities.yaml"]  # atomic, no leftovers
    doc = yaml.safe_load(path.read_text())
    assert doc["format"] == 1 and doc["benchmark_version"] == "9.9.9"
    assert doc["calibration"]["sample_size"] == 3 and set(doc["corruptions"]) == {"low_light", "rain_streaks"}
    table = C.load_table(path, expected_version="9.9.9")
    for name in ("low_light", "rain_streaks"):
        for s in (1, 2, 3):
            assert table.params(name, s) == report.table.params(name, s)
    assert table.params("smoke_haze", 2) == C.default_table().params("smoke_haze", 2)  # omitted: default
    img = sample["img_0"]
    key = ("9.9.9", "x", "y")
    np.testing.assert_array_equal(C.apply_condition("low_light_s3", img, key=key, table=table),
                                  C.apply_condition("low_light_s3", img, key=key, table=report.table))


def test_full_default_table_round_trip(tmp_path):
    path = C.save_table(tmp_path / "t.yaml", C.default_table(), benchmark_version="1.0")
    table = C.load_table(path)
    assert table.benchmark_version == "1.0"
    for name in C.names():
        for s in (1, 2, 3):
            assert table.params(name, s) == C.default_table().params(name, s)


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d["corruptions"].update(fog={"severities": {}}), "fog"),
    (lambda d: d["corruptions"]["low_light"]["severities"]["s1"].update(stops=-3), "stops"),
    (lambda d: d["corruptions"]["low_light"]["severities"].update(s7={}), "s7"),
    (lambda d: d.update(format=99), "format"),
    (lambda d: d.pop("benchmark_version"), "benchmark_version"),
])
def test_load_table_rejects_bad_files(tmp_path, mutate, fragment):
    path = C.save_table(tmp_path / "t.yaml", C.default_table(), benchmark_version="1.0")
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInput, match=fragment):
        C.load_table(path)


def test_load_table_version_mismatch_and_missing(tmp_path):
    path = C.save_table(tmp_path / "t.yaml", C.default_table(), benchmark_version="1.0")
    with pytest.raises(BadInput, match="2.0"):
        C.load_table(path, expected_version="2.0")
    with pytest.raises(BadInput, match="not found"):
        C.load_table(tmp_path / "missing.yaml")


def test_select_sample_is_deterministic_and_order_free():
    ids = [f"img_{i:03d}" for i in range(50)]
    a = C.select_sample(ids, 10, "0.1.0")
    assert a == C.select_sample(ids[::-1], 10, "0.1.0") and len(set(a)) == 10
    assert a != C.select_sample(ids, 10, "0.2.0")
    with pytest.raises(BadInput, match="sample"):
        C.select_sample(ids, 0, "0.1.0")


def test_calibrate_rejects_bad_input(sample):
    with pytest.raises(BadInput, match="empty"):
        C.calibrate({})
    with pytest.raises(BadInput, match="fog"):
        C.calibrate(sample, ["fog"])
    with pytest.raises(BadInput, match="bad"):
        C.calibrate({"bad": np.zeros((8, 8), np.uint8)})


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aegisbench")
    commands.register(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.fixture(scope="module")
def source_table(tmp_path_factory):
    path = tmp_path_factory.mktemp("src") / "source.parquet"
    records = [SourceRecord.from_image(f"img_{i}", "test", "synthetic_sar",
                                       synthetic_scene(150, 180, key=("cli", i)),
                                       boxes=[[20, 30, 40, 60]], labels=["person"])
               for i in range(4)]
    write_source_table(records, path)
    return path


def test_cli_calibrate_writes_metrics_and_table(tmp_path, source_table):
    metrics, out = tmp_path / "metrics.json", tmp_path / "severities.yaml"
    args = _parser().parse_args(["calibrate", "--source-table", str(source_table), "--sample", "3",
                                 "--fit", "--corruption", "low_light", "--corruption", "smoke_haze",
                                 "--out", str(out), "--metrics", str(metrics)])
    assert args.func(args) == 0
    doc = json.loads(metrics.read_text())
    assert doc["monotone"] and doc["on_target"] and doc["sample_size"] == 3
    assert set(doc["corruptions"]) == {"low_light", "smoke_haze"}
    assert doc["measured_on"] == {"frames": 3, "source_table": "source.parquet", "sources": ["synthetic_sar"],
                                  "splits": "all"}
    assert all(i.startswith("synthetic_sar/") for i in doc["sample_ids"])
    table = C.load_table(out)
    assert table.params("low_light", 3).stops != C.default_table().params("low_light", 3).stops


def test_cli_calibrate_bad_input(tmp_path, source_table):
    args = _parser().parse_args(["calibrate", "--source-table", str(tmp_path / "nope.parquet"),
                                 "--sample", "3"])
    with pytest.raises(BadInput, match="nope.parquet"):
        args.func(args)
    args = _parser().parse_args(["calibrate", "--source-table", str(source_table), "--sample", "0"])
    with pytest.raises(BadInput, match="--sample"):
        args.func(args)


def test_cli_preview_grid(tmp_path, source_table, capsys):
    from aegisbench.cli import main

    assert main(["preview", "--source-table", str(source_table), "--grid", "--image-id", "img_1",
                 "--out", str(tmp_path), "--cell", "48"]) == 0
    from aegisbench.dataset.images import decode_image
    grid = decode_image((tmp_path / "source_grid.png").read_bytes())
    assert grid.shape[:2] == (22 + len(C.names()) * 50, 130 + 4 * 50)
    assert (tmp_path / "source.png").is_file()  # the contact sheet
    capsys.readouterr()
    assert main(["preview", "--source-table", str(source_table), "--grid", "--image-id", "img_99",
                 "--out", str(tmp_path)]) == 2
    assert "img_99" in capsys.readouterr().err


def test_preview_grid_layout(tmp_path, sample):
    from aegisbench.corruptions.preview import preview_grid

    img = sample["img_1"]
    grid = preview_grid(img, tmp_path / "g.png", cell=40, corruptions=["smoke_haze", "low_light"])
    assert (tmp_path / "g.png").exists()
    assert grid.shape == (22 + 2 * 42, 130 + 4 * 42, 3)
    with pytest.raises(BadInput, match="fog"):
        preview_grid(img, tmp_path / "h.png", corruptions=["fog"])
    assert not (tmp_path / "h.png").exists()


def test_params_dataclasses_are_frozen():
    p = C.default_table().params("smoke_haze", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.optical_depth = 3.0


# ---------------------------------------------------------------- the reference's definitions
def _reference_luma(img: np.ndarray) -> np.ndarray:
    """Luma as the reference release writes it, pixel by pixel in plain Python floats."""
    h, w, _ = img.shape
    return np.array([[0.299 * (int(img[y, x, 0]) / 255) + 0.587 * (int(img[y, x, 1]) / 255)
                      + 0.114 * (int(img[y, x, 2]) / 255) for x in range(w)] for y in range(h)])


def test_saturated_and_occluded_fractions_follow_the_reference_definitions():
    """saturated_fraction = share of luma > 0.94 and occluded_fraction = share of |d luma| > 0.08
    on unrounded luma of the [0, 1] image, derived again pixel by pixel; the former definitions
    (8-bit luma >= 250, mean |dRGB|) give other values on the same frames."""
    from aegisbench.corruptions.statistics import occluded_fraction, saturated_fraction

    rng = np.random.default_rng(7)
    for k in range(4):
        img = rng.integers(200, 256, (24, 31, 3), dtype=np.uint8)
        other = np.clip(img.astype(int) + rng.integers(-40, 41, img.shape), 0, 255).astype(np.uint8)
        want_sat = float(np.mean(_reference_luma(img) > 0.94))
        want_occ = float(np.mean(np.abs(_reference_luma(other) - _reference_luma(img)) > 0.08))
        assert saturated_fraction(img) == want_sat and occluded_fraction(other, img) == want_occ
    assert saturated_fraction(img) != float(np.mean(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY) >= 250))
    hue = np.zeros((1, 2, 3), np.uint8)
    hue[0, 0] = (255, 0, 0)  # luma 0.299
    swap = hue.copy()
    swap[0, 0] = (0, 130, 0)  # luma 0.299 too: a change of colour at equal luma
    assert occluded_fraction(swap, hue) == 0.0


def test_motion_blur_kernels_are_the_reference_release_s():
    lengths = [R.get_spec("motion_blur").severities[s].length for s in (1, 2, 3)]
    assert lengths == [9.0, 17.0, 25.0]  # px per 1000 px (reference configs/corruptions.yaml)
