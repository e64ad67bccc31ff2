"""Terrain of the synthetic SAR scenes: land-cover mixture, water, roads, trees, rocks, shadows.

Every function draws from the scene's generator in a fixed order, so a scene's bytes
depend only on its key (see :mod:`aegisbench.builders.synthetic_sar`).

>>> from aegisbench.hashing import rng_for
>>> flight = {"scale": 40.0, "weights": np.full(4, 0.25), "colours": {t: np.full(3, 100, np.float32) for t in TERRAINS}}
>>> colour, amp, fine, forest = terrain_base(rng_for("doc"), flight, 32, 24)
>>> colour.shape, amp.shape
((24, 32, 3), (24, 32))
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from aegisbench.builders.synthetic_common import value_noise

TERRAINS = ("grass", "forest", "rock", "sand")
_LOW = 8  # terrain layout is computed at 1/_LOW resolution, then upscaled
_AMP = np.array([0.17, 0.22, 0.14, 0.09], np.float32)  # texture strength per terrain
_FINE = np.array([0.016, 0.012, 0.016, 0.01], np.float32)  # pixel grain per terrain
_ROAD = ((104, 104, 102), (158, 140, 112), (128, 118, 100))


def terrain_base(rng, fl, w, h):
    """Soft mixture of terrain classes: colour, texture amplitudes and forest weight."""
    lw, lh = w // _LOW + 1, h // _LOW + 1
    zoom = min(max(fl["scale"] / 40, 0.7), 2.0)
    scores = [3.0 * fl["weights"][k] + 0.9 * value_noise(
        rng, lh, lw, (300 * zoom / _LOW, 90 * zoom / _LOW), (0.7, 0.3)) for k in range(4)]
    s = np.stack(scores, -1) * 4.0
    s = np.exp(s - s.max(-1, keepdims=True))
    wts = s / s.sum(-1, keepdims=True)
    cols = np.stack([fl["colours"][t] for t in TERRAINS], 0)
    colour = cv2.resize((wts @ cols).astype(np.float32), (w, h))
    maps = np.stack([wts @ _AMP, wts @ _FINE, wts[..., 1]], -1).astype(np.float32)
    amp, fine, forest_w = cv2.split(cv2.resize(maps, (w, h)))
    return colour, amp, fine, forest_w


def water_field(rng, fl, w, h):
    """Signed field (> 0 inside water) at full resolution: a lake or a meandering river."""
    if rng.random() >= fl["water_p"]:
        return np.full((h, w), -1.0, np.float32)
    lw, lh = w // _LOW + 1, h // _LOW + 1
    if rng.random() < 0.5:
        n = value_noise(rng, lh, lw, (500 / _LOW, 150 / _LOW), (0.8, 0.2))
        thr = max(float(rng.uniform(0.7, 1.4)), float(np.quantile(n, 0.7)))
        f = (n - thr) * 0.5
    else:
        yy, xx = np.mgrid[0:lh, 0:lw].astype(np.float32)
        ang = rng.uniform(0, math.pi)
        v = -(xx - lw / 2) * math.sin(ang) + (yy - lh / 2) * math.cos(ang)
        wander = value_noise(rng, lh, lw, (600 / _LOW,), (1.0,)) * (160 / _LOW)
        half = rng.uniform(25, 80) / _LOW
        off = rng.uniform(-0.3, 0.3) * max(lw, lh)
        f = (half - np.abs(v - off + wander)) / half * 0.5
    return cv2.resize(f.astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)


def _bbox(mask: np.ndarray) -> tuple[slice, slice]:
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    return slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1)


def blend_water(rng, fl, img, amp, wf):
    """Water over the terrain colour (its own ripple, no terrain texture); wet dark banks."""
    region = _bbox(wf > -0.2)
    wf = wf[region]
    shore = np.minimum(np.maximum(wf + 0.2, 0), 0.2) * np.float32(1.25) * (wf < 0)
    a = np.minimum(np.maximum(wf * np.float32(20), 0), 1)
    ripple = value_noise(rng, wf.shape[0], wf.shape[1], (5, 30), (0.4, 0.6))
    depth = np.minimum(np.maximum(wf * np.float32(1.2), 0), 0.45)
    keep = (1 - shore) * (1 - a)
    wet = (1 - depth) * (1 + np.float32(0.045) * ripple) * a
    img[region] = cv2.add(cv2.multiply(img[region], cv2.merge([keep] * 3)),
                          cv2.merge([wet * c for c in fl["water_colour"].tolist()]))
    amp[region] *= 1 - a


def roads(rng, fl, img, water, unit):
    h, w = water.shape
    mask = np.zeros((h, w), np.uint8)
    p = fl["road_p"]
    for _ in range(int(rng.random() < p) + int(rng.random() < p / 3)):
        t = np.linspace(0, 1, 32)
        (x0, y0), (x1, y1) = _edge_point(rng, w, h), _edge_point(rng, w, h)
        bend = np.sin(t * math.pi) * rng.normal(0, 0.25) * max(w, h)
        dx, dy = y1 - y0, -(x1 - x0)
        norm = math.hypot(dx, dy) + 1e-6
        pts = np.stack([x0 + (x1 - x0) * t + bend * dx / norm,
                        y0 + (y1 - y0) * t + bend * dy / norm], 1)
        width = max(3, int(unit * rng.uniform(0.5, 1.5)))
        cv2.polylines(mask, [pts.round().astype(np.int32)], False, 255, width, cv2.LINE_AA)
    mask[water] = 0
    if mask.any():
        region = _bbox(mask > 0)
        a = (mask[region].astype(np.float32) / 255)[..., None]
        col = np.array(_ROAD[rng.integers(len(_ROAD))], np.float32) * rng.uniform(0.9, 1.1)
        img[region] = img[region] * (1 - a) + a * col
    return mask > 127


def _edge_point(rng, w, h):
    side, r = int(rng.integers(4)), float(rng.random())
    return [(r * w, -10), (r * w, h + 10), (-10, r * h), (w + 10, r * h)][side]


def scatter(rng, fl, forest_w, blocked, persp, unit, w, h):
    """Tree and rock lists of (x, y, radius); trees follow the forest weight."""
    r_tree = np.array([0.5, 1.4]) * unit  # crown radius range, px at mid-frame
    n_cand = int(1.3 * w * h / (math.pi * r_tree.prod()) * fl["tree_density"])
    x, y = rng.uniform(0, w, n_cand), rng.uniform(0, h, n_cand)
    xi, yi = x.astype(int).clip(0, w - 1), y.astype(int).clip(0, h - 1)
    p = np.clip((forest_w[yi, xi] - 0.3) / 0.4, 0, 1) + 0.02
    keep = (rng.random(n_cand) < p) & ~blocked[yi, xi]
    r = np.exp(rng.uniform(*np.log(r_tree), n_cand)) * persp[yi]
    trees = np.stack([x, y, r], 1)[keep]
    n_rock = int(w * h / unit ** 2 * 0.25 * fl["rock_density"])
    x, y = rng.uniform(0, w, n_rock), rng.uniform(0, h, n_rock)
    xi, yi = x.astype(int).clip(0, w - 1), y.astype(int).clip(0, h - 1)
    r = np.exp(rng.uniform(math.log(0.08 * unit), math.log(0.45 * unit), n_rock)) * persp[yi]
    rocks = np.stack([x, y, np.maximum(r, 1.5)], 1)[~blocked[yi, xi]]
    return trees, rocks


def cast_shadows(img, trees, rocks, fl):
    h, w = img.shape[:2]
    sh = np.zeros((h, w), np.uint8)
    d = fl["sun"] * fl["shadow_len"]
    for x, y, r in np.concatenate([trees, rocks]):
        cv2.circle(sh, (int(x + d[0] * r * 1.5), int(y + d[1] * r * 1.5)), int(r * 0.85), 255, -1)
    sh = cv2.GaussianBlur(sh, (0, 0), 1.5).astype(np.float32) / 255
    img *= (1 - fl["shadow_strength"] * sh)[..., None]


def draw_rocks(img, rocks, fl, rng):
    n = len(rocks)
    ang = np.sort(rng.uniform(0, 2 * math.pi, (n, 8)), axis=1)
    rad = rng.uniform(0.6, 1.0, (n, 8)) * rocks[:, 2:3]
    pts = np.stack([rocks[:, :1] + rad * np.cos(ang), rocks[:, 1:2] + rad * np.sin(ang)], -1)
    cols = rng.uniform(100, 175, (n, 1)) * rng.uniform((0.97, 0.96, 0.9), (1.04, 1.02, 0.98),
                                                       (n, 3))
    hl = rocks[:, :2] - fl["sun"] * rocks[:, 2:3] * 0.3
    for (x, y, r), poly, col, (hx, hy) in zip(rocks, pts.round().astype(np.int32), cols, hl):
        cv2.fillPoly(img, [poly], tuple(col.tolist()), cv2.LINE_AA)
        cv2.circle(img, (int(hx), int(hy)), max(1, int(r * 0.45)),
                   tuple(np.minimum(col * 1.12, 255).tolist()), -1, cv2.LINE_AA)


def draw_trees(img, trees, fl, rng):
    """Crowns: a dark base disc, 5 jittered clumps and a sunlit highlight (random draws
    are vectorised; trees are drawn top to bottom)."""
    trees = trees[np.argsort(trees[:, 1], kind="stable")]
    n, k = len(trees), 5
    r = trees[:, 2:3]
    base = np.array((40, 66, 36)) * rng.uniform(0.7, 1.25, (n, 1)) + rng.normal(0, 5, (n, 3))
    off = trees[:, None, :2] + rng.normal(0, 1, (n, k, 2)) * r[:, :, None] * 0.28
    rr = np.maximum(1, r * rng.uniform(0.45, 0.7, (n, k))).astype(int)
    cc = base[:, None, :] * rng.uniform(0.88, 1.1, (n, k, 1))
    hl = trees[:, :2] - fl["sun"] * r * 0.3
    for i in range(n):
        x, y, ri = trees[i]
        cv2.circle(img, (int(x), int(y)), max(1, int(ri * 0.9)), (base[i] * 0.7).tolist(), -1,
                   cv2.LINE_AA)
        for j in range(k):
            cv2.circle(img, (int(off[i, j, 0]), int(off[i, j, 1])), int(rr[i, j]),
                       cc[i, j].tolist(), -1, cv2.LINE_AA)
        cv2.circle(img, (int(hl[i, 0]), int(hl[i, 1])), max(1, int(ri * 0.35)),
                   np.minimum(base[i] * 1.25, 255).tolist(), -1, cv2.LINE_AA)
