"""Metrics of the three tracks and the one registry every output reads.

* :mod:`~aegisbench.metrics.registry`: :class:`MetricSpec` (name, tracks, direction,
  bounds, unit, label, description, interval) and the registry, which refuses a name twice;
* :mod:`~aegisbench.metrics.per_condition`: the per-condition detection metrics, one
  decorated function per row name (``@metric``) or family (``@metric_group``), run by the
  evaluator on every condition (:mod:`~aegisbench.metrics.condition`);
* :mod:`~aegisbench.metrics.declared`: names computed in bulk by a track's scorer
  (fire-spread cells, the WARP patch test, the clean validation rows);
* plain functions: :mod:`~aegisbench.metrics.detection` (P / R / F1, size bands,
  localization, silent failure, effectiveness S), :mod:`~aegisbench.metrics.smoke`
  (image level, time to detect), :mod:`~aegisbench.metrics.warp` and
  :mod:`~aegisbench.metrics.forecast` (Brier, calibration, AP).

The registry imports the modules that register metrics (its plug-ins, declared by name
in :data:`~aegisbench.metrics.registry.REGISTRY`) on first read. An undefined value (a 0/0 ratio) is a
null row noted :data:`ZERO_DIVISION` (``"0/0"``), never 0.

>>> recall([[3, 1, 1], [0, 0, 2]]), precision([[3, 1, 1]]), round(f1([[3, 1, 1]]), 4)
(0.5, 0.75, 0.75)
>>> REGISTRY["recall"].direction, REGISTRY["brier"].direction, "f2r_f1" in REGISTRY
('higher', 'lower', False)
"""

from aegisbench.metrics.registry import (DIRECTIONS, HIGHER, LOWER, REGISTRY, UNBOUNDED, UNORDERED, Family,
                                         MetricRegistry, MetricSpec, declare, family, higher_is_better, label,
                                         metric, metric_group, selection, sign, spec)
from aegisbench.metrics.detection import (SIZE_BANDS, SilentFailureParams, _counts_update, _eff_terms, _ratio,
                                          effectiveness_breakdown, effectiveness_interval, effectiveness_score, f1,
                                          localization_stability, precision, recall, recall_by_size,
                                          relative_drop, silent_failure, size_band)
from aegisbench.metrics.smoke import (correct_frames, image_counts, image_level_prf, image_positive,
                                      sequence_delays, time_to_detect, time_to_detect_summary)
from aegisbench.metrics.warp import (deceived_position_rates, deception_counts, deception_heatmap, flip_probabilities,
                                     gamma_count_table, gamma_rates, map_percent_loss, warp_summary)
from aegisbench.metrics.forecast import (_bin_ids, _calibration_compute, _calibration_update, _check_prob,
                                         _pr_curve, auc_pr_trapezoid, average_precision, brier_decomposition,
                                         brier_score, calibration_curve, ece_per_map,
                                         expected_calibration_error, weighted_pr_areas)
from aegisbench.metrics.condition import ZERO_DIVISION, Cell, ConditionBootstrap, ConditionContext, condition_cells
# per_condition before declared: importing any metrics module runs this first, so the metrics
# register in the order every output lists them (the per-condition ones, then the declared ones)
from aegisbench.metrics.per_condition import (EFFECTIVENESS_BY_SIZE, RECALL_BY_SIZE, RELATIVE_DROP,
                                              effectiveness_of, sequence_delays_of)
from aegisbench.metrics.declared import SD_MAPS

__all__ = [
    "DIRECTIONS", "EFFECTIVENESS_BY_SIZE", "HIGHER", "LOWER", "RECALL_BY_SIZE", "REGISTRY", "RELATIVE_DROP",
    "SD_MAPS", "SIZE_BANDS", "UNBOUNDED", "UNORDERED", "Cell", "ConditionBootstrap", "ConditionContext", "Family",
    "MetricRegistry", "MetricSpec", "SilentFailureParams", "auc_pr_trapezoid", "average_precision",
    "brier_decomposition", "brier_score", "calibration_curve", "condition_cells", "correct_frames",
    "deceived_position_rates", "deception_counts", "deception_heatmap", "declare", "ece_per_map",
    "effectiveness_breakdown",
    "effectiveness_interval", "effectiveness_of", "effectiveness_score", "expected_calibration_error", "f1", "family",
    "flip_probabilities", "gamma_count_table", "gamma_rates", "higher_is_better", "image_counts",
    "image_level_prf", "image_positive", "label", "localization_stability", "map_percent_loss", "metric",
    "metric_group", "precision", "selection", "recall", "recall_by_size", "relative_drop", "sequence_delays",
    "sequence_delays_of", "sign", "silent_failure", "size_band", "spec", "time_to_detect",
    "time_to_detect_summary", "warp_summary", "weighted_pr_areas", "ZERO_DIVISION",
]
