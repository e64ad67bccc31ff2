"""AegisBench corruption engine: physically motivated corruptions x 3 severities.

The corruptions and their disaster families: :func:`corruption_families` (the registry, in
table order; each family module registers its own); plus the WARP perturbations
(``warp_noise``, ``cloud_patch``: registry entries of kind ``warp``, outside the
families). Every entry is a pure function ``fn(image, rng, *, px_per_kpx=None,
**params)``; conditions are applied with deterministic seeding by :func:`apply_condition`.

>>> import numpy as np
>>> import aegisbench.corruptions as C
>>> img = np.full((48, 64, 3), 110, np.uint8)
>>> out = C.apply_condition("dust_haze_s3", img, key=("0.1.0", "demo", "img_1"))
>>> out.shape == img.shape and out.dtype == np.uint8
True
>>> C.list_conditions()[:3]
['water_glare_s1', 'water_glare_s2', 'water_glare_s3']
"""

from __future__ import annotations

from aegisbench.corruptions.calibrate import (
    CalibrationReport, LadderReport, calibrate, load_table, save_table, select_sample,
)
from aegisbench.corruptions.conditions import (
    CLEAN, REFERENCE_TARGET_PX, apply_condition, condition_name, from_config_name,
    list_conditions, median_target_size, parse_condition, px_per_kpx, to_config_name,
)
from aegisbench.corruptions.earthquake import dust_haze
from aegisbench.corruptions.flood import inundation, turbidity_cast, water_glare
from aegisbench.corruptions.registry import (
    SEVERITIES, CorruptionSpec, PerturbationSpec, SeverityTable, corruption, corruption_families, default_table,
    get_spec, names, perturbation,
)
from aegisbench.corruptions.statistics import STATISTICS, measure
from aegisbench.corruptions.storm import line_blur, low_light, motion_blur, rain_streaks
from aegisbench.corruptions.warp import (
    cloud_patch, cloud_patch_variants, cloud_sprite, grid_boxes, paste_sprite, warp_level_name, warp_noise,
)
from aegisbench.corruptions.wildfire import fire_warm_tint, smoke_haze

__all__ = [
    "CLEAN", "REFERENCE_TARGET_PX", "SEVERITIES", "STATISTICS",
    "CalibrationReport", "CorruptionSpec", "LadderReport", "PerturbationSpec", "SeverityTable",
    "apply_condition", "calibrate", "cloud_patch", "cloud_patch_variants", "cloud_sprite", "condition_name",
    "corruption", "corruption_families", "default_table", "dust_haze", "fire_warm_tint", "from_config_name",
    "get_spec", "grid_boxes", "inundation", "line_blur", "list_conditions", "load_table",
    "low_light", "measure", "median_target_size", "motion_blur", "names", "parse_condition",
    "paste_sprite", "px_per_kpx", "rain_streaks", "save_table", "select_sample",
    "smoke_haze", "to_config_name", "turbidity_cast", "warp_level_name", "warp_noise",
    "water_glare",
]
