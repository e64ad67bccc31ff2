"""Embedded synthetic wildfire-camera source (``synthetic_smoke``).

Fixed-camera landscape sequences (sky gradient, layered ridges with aerial perspective,
forest foreground, drifting clouds and valley fog as distractors). In most sequences a
small smoke plume appears at ``fire_start_frame`` and rises, drifts and grows; a few
sequences start with smoke already visible (``fire_start_frame=0``) and a few never
burn (``None``). A plume gets a ``smoke`` box once its visible alpha mass passes
``min_alpha_mass``. Every frame is seeded from ``rng_for(version, "synthetic_smoke", key)``.

>>> cfg = SyntheticSmokeConfig(n_train=0, n_val=0, n_test=1, frames_per_sequence=2)
>>> recs = list(generate_synthetic_smoke(cfg, "0.1.0"))
>>> [(r.image_id, r.frame_index, r.time_s) for r in recs]
[('synthetic_smoke_test_000_f00', 0, 0.0), ('synthetic_smoke_test_000_f01', 1, 30.0)]
>>> recs[0].group_id
'synthetic_smoke_test_seq_000'
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass

import cv2
import numpy as np

from aegisbench.fields import check_float
from aegisbench.builders.source_kinds import SYNTHETIC_KINDS, SyntheticKind
from aegisbench.builders.source_table import SPLITS, SourceRecord
from aegisbench.builders.synthetic_common import as_pair, check_fraction, check_int, every, value_noise
from aegisbench.errors import BadInput
from aegisbench.hashing import rng_for

log = logging.getLogger(__name__)

SOURCE = "synthetic_smoke"
_BOX_ALPHA = 0.06  # visible plume opacity that counts as "smoke pixel" for the box
_FOREST = ((52, 80, 46), (62, 88, 48), (74, 92, 52), (46, 70, 50), (86, 90, 56))
_ROCK = ((120, 116, 110), (136, 126, 112), (110, 112, 116))
_SMOKE_TINTS = ((1.0, 1.0, 1.0), (0.97, 0.99, 1.03), (1.03, 1.0, 0.95))
_SKIES = (  # (zenith, horizon) RGB
    ((70, 120, 190), (182, 202, 222)), ((120, 150, 185), (208, 214, 216)),
    ((145, 152, 162), (192, 194, 196)), ((95, 115, 165), (226, 196, 160)),
    ((85, 135, 200), (200, 215, 228)),
)


@dataclass(frozen=True)
class SyntheticSmokeConfig:
    """Sequence counts per split (``n_*``), frames, timing and frame size (width, height)."""

    n_train: int = 12
    n_val: int = 3
    n_test: int = 6
    frames_per_sequence: int = 12
    frame_interval_s: float = 30.0
    size: tuple[int, int] = (640, 480)
    negative_fraction: float = 1 / 6  # sequences without any fire
    from_start_fraction: float = 1 / 6  # sequences whose smoke is visible from frame 0
    min_alpha_mass: float = 25.0  # summed visible plume opacity (px) before a box is drawn
    target_label: str = "smoke"

    def __post_init__(self) -> None:
        where = "SyntheticSmokeConfig"
        for name in ("n_train", "n_val", "n_test"):
            check_int(self, name, 0, where)
        check_int(self, "frames_per_sequence", 1, where)
        as_pair(self, "size", 96, where)
        for name in ("negative_fraction", "from_start_fraction"):
            check_fraction(self, name, where)
        if self.negative_fraction + self.from_start_fraction > 1.0:
            raise BadInput("negative_fraction + from_start_fraction must be <= 1", where=where)
        for name in ("frame_interval_s", "min_alpha_mass"):
            check_float(getattr(self, name), name, 0.0, 1e6, lo_open=True, hi_open=True, error=BadInput,
                        where=f"{where}.{name}")
        if not isinstance(self.target_label, str) or not self.target_label:
            raise BadInput("target_label must be a non-empty string", where=where)

    def count(self, split: str) -> int:
        return {"train": self.n_train, "val": self.n_val, "test": self.n_test}[split]


@dataclass(frozen=True)
class SmokeFrame:
    """One rendered frame; ``alpha`` is the visible plume opacity (debug only)."""

    image: np.ndarray
    boxes: np.ndarray  # float32 (0 or 1, 4)
    image_id: str
    sequence_id: str
    frame_index: int
    fire_start_frame: int | None
    plate: np.ndarray | None = None  # debug: the same frame without smoke
    alpha: np.ndarray | None = None


def sequence_id_for(split: str, seq: int) -> str:
    return f"{SOURCE}_{split}_seq_{seq:03d}"


def image_id_for(split: str, seq: int, frame: int) -> str:
    return f"{SOURCE}_{split}_{seq:03d}_f{frame:02d}"


def fire_start_for(cfg: SyntheticSmokeConfig, version: str, split: str, seq: int) -> int | None:
    """Frame at which the fire starts; ``None`` for a negative sequence."""
    if every(seq, cfg.negative_fraction):
        return None
    if every(seq + 3, cfg.from_start_fraction):
        return 0
    rng = rng_for(version, SOURCE, sequence_id_for(split, seq), "start")
    n = cfg.frames_per_sequence
    return int(rng.integers(1, max(2, n - 3))) if n > 1 else 0


def generate_synthetic_smoke(cfg: SyntheticSmokeConfig, version: str) -> Iterator[SourceRecord]:
    """Yield every frame of every sequence of every split as a :class:`SourceRecord`."""
    if not isinstance(cfg, SyntheticSmokeConfig):
        raise TypeError("cfg must be a SyntheticSmokeConfig")
    for split in SPLITS:
        for seq in range(cfg.count(split)):
            scene = _Scene(cfg, version, split, seq)
            for k in range(cfg.frames_per_sequence):
                fr = scene.frame(k)
                yield SourceRecord.from_image(
                    fr.image_id, split, SOURCE, fr.image, boxes=fr.boxes,
                    labels=[cfg.target_label] * len(fr.boxes), group_id=scene.sequence_id,
                    frame_index=k, time_s=k * float(cfg.frame_interval_s),
                    fire_start_frame=scene.fire_start)


def render_smoke_frame(cfg: SyntheticSmokeConfig, version: str, split: str, seq: int,
                       frame: int, debug: bool = False) -> SmokeFrame:
    """Render one frame on its own (the sequence background is rebuilt from its key)."""
    if split not in SPLITS:
        raise BadInput(f"split must be one of {SPLITS}", where="render_smoke_frame")
    return _Scene(cfg, version, split, seq).frame(frame, debug)


class _Scene:
    """Static parts of one camera sequence; ``frame(k)`` adds clouds, smoke and noise."""

    def __init__(self, cfg: SyntheticSmokeConfig, version: str, split: str, seq: int):
        self.cfg, self.version, self.split, self.seq = cfg, version, split, seq
        self.sequence_id = sequence_id_for(split, seq)
        self.fire_start = fire_start_for(cfg, version, split, seq)
        rng = rng_for(version, SOURCE, self.sequence_id)
        w, h = cfg.size
        self.w, self.h = w, h
        zen, hor = (np.array(c, np.float32) for c in _SKIES[rng.integers(len(_SKIES))])
        t = (np.arange(h, dtype=np.float32) / h)[:, None, None]
        self.horizon = int(h * rng.uniform(0.3, 0.5))
        t = np.clip(t / (self.horizon / h), 0, 1) ** 0.7
        self.sky = np.broadcast_to(zen * (1 - t) + hor * t, (h, w, 3)).astype(np.float32)
        self.haze_col = hor
        self.land, self.land_a, self.near = self._landscape(rng, hor)
        # clouds: a wide static texture that slides sideways over the sky
        self.cloud_speed = float(rng.uniform(-4, 4))  # px per frame
        pad = int(abs(self.cloud_speed) * cfg.frames_per_sequence) + 2
        cover = float(rng.choice([0.0, 0.15, 0.3, 0.45]))
        n = value_noise(rng, h, w + pad, (90, 35, 12), (0.6, 0.3, 0.1))
        thr = np.quantile(n, 1 - cover) if cover > 0 else np.inf
        self.cloud_a = np.clip((n - thr) * 0.9, 0, 0.92).astype(np.float32)
        self.cloud_a *= np.clip(1.15 - np.arange(h, dtype=np.float32) / max(self.horizon, 1) * 0.4,
                                0, 1)[:, None]
        self.cloud_col = np.float32(rng.uniform(215, 245))
        self.pad = pad
        self.static = self.sky * (1 - self.land_a[..., None]) + self.land
        self.sky_rows = int(np.flatnonzero((self.land_a < 1).any(1)).max(initial=-1)) + 1
        self.plume = self._plume(rng) if self.fire_start is not None else None

    def _landscape(self, rng, haze_col):
        """Mountains, forested ridges (far -> near) and a foreground; returns colour, alpha
        and per-layer (mask, crest profile) used to hide a plume behind nearer ridges."""
        w, h = self.w, self.h
        land = np.zeros((h, w, 3), np.float32)
        land_a = np.zeros((h, w), np.float32)
        layers = []
        n_layers = int(rng.integers(3, 5))
        ys = np.arange(h, dtype=np.float32)[:, None]
        for i in range(n_layers):
            depth = i / (n_layers - 1)  # 0 = farthest, 1 = foreground
            base = self.horizon + (h - self.horizon) * (0.03 + 0.6 * depth ** 1.6)
            amp = (40 - 22 * depth) * rng.uniform(0.5, 1.3)
            prof = base - amp * value_noise(rng, 1, w, (240, 80, 28), (0.65, 0.28, 0.07))[0]
            if i > 0 or rng.random() < 0.5:  # forested crest: small spiky tree tops
                prof -= (1 + 3.5 * depth) * np.abs(value_noise(rng, 1, w, (2.5,), (1,))[0])
                col = np.array(_FOREST[rng.integers(len(_FOREST))], np.float32)
            else:
                col = np.array(_ROCK[rng.integers(len(_ROCK))], np.float32)
            col = col * rng.uniform(0.8, 1.1)
            fade = (1 - depth) ** 1.3 * rng.uniform(0.5, 0.75)  # aerial perspective
            col = col * (1 - fade) + haze_col * fade
            a = np.clip(ys - prof[None, :] + 0.5, 0, 1)  # anti-aliased crest
            tex = value_noise(rng, h, w, (1.5 + 2 * depth, 6 + 8 * depth, 40), (0.25, 0.45, 0.3))
            slope = np.clip((ys - prof) / (30 + 60 * depth), 0, 1)
            shade = 1 + (0.03 + 0.09 * depth) * tex - 0.1 * slope + 0.06 * (1 - slope) ** 4
            land = land * (1 - a[..., None]) + (col * shade[..., None]) * a[..., None]
            land_a = np.maximum(land_a, a)
            layers.append((a, prof))
        # valley fog: a soft bright band hugging one ridge (a static distractor)
        if rng.random() < 0.5:
            a, prof = layers[int(rng.integers(0, n_layers - 1))]
            level = cv2.GaussianBlur(prof[None, :].astype(np.float32), (0, 0), 60)[0] + 20
            fog = np.exp(-((ys - level[None, :]) / 14) ** 2)
            fog *= np.clip(value_noise(rng, h, w, (50, 15), (0.8, 0.2)) * 0.6 + 0.3, 0, 1) * 0.4
            land = land * (1 - fog[..., None] * a[..., None]) + 235 * (fog * a)[..., None]
        return land, land_a, layers

    def _plume(self, rng) -> dict:
        w, h = self.w, self.h
        for _ in range(40):  # prefer a source whose base is not hidden by a nearer ridge
            li = int(rng.integers(0, len(self.near) - 1))  # never on the foreground itself
            x = float(rng.uniform(0.1, 0.9) * w)
            crest = float(self.near[li][1][int(x)])
            if min(q[int(x)] for _, q in self.near[li + 1:]) > crest + 12:
                break
        depth = li / (len(self.near) - 1)
        occ = np.zeros((h, w), np.float32)
        for a, _ in self.near[li + 1:]:
            occ = np.maximum(occ, a)
        scale = 0.55 + 0.9 * depth
        # "from the start" sequences open on a plume that is already a few minutes old
        start_age = float(rng.uniform(90, 240) if self.fire_start == 0 else rng.uniform(0, 20))
        return {
            "x": x, "y": crest + float(rng.uniform(2, 10)) * scale, "occ": occ,
            "hmax": float(rng.uniform(70, 150)) * scale, "tau": float(rng.uniform(120, 300)),
            "bend": float(rng.normal(0, 0.35)), "shear": float(rng.normal(0, 0.5)),
            "w0": float(rng.uniform(2.0, 3.5)) * scale, "spread": float(rng.uniform(0.06, 0.16)),
            "amax": float(rng.uniform(0.6, 0.9)), "dens": float(rng.uniform(1.5, 3.0)),
            "col": np.float32(rng.uniform(200, 240)) * np.array(
                _SMOKE_TINTS[rng.integers(len(_SMOKE_TINTS))], np.float32),
            "rise": float(rng.uniform(0.08, 0.2)),  # px/s the wisps travel upwards
            "start_age": start_age,
            "turb": value_noise(rng, 2 * h, w, (14, 5), (0.7, 0.3)),
        }

    def frame(self, k: int, debug: bool = False) -> SmokeFrame:
        cfg = self.cfg
        if not 0 <= k < cfg.frames_per_sequence:
            raise BadInput(f"frame must be in [0, {cfg.frames_per_sequence})",
                           where=self.sequence_id)
        image_id = image_id_for(self.split, self.seq, k)
        rng = rng_for(self.version, SOURCE, image_id)
        off = int(round(self.pad / 2 + self.cloud_speed * (k - cfg.frames_per_sequence / 2)))
        off = min(max(off, 0), self.pad)
        img = self.static.copy()  # clouds only matter where the sky shows
        r = self.sky_rows
        ca = self.cloud_a[:r, off:off + self.w, None]
        sky = self.sky[:r] * (1 - ca) + self.cloud_col * ca
        img[:r] = sky * (1 - self.land_a[:r, :, None]) + self.land[:r]
        img *= np.float32(rng.uniform(0.985, 1.015))  # small exposure flicker
        plate = np.clip(img + 0.5, 0, 255).astype(np.uint8) if debug else None
        boxes = np.zeros((0, 4), np.float32)
        alpha = np.zeros((self.h, self.w), np.float32) if debug else None
        if self.plume is not None and k >= self.fire_start:
            age = (k - self.fire_start) * float(cfg.frame_interval_s) + self.plume["start_age"]
            vis = self._plume_alpha(age)
            img = img * (1 - vis[..., None]) + self.plume["col"] * vis[..., None]
            ys, xs = np.nonzero(vis >= _BOX_ALPHA)
            if float(vis.sum()) >= cfg.min_alpha_mass and len(xs):
                boxes = np.array([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], np.float32)
            if debug:
                alpha = vis
        out = np.clip(img + 0.5, 0, 255).astype(np.uint8)
        return SmokeFrame(out, boxes, image_id, self.sequence_id, k, self.fire_start, plate, alpha)

    def _plume_alpha(self, age: float) -> np.ndarray:
        """Visible plume opacity at ``age`` seconds: a bent, widening column with wisps."""
        p = self.plume
        height = p["hmax"] * (1 - math.exp(-age / p["tau"]))
        vis = np.zeros((self.h, self.w), np.float32)
        if height < 0.5:
            return vis
        top = max(0, int(p["y"] - height * 1.4 - 5))
        bot = min(self.h, int(p["y"] + 4 * p["w0"] + 3))
        if top >= bot:  # the young plume is still below the frame's lower edge
            return vis
        ys = np.arange(top, bot, dtype=np.float32)[:, None]
        z = p["y"] - ys  # height above the source
        zc = np.clip(z, 0, None)
        centre = p["x"] + p["bend"] * zc + p["shear"] * zc ** 2 / max(p["hmax"], 1)
        sigma = p["w0"] + p["spread"] * zc
        half = int(np.abs(centre - p["x"]).max() + 3 * sigma.max() + 3)
        x0, x1 = max(0, int(p["x"]) - half), min(self.w, int(p["x"]) + half + 1)
        xs = np.arange(x0, x1, dtype=np.float32)[None, :]
        d = np.exp(-0.5 * ((xs - centre) / sigma) ** 2)
        d *= np.exp(-0.5 * (np.clip(z - height, 0, None) / (0.18 * height + 2)) ** 2)  # top
        d *= np.exp(-0.5 * (np.clip(-z, 0, None) / p["w0"]) ** 2)  # base
        d *= 1 - 0.45 * np.clip(zc / p["hmax"], 0, 1)  # thinning with height
        shift = int(p["rise"] * age) % self.h  # wisps travel upwards over time
        turb = p["turb"][top + shift:bot + shift, x0:x1]
        d *= np.clip(0.7 + 0.45 * turb, 0.1, 1.6)
        a = p["amax"] * (1 - np.exp(-p["dens"] * d))
        vis[top:bot, x0:x1] = a * (1 - p["occ"][top:bot, x0:x1])
        return vis


SYNTHETIC_KINDS.add("synthetic_smoke", SyntheticKind(SyntheticSmokeConfig, generate_synthetic_smoke))
