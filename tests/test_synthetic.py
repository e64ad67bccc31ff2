"""The embedded synthetic sources (SAR stills, smoke sequences) and the contact sheet."""

from __future__ import annotations

from collections import defaultdict

import cv2
import numpy as np
import pytest

from aegisbench.builders.preview import CAPTION_PX, contact_sheet
from aegisbench.builders.source_table import SourceRecord
from aegisbench.dataset.images import decode_image
from aegisbench.builders.synthetic_sar import (SyntheticSarConfig, every, generate_synthetic_sar,
                                               render_sar_scene)
from aegisbench.builders.synthetic_smoke import (SyntheticSmokeConfig, generate_synthetic_smoke,
                                                 render_smoke_frame)
from aegisbench.errors import BadInput
from aegisbench.hashing import pixel_sha256

V = "0.1.0"
SAR_SMALL = SyntheticSarConfig(n_train=3, n_val=2, n_test=5, small_size=(320, 320),
                               large_size=(640, 480), images_per_flight=2,
                               person_size_px=(16, 64))
SMOKE_SMALL = SyntheticSmokeConfig(n_train=1, n_val=1, n_test=2, frames_per_sequence=4)
SMOKE_SEQ = SyntheticSmokeConfig(n_train=0, n_val=0, n_test=6, frames_per_sequence=9)


@pytest.fixture(scope="module")
def sar_records():
    return list(generate_synthetic_sar(SAR_SMALL, V))


@pytest.fixture(scope="module")
def smoke_records():
    return list(generate_synthetic_smoke(SMOKE_SEQ, V))


def _edges_touched(mask: np.ndarray, box) -> bool:
    """Does the mask reach all four sides of the (integer) box?"""
    x1, y1, x2, y2 = (int(v) for v in box)
    sub = mask[y1:y2, x1:x2]
    return bool(sub[0].any() and sub[-1].any() and sub[:, 0].any() and sub[:, -1].any())


def _groups_in_one_split(records) -> None:
    splits = defaultdict(set)
    for r in records:
        splits[r.group_id].add(r.split)
    assert all(len(s) == 1 for s in splits.values()), splits


# ---------------------------------------------------------------- SAR

def test_sar_is_deterministic_and_versioned(sar_records):
    again = list(generate_synthetic_sar(SAR_SMALL, V))
    assert [(r.image_id, r.sha256, r.png) for r in again] == \
        [(r.image_id, r.sha256, r.png) for r in sar_records]
    for r in sar_records:
        assert pixel_sha256(decode_image(r.png)) == r.sha256
        assert np.array_equal(r.boxes, next(a for a in again if a.image_id == r.image_id).boxes)
    other = list(generate_synthetic_sar(SAR_SMALL, "0.1.1"))
    assert all(a.sha256 != b.sha256 for a, b in zip(other, sar_records))


def test_sar_single_image_regenerates_alone(sar_records):
    rec = next(r for r in sar_records if r.image_id == "synthetic_sar_test_00003")
    scene = render_sar_scene(SAR_SMALL, V, "test", 3)
    assert pixel_sha256(scene.image) == rec.sha256
    assert np.array_equal(scene.boxes, rec.boxes)


def test_sar_counts_splits_sizes_and_flights(sar_records):
    by_split = defaultdict(list)
    for r in sar_records:
        by_split[r.split].append(r)
        assert r.source == "synthetic_sar" and r.image_id.startswith(f"synthetic_sar_{r.split}_")
        assert set(r.labels) <= {"person"} and r.frame_index == -1
    assert {k: len(v) for k, v in by_split.items()} == {"train": 3, "val": 2, "test": 5}
    assert len({r.image_id for r in sar_records}) == len(sar_records)
    sizes = {(r.width, r.height) for r in by_split["test"]}
    assert sizes == {(320, 320), (640, 480)}
    assert {(r.width, r.height) for r in by_split["train"]} == {(320, 320)}  # train stays small
    assert [r.width == 640 for r in by_split["test"]] == [every(i, 0.2) for i in range(5)]
    _groups_in_one_split(sar_records)
    flights = [r.group_id for r in by_split["test"]]
    assert flights == sorted(flights) and len(set(flights)) == 3  # 2 images per flight
    assert sum(len(r.boxes) for r in sar_records) >= len(sar_records)


def test_sar_boxes_tight_inside_frame_and_never_in_water():
    cfg = SyntheticSarConfig(n_train=0, n_val=0, n_test=40, small_size=(256, 256),
                             large_size=(384, 288), images_per_flight=1,
                             person_size_px=(16, 48))
    seen_water = seen_people = 0
    for i in range(cfg.n_test):
        sc = render_sar_scene(cfg, V, "test", i, debug=True)
        h, w = sc.image.shape[:2]
        person = sc.figure_alpha >= 0.2
        covered = np.zeros((h, w), bool)
        for box in sc.boxes:
            x1, y1, x2, y2 = box
            assert 0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h
            assert _edges_touched(person, box)  # tight: the figure reaches every side
            region = (slice(int(y1), int(y2)), slice(int(x1), int(x2)))
            covered[region] = True
            diff = np.abs(sc.image[region].astype(int) - sc.plate[region].astype(int)).sum(-1)
            assert diff[person[region]].mean() > 20  # the figure really is drawn there
        assert not (person & ~covered).any()  # no figure pixel outside every box
        assert not ((sc.figure_alpha > 0.01) & sc.water).any()
        seen_water += bool(sc.water.any() and len(sc.boxes))
        seen_people += len(sc.boxes)
    assert seen_water >= 3 and seen_people >= 80


def test_sar_box_sizes_mostly_in_configured_range():
    cfg = SyntheticSarConfig(n_train=30, n_val=0, n_test=0, images_per_flight=2)  # 640x640
    sides = []
    for rec in generate_synthetic_sar(cfg, V):
        b = rec.boxes
        sides += np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]).tolist()
    sides = np.array(sides)
    assert len(sides) >= 60
    assert np.mean((sides >= 16) & (sides <= 96)) >= 0.9
    assert 24 <= np.median(sides) <= 70


def test_sar_config_validation():
    cfg = SyntheticSarConfig(small_size=[512, 384])  # YAML lists become tuples
    assert cfg.small_size == (512, 384)
    for bad in ({"n_train": -1}, {"n_test": 2.5}, {"small_size": (100, 50)},
                {"person_size_px": (40, 20)}, {"large_fraction": 1.5}, {"min_persons": 5,
                "max_persons": 2}, {"target_label": ""}, {"person_size_px": (16, 600)}):
        with pytest.raises(BadInput):
            SyntheticSarConfig(**bad)
    with pytest.raises(BadInput):
        render_sar_scene(SAR_SMALL, V, "dev", 0)


# ---------------------------------------------------------------- smoke

def test_smoke_is_deterministic_and_versioned():
    a = list(generate_synthetic_smoke(SMOKE_SMALL, V))
    b = list(generate_synthetic_smoke(SMOKE_SMALL, V))
    assert [(r.image_id, r.sha256, r.png) for r in a] == [(r.image_id, r.sha256, r.png) for r in b]
    c = list(generate_synthetic_smoke(SMOKE_SMALL, "0.2.0"))
    assert all(x.sha256 != y.sha256 for x, y in zip(a, c))
    assert len(a) == 4 * 4 and {r.split for r in a} == {"train", "val", "test"}
    alone = render_smoke_frame(SMOKE_SMALL, V, "test", 1, 3)
    rec = next(r for r in a if r.image_id == alone.image_id)
    assert pixel_sha256(alone.image) == rec.sha256 and np.array_equal(alone.boxes, rec.boxes)


def test_smoke_sequences_and_fire_start_semantics(smoke_records):
    seqs = defaultdict(list)
    for r in smoke_records:
        seqs[r.group_id].append(r)
    assert len(seqs) == 6
    _groups_in_one_split(smoke_records)
    starts = []
    for frames in seqs.values():
        assert [r.frame_index for r in frames] == list(range(9))
        assert [r.time_s for r in frames] == [30.0 * k for k in range(9)]
        fs = {r.fire_start_frame for r in frames}
        assert len(fs) == 1  # set identically on every frame
        start = fs.pop()
        starts.append(start)
        areas = [float(np.prod(r.boxes[0, 2:] - r.boxes[0, :2])) if len(r.boxes) else 0.0
                 for r in frames]
        assert all(set(r.labels) <= {"smoke"} and len(r.boxes) <= 1 for r in frames)
        if start is None:
            assert not any(areas)
            continue
        assert not any(areas[:start])  # nothing before the fire starts
        later = areas[start:]
        assert sum(a > 0 for a in later) >= len(later) // 2  # it becomes visible
        visible = [a for a in later if a > 0]
        assert visible[-1] > visible[0]
        assert np.mean(np.diff(visible)) > 0  # the plume grows on average
    assert starts.count(None) == 1 and starts.count(0) == 1  # 1/6 negative, 1/6 from start
    assert all(s is None or 0 <= s < 9 for s in starts)
    assert sum(s is not None and s > 0 for s in starts) == 4


def test_smoke_from_start_visible_at_frame_zero(smoke_records):
    first = [r for r in smoke_records if r.fire_start_frame == 0 and r.frame_index == 0]
    assert first and all(len(r.boxes) == 1 for r in first)


def test_smoke_boxes_are_tight_around_the_visible_plume(smoke_records):
    checked = 0
    for r in smoke_records:
        if not len(r.boxes) or r.frame_index % 3:
            continue
        seq = int(r.group_id.rsplit("_", 1)[1])
        fr = render_smoke_frame(SMOKE_SEQ, V, r.split, seq, r.frame_index, debug=True)
        assert pixel_sha256(fr.image) == r.sha256
        plume = fr.alpha >= 0.06
        box = fr.boxes[0]
        assert _edges_touched(plume, box)
        x1, y1, x2, y2 = (int(v) for v in box)
        outside = plume.copy()
        outside[y1:y2, x1:x2] = False
        assert not outside.any()
        diff = np.abs(fr.image.astype(int) - fr.plate.astype(int)).sum(-1)
        assert diff[fr.alpha >= 0.2].mean() > 10  # smoke visibly changes the pixels
        assert not diff[fr.alpha == 0].any()  # and nothing changes where there is none
        checked += 1
    assert checked >= 5


def test_smoke_config_validation():
    for bad in ({"frames_per_sequence": 0}, {"frame_interval_s": 0}, {"size": (64, 64)},
                {"negative_fraction": 0.7, "from_start_fraction": 0.5}, {"n_val": "3"}):
        with pytest.raises(BadInput):
            SyntheticSmokeConfig(**bad)
    with pytest.raises(BadInput):
        render_smoke_frame(SMOKE_SMALL, V, "test", 0, 99)


# ---------------------------------------------------------------- contact sheet

def test_contact_sheet_writes_a_png_of_the_expected_size(tmp_path, sar_records):
    recs = sar_records[4:10]  # val (320x320) and test, including one 640x480 frame
    assert {r.width for r in recs} == {320, 640}
    out = contact_sheet(recs, tmp_path / "sheets" / "sar.png", columns=4, thumb=96)
    img = cv2.imread(str(out), cv2.IMREAD_COLOR)
    assert out == tmp_path / "sheets" / "sar.png"
    assert img.shape == (2 * (96 + CAPTION_PX), 4 * 96, 3)
    assert not list(out.parent.glob(".*.tmp"))  # atomic: no temporary left behind
    boxed = contact_sheet(recs[:1], tmp_path / "a.png", thumb=96)
    plain = contact_sheet(recs[:1], tmp_path / "b.png", thumb=96, draw_boxes=False)
    a, b = cv2.imread(str(boxed)), cv2.imread(str(plain))
    assert a.shape == b.shape == (96 + CAPTION_PX, 96, 3)
    assert len(recs[0].boxes) == 0 or (a != b).any()
    capped = contact_sheet(sar_records, tmp_path / "c.png", columns=2, thumb=64, max_images=3)
    assert cv2.imread(str(capped)).shape == (2 * (64 + CAPTION_PX), 2 * 64, 3)


def test_contact_sheet_rejects_empty_input(tmp_path):
    with pytest.raises(BadInput):
        contact_sheet([], tmp_path / "x.png")
    rec = SourceRecord.from_image("a", "test", "demo", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(BadInput):
        contact_sheet([rec], tmp_path / "x.png", thumb=0)
    assert not (tmp_path / "x.png").exists()


def test_smoke_plume_below_the_frame_is_invisible_not_an_error():
    """A plume whose source sits below the lower edge has nothing to draw yet."""
    from aegisbench.builders.synthetic_smoke import SyntheticSmokeConfig, generate_synthetic_smoke

    cfg = SyntheticSmokeConfig(n_train=1, n_val=1, n_test=1, frames_per_sequence=3, size=[320, 240])
    records = list(generate_synthetic_smoke(cfg, "0.4.0"))  # this key puts one source off-frame
    assert len(records) == 9
    for r in records:
        assert r.image().shape == (240, 320, 3)
