"""P/R/F1 once (aegisbench.stats.prf): the detection metrics' pooled recall / precision / F1 are
its numbers, bit for bit those of the integer ratios they were (sums exact in int64, one
division in float64), and count_ratios (bootstrap, threshold selection) is prf on float64 counts."""

from __future__ import annotations

import struct

import numpy as np

from aegisbench import stats
from aegisbench.metrics import detection as D


def _bits(x: float) -> bytes:
    return struct.pack("<d", x)


def _integer_ratios(counts) -> dict[str, float]:
    """The formulas as detection.py computed them before they were shared."""
    tp, fp, fn = np.asarray(counts, np.int64).reshape(-1, 3).sum(axis=0)

    def r(num, den):
        return float(num) / float(den) if den > 0 else float("nan")
    return {"recall": r(tp, tp + fn), "precision": r(tp, tp + fp), "f1": r(2 * tp, 2 * tp + fp + fn)}


def test_detection_prf_is_bit_for_bit_the_integer_ratios():
    rng = np.random.default_rng(35)
    cases = [[0, 0, 0], [0, 0, 4], [0, 2, 0], [3, 1, 1], [[1, 2, 3], [0, 0, 0]], np.zeros((0, 3), int)]
    cases += [rng.integers(0, hi, size=(int(rng.integers(1, 5)), 3)) for hi in (2, 7, 10**4, 2**50) for _ in range(300)]
    for counts in cases:
        want = _integer_ratios(counts)
        got = {"recall": D.recall(counts), "precision": D.precision(counts), "f1": D.f1(counts)}
        assert {k: _bits(v) for k, v in got.items()} == {k: _bits(v) for k, v in want.items()}, counts
        assert all(type(v) is float for v in got.values())


def test_count_ratios_is_prf_of_float_counts():
    rng = np.random.default_rng(1)
    summed = np.concatenate([rng.random((50, 3)) * 30, np.zeros((2, 3)), rng.integers(0, 9, (20, 3))])
    for empty in (0.0, np.nan):
        got = stats.count_ratios(summed, empty)
        f = summed.astype(np.float64)
        tp, fp, fn = f[:, 0], f[:, 1], f[:, 2]
        for name, num, den in (("recall", tp, tp + fn), ("precision", tp, tp + fp), ("f1", 2 * tp, 2 * tp + fp + fn)):
            want = np.where(den > 0, num / np.where(den > 0, den, 1), empty)
            assert got[name].tobytes() == want.tobytes(), name
