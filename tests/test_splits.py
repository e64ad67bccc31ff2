"""Group-aware split assignment, DCT perceptual hash and near-duplicate search."""

from __future__ import annotations

from collections import Counter

import cv2
import numpy as np
import pytest
from scipy.fft import dctn

from aegisbench.builders import splits
from aegisbench.builders.splits import assign_split, hamming, near_duplicates, phash
from aegisbench.hashing import rng_for


def scene(key: str, h: int = 96, w: int = 128) -> np.ndarray:
    """A smooth textured RGB image (low-resolution noise upsampled), seeded by ``key``."""
    rng = rng_for("test_splits", key)
    low = rng.integers(0, 256, (h // 8, w // 8, 3)).astype(np.float32)
    img = cv2.resize(low, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(img + rng.normal(0, 4, img.shape), 0, 255).astype(np.uint8)


def rejpeg(img: np.ndarray, quality: int = 75) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)


# ---------------------------------------------------------------- assign_split
def test_assign_split_is_deterministic_and_follows_fractions():
    fr = (0.7, 0.15, 0.15)
    groups = [f"seq_{i:04d}" for i in range(3000)]
    first = [assign_split(g, fr, "sard") for g in groups]
    assert first == [assign_split(g, fr, "sard") for g in groups]
    share = Counter(first)
    assert abs(share["train"] / 3000 - 0.70) < 0.04
    assert abs(share["val"] / 3000 - 0.15) < 0.03
    assert abs(share["test"] / 3000 - 0.15) < 0.03


def test_assign_split_matches_its_sha256_definition():
    # u = first 8 bytes of SHA-256(key, group) / 2**64, compared to cumulative fractions
    for g in ("a", "b", "c", "fire_2023_07"):
        u = splits.split_unit(g, "heridal")
        assert 0 <= u < 1
        expected = "train" if u < 0.5 else ("val" if u < 0.75 else "test")
        assert assign_split(g, (0.5, 0.25, 0.25), "heridal") == expected


def test_assign_split_key_salts_and_extreme_fractions():
    groups = [f"g{i}" for i in range(200)]
    a = [assign_split(g, (0.5, 0.25, 0.25), "heridal") for g in groups]
    b = [assign_split(g, (0.5, 0.25, 0.25), "sard") for g in groups]
    assert a != b  # a different key gives an independent split
    assert {assign_split(g, (1, 0, 0), "k") for g in groups} == {"train"}
    assert {assign_split(g, (0, 0, 1), "k") for g in groups} == {"test"}


@pytest.mark.parametrize("bad", [(0.5, 0.5), (0.6, 0.6, -0.2), (0.5, 0.3, 0.3), (1, float("nan"), 0)])
def test_assign_split_rejects_bad_fractions(bad):
    with pytest.raises(ValueError):
        assign_split("g", bad, "k")


# ---------------------------------------------------------------- phash
def test_phash_matches_independent_scipy_dct():
    img = scene("ref", 75, 101)
    gray = cv2.resize(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32), (32, 32),
                      interpolation=cv2.INTER_AREA)
    low = dctn(gray.astype(np.float64), type=2, norm="ortho")[:8, :8].ravel()
    bits = low > np.median(low[1:])
    bits[0] = False
    expected = sum(1 << (63 - i) for i in range(64) if bits[i])
    assert phash(img) == expected
    assert phash(img) >> 63 == 0  # DC bit is always clear
    assert 20 <= bin(phash(img)).count("1") <= 40  # about half of the AC bits are set


def test_phash_robust_to_brightening_rejpeg_and_resize_but_not_to_content():
    img = scene("base")
    brighter = np.clip(img.astype(np.int16) + 15, 0, 255).astype(np.uint8)
    assert hamming(phash(img), phash(rejpeg(brighter, 70))) <= 4
    assert hamming(phash(img), phash(cv2.resize(img, (256, 192)))) <= 4
    others = [hamming(phash(img), phash(scene(f"other{i}"))) for i in range(8)]
    assert min(others) > 12


def test_phash_gray_input_and_type_errors():
    img = scene("g")
    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    assert phash(gray) == phash(img)
    assert phash(np.full((5, 7, 3), 200, np.uint8)) == 0
    with pytest.raises(TypeError):
        phash(img.astype(np.float32))


# ---------------------------------------------------------------- hamming / near_duplicates
def test_hamming_values_and_range():
    assert hamming(0, 0) == 0
    assert hamming(0, (1 << 64) - 1) == 64
    assert hamming(0b1100, 0b1010) == 2 == hamming(0b1010, 0b1100)
    with pytest.raises(ValueError):
        hamming(-1, 0)
    with pytest.raises(ValueError):
        hamming(1 << 64, 0)


def _brute(test, other, dmax):
    out = []
    for o in sorted(other):
        d, t = min((hamming(other[o], test[t]), t) for t in sorted(test))
        if d <= dmax:
            out.append((o, t, d))
    return out


def test_near_duplicates_equals_brute_force():
    rng = rng_for("test_splits", "near")
    test = {f"t{i:03d}": int(h) for i, h in enumerate(rng.integers(0, 2**63, 60, dtype=np.int64))}
    base = list(test.values())
    other = {}
    for i in range(150):  # half are perturbed copies of test hashes, half random
        if i % 2:
            h = base[i % len(base)]
            for bit in rng.choice(64, size=int(rng.integers(0, 10)), replace=False):
                h ^= 1 << int(bit)
        else:
            h = int(rng.integers(0, 2**63, dtype=np.int64)) | (int(rng.integers(0, 2)) << 63)
        other[f"o{i:03d}"] = h
    for dmax in (0, 3, 6, 9):
        got = near_duplicates(test, other, dmax)
        assert got == _brute(test, other, dmax)
    assert len(near_duplicates(test, other, 6)) > 10


def test_near_duplicates_ties_threshold_and_empty():
    test = {"b": 0b0011, "a": 0b0101}  # both at distance 1 from 0b0001
    assert near_duplicates(test, {"x": 0b0001}, 1) == [("x", "a", 1)]
    assert near_duplicates(test, {"x": 0b0001}, 0) == []
    assert near_duplicates({}, {"x": 1}, 6) == []
    assert near_duplicates(test, {}, 6) == []
    with pytest.raises(ValueError):
        near_duplicates(test, {"x": 1}, 65)


def test_popcount_lookup_fallback_matches(monkeypatch):
    rng = rng_for("test_splits", "pop")
    x = rng.integers(0, 2**63, (7, 5), dtype=np.int64).astype(np.uint64) * np.uint64(2)
    expected = np.vectorize(lambda v: bin(int(v)).count("1"))(x)
    monkeypatch.delattr(np, "bitwise_count", raising=False)
    assert (splits._popcount(x) == expected).all()
