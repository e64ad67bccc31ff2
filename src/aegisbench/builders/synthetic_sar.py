"""Embedded synthetic aerial search-and-rescue source (``synthetic_sar``).

Procedural nadir / oblique drone frames of mixed terrain (grass, forest, rock, sand,
water, roads) with small people in varied poses and clothing, each casting a shadow
in the flight's sun direction. Boxes are tight around the drawn figure. Every image
is seeded from ``rng_for(version, "synthetic_sar", key)`` so it regenerates alone.

>>> cfg = SyntheticSarConfig(n_train=1, n_val=0, n_test=1)
>>> recs = list(generate_synthetic_sar(cfg, "0.1.0"))
>>> [r.image_id for r in recs], recs[0].group_id
(['synthetic_sar_train_00000', 'synthetic_sar_test_00000'], 'synthetic_sar_train_flight_000')
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from aegisbench.builders.source_kinds import SYNTHETIC_KINDS, SyntheticKind
from aegisbench.builders.source_table import SPLITS, SourceRecord
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for
from aegisbench.builders.synthetic_common import as_pair, check_fraction, check_int, every, value_noise
from aegisbench.builders.synthetic_people import draw_figure, random_person
from aegisbench.builders.synthetic_terrain import (TERRAINS, blend_water, cast_shadows, draw_rocks, draw_trees, roads,
                                                   scatter, terrain_base, water_field)

log = logging.getLogger(__name__)

SOURCE = "synthetic_sar"
_COVER = 0.2  # figure coverage that counts as "person pixel" for the box


@dataclass(frozen=True)
class SyntheticSarConfig:
    """Size and content of the synthetic SAR source (sizes are (width, height))."""

    n_train: int = 160
    n_val: int = 24
    n_test: int = 40
    small_size: tuple[int, int] = (640, 640)
    large_size: tuple[int, int] = (2000, 1500)
    large_fraction: float = 0.2  # val/test: every 5th image is large
    train_large_fraction: float = 0.0  # train stays small: cheap to train on
    images_per_flight: int = 6
    min_persons: int = 1
    max_persons: int = 6
    large_persons_scale: float = 2.0  # person count multiplier on large frames
    empty_fraction: float = 0.05  # images with nobody in them
    person_size_px: tuple[int, int] = (16, 96)  # box long side, before perspective
    oblique_fraction: float = 0.4  # flights flown with an oblique camera
    target_label: str = "person"
    # a private variant (options ``private: true``): its own source name, and a secret drawn into the
    # project's private configuration that keys every draw, so the public code cannot regenerate it
    source: str = SOURCE
    secret: str = ""

    def __post_init__(self) -> None:
        where = "SyntheticSarConfig"
        for name in ("n_train", "n_val", "n_test"):
            check_int(self, name, 0, where)
        check_int(self, "images_per_flight", 1, where)
        check_int(self, "min_persons", 0, where)
        check_int(self, "max_persons", self.min_persons, where)
        for name in ("small_size", "large_size"):
            as_pair(self, name, 128, where)
        lo, hi = as_pair(self, "person_size_px", 4, where)
        if lo > hi:
            raise BadInput("person_size_px must be (min, max) with min <= max", where=where)
        if hi * 1.6 > min(min(self.small_size), min(self.large_size)):
            raise BadInput("person_size_px max is too large for the frame sizes", where=where)
        for name in ("large_fraction", "train_large_fraction", "empty_fraction",
                     "oblique_fraction"):
            check_fraction(self, name, where)
        if not isinstance(self.large_persons_scale, (int, float)) or not (
                0.5 <= self.large_persons_scale <= 10):
            raise BadInput("large_persons_scale must be a number in [0.5, 10]", where=where)
        if not isinstance(self.target_label, str) or not self.target_label:
            raise BadInput("target_label must be a non-empty string", where=where)

    def count(self, split: str) -> int:
        return {"train": self.n_train, "val": self.n_val, "test": self.n_test}[split]


@dataclass(frozen=True)
class SarScene:
    """One rendered frame plus the masks that define its ground truth."""

    image: np.ndarray  # uint8 RGB
    boxes: np.ndarray  # float32 (n, 4) xyxy, tight around each drawn figure
    water: np.ndarray  # bool (H, W): nobody may stand here
    image_id: str
    flight_id: str
    view: str  # "nadir" or "oblique"
    plate: np.ndarray | None = None  # debug: frame before the people were drawn
    figure_alpha: np.ndarray | None = None  # debug: union of figure coverages


def image_id_for(split: str, index: int, source: str = SOURCE) -> str:
    return f"{source}_{split}_{index:05d}"


def flight_id_for(cfg: SyntheticSarConfig, split: str, index: int) -> str:
    return f"{cfg.source}_{split}_flight_{index // cfg.images_per_flight:03d}"


def _rng(cfg: SyntheticSarConfig, version: str, key: str):
    """The draw of ``key``: keyed by the version and the source, and by the secret of a private variant."""
    return rng_for(version, cfg.source, key) if not cfg.secret else rng_for(version, cfg.source, cfg.secret, key)


def generate_synthetic_sar(cfg: SyntheticSarConfig, version: str) -> Iterator[SourceRecord]:
    """Yield every image of every split (train, val, test) as a :class:`SourceRecord`."""
    if not isinstance(cfg, SyntheticSarConfig):
        raise TypeError("cfg must be a SyntheticSarConfig")
    for split in SPLITS:
        for i in range(cfg.count(split)):
            sc = render_sar_scene(cfg, version, split, i)
            yield SourceRecord.from_image(
                sc.image_id, split, cfg.source, sc.image, boxes=sc.boxes,
                labels=[cfg.target_label] * len(sc.boxes), group_id=sc.flight_id)
        log.debug("synthetic_sar: %s split done (%d images)", split, cfg.count(split))


# ---------------------------------------------------------------- flights

_PALETTE = {
    "grass": (92, 124, 58), "grass_dry": (152, 142, 86), "forest": (34, 52, 30),
    "rock": (128, 120, 102), "sand": (186, 168, 132),
}
_WATER = ((38, 58, 66), (70, 72, 56), (44, 66, 92), (52, 76, 70))
_DETAIL_CELLS, _DETAIL_W = (3, 9, 28), (0.08, 0.5, 0.42)  # texture octaves (px, weight)


def _flight(cfg: SyntheticSarConfig, version: str, flight_id: str) -> dict:
    """Flight-wide settings: camera, altitude (person scale), sun, season, land cover."""
    rng = _rng(cfg, version, flight_id)
    lo, hi = cfg.person_size_px
    weights = rng.dirichlet([1.6, 1.0, 0.6, 0.5])
    dry = float(rng.beta(1.2, 2.5))
    colours = {}
    for t in TERRAINS:
        base = np.array(_PALETTE[t], np.float32)
        if t == "grass":
            base = (1 - dry) * base + dry * np.array(_PALETTE["grass_dry"], np.float32)
        colours[t] = base * rng.uniform(0.9, 1.1) + rng.normal(0, 3, 3)
    sun = rng.uniform(0, 2 * math.pi)
    return {
        "view": "oblique" if rng.random() < cfg.oblique_fraction else "nadir",
        # typical person box side in px: fixes the ground sampling distance of the flight
        "scale": float(math.exp(rng.uniform(math.log(lo * 1.1), math.log(hi / 1.2)))),
        "weights": weights, "colours": colours,
        "sun": np.array([math.cos(sun), math.sin(sun)], np.float32),  # shadow direction
        "shadow_len": float(rng.uniform(0.3, 0.9)),  # low sun -> long shadows
        "shadow_strength": float(rng.uniform(0.3, 0.5)),
        "water_p": float(rng.choice([0.0, 0.35, 0.7])),
        "water_colour": np.array(_WATER[rng.integers(len(_WATER))], np.float32),
        "road_p": float(rng.uniform(0.1, 0.7)),
        "tree_density": float(rng.uniform(0.5, 1.0)),
        "rock_density": float(rng.uniform(0.2, 1.0)) * (0.5 + 2 * weights[2]),
        "exposure": float(rng.uniform(0.92, 1.1)),
        "tint": rng.normal(1.0, 0.025, 3).astype(np.float32),
    }


# ---------------------------------------------------------------- rendering

def render_sar_scene(cfg: SyntheticSarConfig, version: str, split: str, index: int,
                     debug: bool = False) -> SarScene:
    """Render image ``index`` of ``split``; ``debug`` keeps the plate and figure masks."""
    if split not in SPLITS:
        raise BadInput(f"split must be one of {SPLITS}", where="render_sar_scene")
    image_id = image_id_for(split, index, cfg.source)
    flight_id = flight_id_for(cfg, split, index)
    fl = _flight(cfg, version, flight_id)
    rng = _rng(cfg, version, image_id)
    large = every(index, cfg.train_large_fraction if split == "train" else cfg.large_fraction)
    w, h = cfg.large_size if large else cfg.small_size
    oblique = fl["view"] == "oblique"
    grad = float(rng.uniform(0.35, 0.6)) if oblique else 0.0
    persp = (1.0 + grad * (np.arange(h, dtype=np.float32) / h - 0.5)).astype(np.float32)
    unit = fl["scale"] * float(rng.uniform(0.92, 1.08))  # px per "person" at mid-frame

    img, amp, fine, forest_w = terrain_base(rng, fl, w, h)
    wfield = water_field(rng, fl, w, h)
    water = wfield > -0.03  # the anti-aliased edge band counts as water too
    if water.any():
        blend_water(rng, fl, img, amp, wfield)
    road = roads(rng, fl, img, water, unit)
    trees, rocks = scatter(rng, fl, forest_w, water | road, persp, unit, w, h)
    cast_shadows(img, trees, rocks, fl)
    img = cv2.convertScaleAbs(img)  # saturating float -> uint8
    draw_rocks(img, rocks, fl, rng)
    draw_trees(img, trees, fl, rng)
    zoom = min(max(unit / 40, 0.6), 2.5)
    detail = value_noise(rng, h, w, tuple(c * zoom for c in _DETAIL_CELLS), _DETAIL_W)
    grain = value_noise(rng, h, w, (1.5,), (1.0,))
    tex = cv2.add(cv2.multiply(amp, detail), cv2.multiply(fine, grain)) + np.float32(1)
    gain = fl["exposure"] * fl["tint"] * np.float32(rng.uniform(0.95, 1.05))
    img = cv2.multiply(img.astype(np.float32), cv2.merge([tex * g for g in gain.tolist()]))
    if oblique:  # aerial perspective: distant (upper) ground is hazier
        haze = float(rng.uniform(0.12, 0.3)) * (1 - np.arange(h, dtype=np.float32) / h) ** 2
        img = img * (1 - haze[:, None, None]) + haze[:, None, None] * np.float32(190)
    plate = cv2.convertScaleAbs(img) if debug else None

    n = _person_count(cfg, rng, large)
    boxes, alpha = _place_people(rng, fl, img, water, trees, persp, unit, n, debug)
    out = cv2.convertScaleAbs(img)
    return SarScene(out, boxes, water, image_id, flight_id, fl["view"], plate, alpha)


def _person_count(cfg: SyntheticSarConfig, rng: np.random.Generator, large: bool) -> int:
    if rng.random() < cfg.empty_fraction:
        return 0
    scale = cfg.large_persons_scale if large else 1.0
    lo = max(int(round(cfg.min_persons * scale)), min(cfg.min_persons, 1))
    return int(rng.integers(lo, max(lo, int(round(cfg.max_persons * scale))) + 1))




# ---------------------------------------------------------------- people

def _place_people(rng, fl, img, water, trees, persp, unit, n, debug):
    h, w = water.shape
    margin = cv2.dilate(water.astype(np.uint8), np.ones((5, 5), np.uint8))
    for x, y, r in trees:  # nobody stands on a tree crown
        cv2.circle(margin, (int(x), int(y)), int(r * 0.9), 1, -1)
    margin = margin > 0
    taken = np.zeros((h, w), bool)
    alpha = np.zeros((h, w), np.float32) if debug else None
    boxes = []
    for _ in range(n):
        p = random_person(rng, fl["view"])
        size = unit * float(np.exp(rng.normal(0, 0.13)))
        for _attempt in range(40):
            if len(trees) and rng.random() < 0.25:  # next to a tree
                tx, ty, tr = trees[rng.integers(len(trees))]
                a = rng.uniform(0, 2 * math.pi)
                cx, cy = tx + math.cos(a) * (tr + 0.5 * size), ty + math.sin(a) * (tr + 0.5 * size)
            else:
                cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            r, q = int(size * 0.6) + 2, int(size * 0.25)  # cheap checks before rendering
            if not (r < cx < w - r and r < cy < h - r) or margin[int(cy) - q:int(cy) + q + 1,
                                                                 int(cx) - q:int(cx) + q + 1].any():
                continue
            radial = math.atan2(cy - h / 2, cx - w / 2)
            radius = math.hypot(cx - w / 2, cy - h / 2) / (0.5 * math.hypot(w, h))
            fig = draw_figure(p, size * float(persp[int(cy)]), radial, radius, fl["sun"],
                          fl["shadow_len"], cx % 1, cy % 1)
            ox, oy = int(cx) - fig.anchor, int(cy) - fig.anchor
            ph, pw = fig.cover.shape
            if ox < 1 or oy < 1 or ox + pw > w - 1 or oy + ph > h - 1:
                continue
            region = (slice(oy, oy + ph), slice(ox, ox + pw))
            solid = fig.cover > 0.01
            footprint = solid | (fig.shadow > 0.02)
            if (margin[region] & solid).any() or (taken[region] & footprint).any():
                continue
            break
        else:
            continue
        patch = img[region]
        patch *= (1 - fl["shadow_strength"] * fig.shadow)[..., None]
        patch *= (1 - fig.cover)[..., None]
        patch += fig.premult * fl["exposure"] * fl["tint"]
        taken[region] |= footprint
        ys, xs = np.nonzero(fig.cover >= _COVER)
        boxes.append([ox + xs.min(), oy + ys.min(), ox + xs.max() + 1, oy + ys.max() + 1])
        if debug:
            alpha[region] = np.maximum(alpha[region], fig.cover)
    return np.asarray(boxes, np.float32).reshape(-1, 4), alpha


SYNTHETIC_KINDS.add("synthetic_sar", SyntheticKind(SyntheticSarConfig, generate_synthetic_sar, private=True))
