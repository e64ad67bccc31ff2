"""read_source_rows returns exactly the rows of a whole-table read, across row groups, and holds no
reader of the table open while the caller works on a record."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from aegisbench.builders.source_table import SourceRecord, read_source_rows, write_source_table
from aegisbench.hashing import rng_for
from aegisbench.memory import release_arrow_memory


def _records():
    rng = rng_for("test", "source_rows")
    for i in range(23):
        h, w = (8, 12) if i % 5 else (40, 30)  # a larger frame every 5th row, as the synthetic sources
        split = "val" if i % 3 == 0 else "test"
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        yield SourceRecord.from_image(f"img_{i}", split, "demo", img, boxes=[[1, 1, 4, 5]], labels=["person"],
                                      group_id=f"g{i // 4}", frame_index=i, meta=(("k", str(i)),))


def test_rows_match_a_whole_table_read(tmp_path):
    path = tmp_path / "demo.parquet"
    assert write_source_table(_records(), path, rows_per_group=5) == 23
    assert pq.ParquetFile(path).num_row_groups == 5
    table = pq.read_table(path).to_pylist()
    for split in ("val", "test"):
        rows = [r for r in table if r["split"] == split]
        for start, stop in [(0, 1), (0, 4), (3, 9), (4, 5), (len(rows) - 1, len(rows)), (0, 100), (7, 7)]:
            got = list(read_source_rows(path, split, start, stop))
            want = [SourceRecord.from_row(r) for r in rows[start:stop]]
            assert [(g.image_id, g.png, g.sha256, g.meta, g.boxes.tobytes()) for g in got] == \
                   [(e.image_id, e.png, e.sha256, e.meta, e.boxes.tobytes()) for e in want], (split, start, stop)
            assert [g.image().shape for g in got] == [(e.height, e.width, 3) for e in want]
    release_arrow_memory()  # callable on any platform (a no-op heap trim off glibc)


def _open_paths() -> set[str]:
    """The files this process holds open (Linux: /proc/self/fd)."""
    fds = Path("/proc/self/fd")
    out = set()
    for fd in fds.iterdir():
        try:
            out.add(os.path.realpath(fd))
        except OSError:  # closed while listed
            pass
    return out


def test_the_table_is_closed_while_the_caller_holds_a_record(tmp_path):
    """The caller transforms each record while the generator is suspended: no reader of the
    table (nor its decoded pages) may stay open then. An open one kept a row group's whole image
    page resident during the transform (the build's peak grew with the frames of a shard)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc/self/fd")
    path = tmp_path / "demo.parquet"
    write_source_table(_records(), path, rows_per_group=5)
    real = os.path.realpath(path)
    rows = read_source_rows(path, "test", 2, 9)  # spans row groups
    seen = 0
    for rec in rows:
        assert real not in _open_paths(), f"{path.name} open while record {rec.image_id} is with the caller"
        seen += 1
    assert seen == 7
