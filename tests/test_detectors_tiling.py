"""Tiling, exact remapping across seams, seam merging and the Detector batching logic.

The "model" here is an oracle standing in for a network: for every window it returns
the known full-frame boxes visible in it, in window pixels (cut at the window edge
like a real detector would see them). Everything else is the real code path.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aegisbench.detectors.interface import Detector, DetectorOptions
from aegisbench.detectors.tiling import (TilingParams, cap_detections, cross_window_nms, cut_boxes, merge_windows,
                                         remap_boxes, tile_windows)
from aegisbench.predictions import Detections


class Oracle(Detector):
    """Returns the known boxes of a window's frame that intersect the window, clipped to it.
    Windows are views into their frame: the frame is ``window.base``, the origin its offset."""

    name = "oracle"

    def __init__(self, options, truth: dict):
        super().__init__(options)
        self.truth = truth  # id(frame) -> (boxes, scores)
        self.calls: list[tuple[int, tuple]] = []

    def predict_windows(self, windows):
        self.calls.append((len(windows), windows[0].shape))
        out = []
        for w in windows:
            frame = w.base
            boxes, scores = self.truth[id(frame)]
            off = w.__array_interface__["data"][0] - frame.__array_interface__["data"][0]
            y0, rem = divmod(off, frame.strides[0])
            x0 = rem // frame.strides[1]
            h, wd = w.shape[:2]
            c = np.stack([np.clip(boxes[:, 0] - x0, 0, wd), np.clip(boxes[:, 1] - y0, 0, h),
                          np.clip(boxes[:, 2] - x0, 0, wd), np.clip(boxes[:, 3] - y0, 0, h)], axis=1)
            ok = (c[:, 2] > c[:, 0]) & (c[:, 3] > c[:, 1])
            out.append(Detections(c[ok].astype(np.float32), scores[ok]))
        return out


def _frame(w, h):
    return np.zeros((h, w, 3), np.uint8)


def test_windows_seed_004_geometry():
    p = TilingParams()
    assert len(tile_windows(4000, 3000, p)) == 20  # HERIDAL: 20 tiles per frame
    assert tile_windows(640, 640, p).tolist() == [[0, 0, 640, 640]]  # SARD: whole frame
    assert tile_windows(1024, 1024, p).tolist() == [[0, 0, 1024, 1024]]
    w = tile_windows(2000, 800, p)  # wider than a tile, shorter than one: one row, full height
    assert w[:, 1].tolist() == [0] * len(w) and w[:, 3].tolist() == [800] * len(w)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(32, 1500), st.data())
def test_windows_cover_frame_with_overlap(width, height, tile, data):
    overlap = data.draw(st.integers(0, tile - 1))
    w = tile_windows(width, height, TilingParams(tile=tile, overlap=overlap))
    assert (w[:, 0] >= 0).all() and (w[:, 1] >= 0).all()
    assert (w[:, 2] <= width).all() and (w[:, 3] <= height).all()
    assert ((w[:, 2] - w[:, 0]) == min(tile, width)).all() and ((w[:, 3] - w[:, 1]) == min(tile, height)).all()
    cover = np.zeros((min(height, 60), min(width, 60)), bool)  # sampled coverage check
    ys = np.linspace(0, height - 1, cover.shape[0]).astype(int)
    xs = np.linspace(0, width - 1, cover.shape[1]).astype(int)
    for x0, y0, x1, y1 in w.tolist():
        cover |= ((ys[:, None] >= y0) & (ys[:, None] < y1)) & ((xs[None, :] >= x0) & (xs[None, :] < x1))
    assert cover.all()
    for axis in (0, 1):  # consecutive starts overlap by at least `overlap`
        starts = np.unique(w[:, axis])
        if len(starts) > 1:
            assert (np.diff(starts) <= tile - overlap).all()


def test_remap_is_exact_float32():
    local = np.array([[0.5, 1.25, 10.75, 20.0], [100.125, 3.0, 200.5, 9.0]], np.float32)
    out = remap_boxes(local, (976, 476, 2000, 1500))
    assert out.dtype == np.float32
    assert out.tolist() == [[976.5, 477.25, 986.75, 496.0], [1076.125, 479.0, 1176.5, 485.0]]


def _truth(rng, width, height, n, seams):
    """Boxes with float32 coordinates, many placed across the given seam coordinates."""
    boxes = []
    for k in range(n):
        bw, bh = rng.uniform(8, 90, 2)
        if k < len(seams):  # straddle a seam
            axis, pos = seams[k]
            c = [rng.uniform(bw, width - bw), rng.uniform(bh, height - bh)]
            c[axis] = pos
        else:
            c = [rng.uniform(bw, width - bw), rng.uniform(bh, height - bh)]
        boxes.append([c[0] - bw / 2, c[1] - bh / 2, c[0] + bw / 2, c[1] + bh / 2])
    b = np.round(np.asarray(boxes, np.float64) * 8) / 8  # exact in float32
    return b.astype(np.float32), rng.uniform(0.05, 1.0, n).astype(np.float32)


@pytest.mark.parametrize("size", [(2000, 1500), (4000, 3000), (1300, 1100)])
def test_tiled_predict_recovers_boxes_exactly_across_seams(size):
    width, height = size
    params = TilingParams()
    wins = tile_windows(width, height, params)
    edges = sorted({(0, int(v)) for v in wins[:, 0] if v > 0} | {(0, int(v)) for v in wins[:, 2] if v < width}
                   | {(1, int(v)) for v in wins[:, 1] if v > 0} | {(1, int(v)) for v in wins[:, 3] if v < height})
    rng = np.random.default_rng(7)
    boxes, scores = _truth(rng, width, height, 40, edges * 2)
    frame = _frame(width, height)
    det = Oracle(DetectorOptions(batch=4), {id(frame): (boxes, scores)})
    (out,) = det.predict([frame])
    got = sorted(map(tuple, np.column_stack([out.xyxy, out.score]).tolist()))
    want = sorted(map(tuple, np.column_stack([boxes, scores]).tolist()))
    assert got == want  # every object exactly once, bit-exact, no seam fragments left
    assert det.stats.windows == len(wins) and det.stats.frames == 1
    assert max(n for n, _ in det.calls) <= 4


def test_without_cut_dropping_fragments_survive_and_exact_duplicates_merge():
    width, height = 2000, 1500
    frame = _frame(width, height)
    wins = tile_windows(width, height, TilingParams())
    inside_overlap = np.array([[600.0, 100.0, 640.0, 160.0]], np.float32)  # seen whole by 2 windows
    across = np.array([[1000.0, 300.0, 1060.0, 360.0]], np.float32)  # cut by window 0's right edge (1024)
    truth = np.concatenate([inside_overlap, across])
    det = Oracle(DetectorOptions(tiling=TilingParams(drop_cut=False)), {id(frame): (truth, np.array([0.9, 0.8],
                                                                                                    np.float32))})
    (out,) = det.predict([frame])
    rows = sorted(out.xyxy.tolist())
    assert [600.0, 100.0, 640.0, 160.0] in rows and rows.count([600.0, 100.0, 640.0, 160.0]) == 1
    assert [1000.0, 300.0, 1060.0, 360.0] in rows
    assert [1000.0, 300.0, 1024.0, 360.0] in rows  # the fragment (IoU 0.4 < 0.5) is kept without drop_cut
    assert len(wins) == 6


def test_cross_window_nms_never_suppresses_within_a_window():
    b = np.array([[0, 0, 10, 10], [0, 0, 10, 10.5], [0, 0, 10, 10]], np.float32)
    s = np.array([0.9, 0.8, 0.7], np.float32)
    assert cross_window_nms(b, s, np.array([0, 0, 1]), 0.5).tolist() == [0, 1]
    assert cross_window_nms(b, s, np.array([0, 0, 0]), 0.5).tolist() == [0, 1, 2]


def test_cut_boxes_only_on_inner_edges_and_when_seen_elsewhere():
    wins = np.array([[0, 0, 100, 100], [60, 0, 160, 100]])
    boxes = np.array([[80, 10, 100, 20],  # touches window 0's inner right edge, inside window 1 -> cut
                      [0, 10, 20, 20],  # touches window 0's left edge = frame border -> kept
                      [140, 10, 160, 20]], np.float32)  # window 1's right edge = frame border -> kept
    assert cut_boxes(boxes, np.array([0, 0, 1]), wins, 160, 100, 2.0).tolist() == [True, False, False]
    wide = np.array([[10, 10, 100, 20]], np.float32)  # cut, but no other window holds it whole
    assert cut_boxes(wide, np.array([0]), wins, 160, 100, 2.0).tolist() == [False]


def test_merge_drops_boxes_degenerate_after_remap_and_exact_duplicates():
    tiny = np.nextafter(np.float32(0.25), np.float32(1))  # distinct in window pixels, equal at x = 3000
    d = Detections(np.array([[1, 1, 5, 5], [0.25, 2, tiny, 6], [1, 1, 5, 5]], np.float32), [0.5, 0.4, 0.5])
    out = merge_windows([d], np.array([[3000, 0, 3100, 100]]), 4000, 3000, TilingParams())
    assert out.xyxy.tolist() == [[3001, 1, 3005, 5]]


def test_cap_keeps_highest_scores_in_order():
    d = Detections(np.tile(np.array([[0, 0, 1, 1]], np.float32), (5, 1)) + np.arange(5)[:, None],
                   [0.1, 0.5, 0.3, 0.9, 0.2])
    assert cap_detections(d, 2).score.tolist() == pytest.approx([0.5, 0.9])


def test_frame_cap_and_batching_by_shape():
    frames = [_frame(300, 200), _frame(300, 200), _frame(700, 500), _frame(300, 200)]
    truths = {}
    for f in frames:
        n = 30
        x = np.arange(n, dtype=np.float32) * 9
        truths[id(f)] = (np.column_stack([x, np.full(n, 5), x + 8, np.full(n, 15)]).astype(np.float32),
                         np.linspace(0.1, 0.9, n).astype(np.float32))
    det = Oracle(DetectorOptions(batch=3, max_det_frame=10,
                                 tiling=TilingParams(tile=320, overlap=64)), truths)
    out = det.predict(frames)
    assert [len(d) for d in out] == [10, 10, 10, 10]
    assert all(d.score.min() >= np.float32(0.6) for d in out)
    assert det.stats.frames == 4 and det.stats.windows == 3 + 6  # 700x500 -> 3 x 2 tiles of 320
    # windows are grouped by shape across frames and cut into batches of at most 3
    assert sorted(det.calls) == sorted([(3, (200, 300, 3)), (3, (320, 320, 3)), (3, (320, 320, 3))])


def test_options_validate():
    from aegisbench.errors import BadInput
    with pytest.raises(BadInput):
        DetectorOptions(device="gpu")
    with pytest.raises(BadInput):
        DetectorOptions(batch=0)
    with pytest.raises(ValueError):
        TilingParams(tile=512, overlap=512)
    with pytest.raises(TypeError):
        TilingParams(tile=512.0)


# ------------------------------------------------------------------ background loader


def _shard(path, ids, corrupt=()):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aegisbench.dataset.images import encode_png
    rows = []
    for k, i in enumerate(ids):
        img = np.full((4 + k, 6, 3), k, np.uint8)
        rows.append({"image_id": i, "image": {"bytes": b"junk" if i in corrupt else encode_png(img), "path": None}})
    schema = pa.schema([("image_id", pa.string()), ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())]))])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, row_group_size=2)
    return path


def test_loader_batches_per_tag_in_order_and_skips(tmp_path):
    from aegisbench.detectors.loader import FrameLoader
    a = _shard(tmp_path / "a.parquet", [f"a{i}" for i in range(5)])
    b = _shard(tmp_path / "b.parquet", ["b0", "b1"])
    c = _shard(tmp_path / "c.parquet", ["c0", "c1", "c2"])
    batches = list(FrameLoader([("x", a), ("x", b), ("y", c)], batch=3, workers=2, skip={"c1"}))
    assert [(fb.tag, fb.image_ids) for fb in batches] == [
        ("x", ("a0", "a1", "a2")), ("x", ("a3", "a4", "b0")), ("x", ("b1",)), ("y", ("c0", "c2"))]
    assert batches[0].images[2].shape == (6, 6, 3) and batches[0].sizes[2] == (6, 6)
    assert int(batches[3].images[1][0, 0, 0]) == 2  # c2 decoded, c1 skipped


def test_loader_reraises_decode_errors_in_the_consumer(tmp_path):
    from aegisbench.detectors.loader import FrameLoader
    from aegisbench.errors import BadInput
    bad = _shard(tmp_path / "bad.parquet", ["ok0", "broken", "ok1"], corrupt={"broken"})
    with pytest.raises(BadInput, match="bad.parquet:broken"):
        list(FrameLoader([bad], batch=2))


def _raw_head(rng, b=3, nc=3, n=2500, size=1024.0):
    """A YOLO head's raw output ``(b, 4 + nc, n)``: clustered xywh boxes (many overlaps), class
    scores with ties, some below the floor."""
    import torch

    centre = rng.uniform(0, size, (b, 40, 2))[:, rng.integers(0, 40, n)] + rng.normal(0, 6, (b, n, 2))
    wh = rng.uniform(4, 120, (b, n, 2))
    scores = rng.choice(np.array([0.0005, 0.002, 0.3, 0.5, 0.9, 0.99], np.float32), (b, n, nc))
    scores = np.where(rng.random((b, n, nc)) < 0.5, scores, rng.random((b, n, nc))).astype(np.float32)
    raw = np.concatenate([centre, wh, scores], axis=2).astype(np.float32).transpose(0, 2, 1)
    return torch.from_numpy(np.ascontiguousarray(raw))


@pytest.mark.parametrize("classes,agnostic,max_nms", [(None, False, 30000), ([0, 2], True, 30000),
                                                      ([1], False, 30000), (None, True, 700)])
def test_raw_nms_equals_ultralytics_nms_without_time_limit(classes, agnostic, max_nms):
    """Our NMS (no wall-clock limit) gives Ultralytics' ``non_max_suppression`` output bit for
    bit on the same raw tensor, its time limit disabled; with the limit as the predictor sets
    it and a slow clock, Ultralytics leaves later images empty, ours never does."""
    import torch
    import torchvision  # noqa: F401 - Ultralytics' NMS uses torchvision's kernel once it is imported
    from ultralytics.utils import nms

    from aegisbench.detectors.ultralytics_adapter import raw_nms

    raw = _raw_head(np.random.default_rng(7))
    kw = dict(classes=classes, agnostic=agnostic, max_det=300, max_nms=max_nms)
    theirs = nms.non_max_suppression(raw.clone(), 0.001, 0.6, max_time_img=float("inf"), **kw)
    ours = raw_nms(raw.clone(), 0.001, 0.6, **kw)
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs):
        assert len(a) > 0 and torch.equal(a, b)
    if classes is None and not agnostic:
        clock = iter(range(0, 1000, 10))  # every time.time() call 10 s later: the limit fires after image 0
        real = nms.time.time
        nms.time.time = lambda: float(next(clock))
        try:
            limited = nms.non_max_suppression(raw.clone(), 0.001, 0.6, **kw)
        finally:
            nms.time.time = real
        assert len(limited[1]) == 0 and len(ours[1]) > 0
