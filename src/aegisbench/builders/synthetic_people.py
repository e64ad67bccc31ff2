"""Person figures of the synthetic SAR source: poses, clothing, skin and hair colours,
drawn supersampled with a cast shadow; the box comes from the drawn coverage mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np


_BRIGHT = ((205, 40, 40), (232, 120, 30), (228, 205, 45), (40, 85, 205), (115, 165, 225),
           (236, 236, 230), (222, 100, 165), (125, 60, 165), (60, 180, 75), (40, 170, 180))
_DRAB = ((95, 100, 55), (150, 135, 95), (100, 70, 45), (60, 60, 62), (35, 40, 72),
         (28, 28, 30), (80, 90, 60), (100, 38, 42))
_TROUSERS = ((50, 65, 112), (30, 30, 32), (140, 125, 90), (90, 90, 92), (85, 62, 42))
_SKIN = ((240, 200, 170), (225, 180, 140), (190, 140, 100), (140, 95, 65), (95, 65, 45))
_HAIR = ((25, 20, 18), (60, 40, 25), (110, 75, 45), (200, 170, 110), (160, 160, 155))
_POSES = ("standing", "walking", "sitting", "lying")
_SS = 3  # figure supersampling factor


@dataclass(frozen=True)
class Figure:
    cover: np.ndarray  # float32 (s, s) coverage in [0, 1]
    premult: np.ndarray  # float32 (s, s, 3) colour * coverage
    shadow: np.ndarray  # float32 (s, s) cast-shadow opacity in [0, 1]
    anchor: int  # canvas pixel that sits on the placement point


def random_person(rng: np.random.Generator, view: str) -> dict:
    """Pose, skeleton (unit body length, head top at y=0) and colours of one person."""
    pose = _POSES[rng.choice(4, p=(0.3, 0.3, 0.15, 0.25))]
    def pick(pal):
        return np.asarray(pal[rng.integers(len(pal))], np.float32) * rng.uniform(0.88, 1.1, 3)

    shirt = pick(_BRIGHT if rng.random() < 0.6 else _DRAB)
    legs = [((-0.06, 0.52), (-0.07, 0.98)), ((0.06, 0.52), (0.07, 0.98))]
    arms = [((-0.12, 0.22), (-0.17, 0.52)), ((0.12, 0.22), (0.17, 0.52))]
    if pose == "walking":
        s = rng.uniform(0.5, 1.0)
        legs = [((-0.06, 0.52), (-0.05 - 0.11 * s, 0.97)), ((0.06, 0.52), (0.05 + 0.11 * s, 0.96))]
        arms = [((-0.12, 0.22), (-0.2 - 0.06 * s, 0.48)), ((0.12, 0.22), (0.1, 0.52))]
    elif pose == "sitting":
        legs = [((-0.06, 0.52), (-0.11, 0.64), (-0.13, 0.8)),
                ((0.06, 0.52), (0.11, 0.64), (0.13, 0.8))]
        arms = [((-0.12, 0.22), (-0.11, 0.58)), ((0.12, 0.22), (0.11, 0.58))]
    elif pose == "lying" and rng.random() < 0.5:  # spread / arms overhead
        legs = [((-0.06, 0.52), (-0.17, 0.97)), ((0.06, 0.52), (0.17, 0.97))]
        arms = [((-0.12, 0.22), (-0.3, -0.04)), ((0.12, 0.22), (0.28, 0.0))]
    return {"pose": pose, "legs": legs, "arms": arms, "shirt": shirt,
            "trousers": shirt * 0.8 if rng.random() < 0.15 else pick(_TROUSERS),
            "skin": pick(_SKIN),
            "hair": pick(_HAIR) if rng.random() < 0.75 else pick(_BRIGHT + _DRAB),  # or a hat
            "tilt": rng.normal(0, 0.12), "angle": rng.uniform(0, 2 * math.pi),
            "fore": rng.uniform(0.35, 0.6), "view": view}


def _rot(theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]], np.float32)


def _up_to(direction: np.ndarray) -> np.ndarray:
    """Rotation taking the local "up" (0, -1) onto ``direction``."""
    return _rot(math.atan2(direction[1], direction[0]) + math.pi / 2)


def _primitives(p: dict):
    """(kind, colour, points, width) in unit coordinates, drawing order."""
    t = np.linspace(0, 2 * math.pi, 20, endpoint=False)
    torso = np.stack([0.12 * np.cos(t), 0.34 + 0.19 * np.sin(t)], 1)
    prims = [("line", p["trousers"], leg, 0.085) for leg in p["legs"]]
    prims.append(("poly", p["shirt"], torso, 0.0))
    prims += [("line", p["shirt"], arm, 0.065) for arm in p["arms"]]
    prims += [("dot", p["skin"], (arm[-1],), 0.035) for arm in p["arms"]]
    prims.append(("dot", p["skin"], ((0.0, 0.085),), 0.08))
    prims.append(("dot", p["hair"], ((0.0, 0.065),), 0.066))
    return [(k, c, np.asarray(pts, np.float32), wd) for k, c, pts, wd in prims]


def draw_figure(p: dict, size: float, radial: float, radius: float, sun, shadow_len: float,
            fx: float, fy: float) -> Figure:
    """Render one person (and cast shadow) so that the box long side is about ``size``."""
    prims = _primitives(p)
    centre = np.array([0.0, 0.5], np.float32)
    if p["pose"] == "lying":
        lin = np.diag([1.0, 0.8 if p["view"] == "oblique" else 1.0]) @ _rot(p["angle"])
    elif p["view"] == "oblique":
        lin = _rot(p["tilt"])
    else:  # nadir: upright people lean away from the image centre, foreshortened
        fore = p["fore"] + 0.35 * min(radius, 1.0)
        lin = _up_to(np.array([math.cos(radial), math.sin(radial)])) @ np.diag([1, fore])
    pts = np.concatenate([pr[2] for pr in prims]) - centre
    ext = (pts @ lin.T).max(0) - (pts @ lin.T).min(0) + 0.12
    body = size / float(ext.max())  # unit length in pixels
    sun = np.asarray(sun, np.float32)
    if p["pose"] == "lying":
        s_lin, s_off = lin, sun * 0.07 * body
    else:  # silhouette projected on the ground from the feet, along the sun direction
        s_lin = _up_to(sun) @ np.diag([1, shadow_len * (0.75 if p["pose"] == "sitting" else 1)])
        feet = np.array([0.0, 0.97], np.float32)
        s_off = ((feet - centre) @ lin.T - (feet - centre) @ s_lin.T) * body
    reach = max(np.abs(pts @ lin.T).max(), np.abs(pts @ s_lin.T).max()) * body
    half = int(math.ceil(reach + np.abs(s_off).max() + 0.12 * body)) + 3
    side = 2 * half + 1
    origin = np.array([half + fx, half + fy], np.float32)
    col = np.zeros((side * _SS, side * _SS, 3), np.uint8)
    mask = np.zeros((side * _SS, side * _SS), np.uint8)
    shadow = np.zeros_like(mask)
    for kind, colour, upts, wd in prims:
        c = tuple(float(v) for v in np.clip(colour, 0, 255))
        for canvas, m, off, value in ((col, lin, 0, c), (mask, lin, 0, 255),
                                      (shadow, s_lin, s_off, 255)):
            q = (((upts - centre) @ m.T) * body + origin + off) * _SS
            q = q.round().astype(np.int32)
            thick = max(1, int(round(wd * body * _SS)))
            if kind == "line":
                cv2.polylines(canvas, [q], False, value, thick)
            elif kind == "poly":
                cv2.fillPoly(canvas, [q], value)
            else:
                cv2.circle(canvas, (int(q[0, 0]), int(q[0, 1])), thick, value, -1)
    down = lambda a: cv2.resize(a.astype(np.float32), (side, side), interpolation=cv2.INTER_AREA)
    sh = cv2.GaussianBlur(down(shadow) / 255, (0, 0), 0.6)
    return Figure(down(mask) / 255, down(col), sh, half)
