"""Freeze the confidence threshold: maximum F1 on clean validation, under the shared matcher.

Counts at every candidate threshold come from one matching pass (see
:mod:`aegisbench.evaluation.matching`): a prediction is kept iff
``float32(score) >= float32(threshold)``. F1 is pooled over images,
``2 TP / (2 TP + FP + FN)`` (0 when the denominator is 0). Ties in F1 go to the
**higher** threshold (fewer alarms for the same F1).

Candidates are the distinct prediction scores, or ``grid`` if given (seed 001 uses
``0.01, 0.02, ..., 0.20``; see :func:`seed_001_grid`). A score-derived threshold is
returned as the shortest decimal with the same float32 value. With no prediction at
all the result is ``(1.0, 0.0)``.

The named rules (:data:`RULES`) and the rule each detection track freezes with unless
``evaluate --threshold-grid`` names another (:data:`TRACK_RULE`) are declared here, once:
the smoke track follows seed 001 (PyroNear2025 searched its confidence threshold on
``k/100, k = 1..20``), the sar track the reference release (maximum F1 over every clean
validation score, the exact optimum; no seed prescribes a grid for it).

>>> import numpy as np
>>> from aegisbench.evaluation.matching import match_images
>>> m = match_images([np.array([[0, 0, 10, 10], [20, 20, 30, 30]])], [np.array([0.9, 0.4])],
...                  [np.array([[0, 0, 10, 10]])])
>>> freeze_threshold(m)
(0.9, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aegisbench.errors import BadInput
from aegisbench.evaluation.matching import BatchMatch
from aegisbench.fields import check_float
from aegisbench.stats import count_ratios
from aegisbench.vocab import SAR, SMOKE


def seed_001_grid() -> np.ndarray:
    """``k / 100`` for k = 1..20 (the PyroNear2025 threshold search grid)."""
    return np.arange(1, 21) / 100.0


#: threshold rules by name: ``scores`` searches every distinct clean validation score, ``seed001``
#: seed 001's grid
RULES = {"scores": "every distinct clean _val score", "seed001": "seed 001's grid k/100, k = 1..20 (0.01..0.20)"}
#: the rule each detection track freezes its threshold with unless ``--threshold-grid`` names another
TRACK_RULE = {SAR: "scores", SMOKE: "seed001"}


def rule_grid(rule: str) -> tuple[float, ...] | None:
    """The candidates of a named rule (None: every distinct score).

    >>> rule_grid("scores"), rule_grid("seed001")[-1]
    (None, 0.2)
    """
    if rule not in RULES:
        raise ValueError(f"threshold rule must be one of {sorted(RULES)}, got {rule!r}")
    return None if rule == "scores" else tuple(float(v) for v in seed_001_grid())


def check_grid(values, where: str = "threshold_grid") -> tuple[float, ...]:
    """``values`` as a non-empty tuple of floats in [0, 1]; :class:`BadInput` at ``where`` otherwise.

    >>> check_grid([0.5, 2], where="--threshold-grid")
    Traceback (most recent call last):
    ...
    aegisbench.errors.BadInput: --threshold-grid: value 2: must lie in [0, 1], got 2
    """
    values = tuple(values)
    if not values:
        raise BadInput("needs at least one threshold in [0, 1]", where=where)
    for i, v in enumerate(values):
        check_float(v, f"value {i + 1}", 0, 1, error=BadInput, where=f"{where}: value {i + 1}")
    return tuple(float(v) for v in values)


def f1_curve(match: BatchMatch, thresholds: Sequence[float] | np.ndarray) -> dict[str, np.ndarray]:
    """Pooled TP, FP, FN, precision, recall, F1 at each threshold (vectorised, no rematching)."""
    thr = np.asarray(thresholds, np.float64).reshape(-1)
    thr32 = thr.astype(np.float32)
    s = np.asarray(match.score, np.float32)
    tp_flag = match.tp
    s_tp, s_fp = np.sort(s[tp_flag]), np.sort(s[match.fp])  # on an ignore region: neither
    tp = len(s_tp) - np.searchsorted(s_tp, thr32, side="left")  # scores >= threshold
    fp = len(s_fp) - np.searchsorted(s_fp, thr32, side="left")
    fn = len(match.gt_image) - tp
    ratios = count_ratios(np.stack([tp, fp, fn], axis=-1))
    return {"threshold": thr, "tp": tp, "fp": fp, "fn": fn, **ratios}


def freeze_threshold(match: BatchMatch, grid: Sequence[float] | np.ndarray | None = None) -> tuple[float, float]:
    """``(threshold, f1)`` maximising pooled F1; ties go to the higher threshold."""
    if grid is None:
        cand = np.unique(np.asarray(match.score, np.float32)).astype(np.float64)
    else:
        cand = np.unique(np.asarray(grid, np.float64))
        if cand.size == 0 or not np.isfinite(cand).all() or cand.min() < 0 or cand.max() > 1:
            raise ValueError("grid must be non-empty and within [0, 1]")
    if cand.size == 0:
        return 1.0, 0.0
    f1 = f1_curve(match, cand)["f1"]
    best = np.flatnonzero(f1 == f1.max())[-1]  # candidates ascending: last = highest threshold
    if grid is None:  # shortest decimal that is the same float32 (0.9, not 0.8999999761581421)
        return float(np.format_float_positional(np.float32(cand[best]), unique=True)), float(f1[best])
    return float(cand[best]), float(f1[best])
