"""Evaluation: the shared matcher, COCO-identical mAP, frozen thresholds, bootstrap intervals.

>>> from aegisbench.evaluation import coco_map, map_from_arrays, match_images
"""

from aegisbench.evaluation.coco import coco_map, map_from_arrays
from aegisbench.evaluation.version import EVALUATOR_VERSION
from aegisbench.evaluation.matching import match_images
from aegisbench.evaluation.threshold import freeze_threshold

__all__ = ["EVALUATOR_VERSION", "coco_map", "map_from_arrays", "match_images", "freeze_threshold"]
