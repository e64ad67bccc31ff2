"""Version of the scoring rules; results made by another version are stale on the leaderboard."""

# 0.4.0: ignore regions (COCO crowd protocol), 0/0 values null, silent_failure needs no FP rise, strata
# 0.5.0: label_match (share of kept clean test boxes that copy a test label); content_sha256 in the provenance
# 0.6.0: smoke freezes its threshold on seed 001's grid by default (threshold.TRACK_RULE); ece_seed003 (fire spread);
#        WARP gamma counts deceiving detections (seed 000's D_i) and gamma_positions the positions deceived; the
#        WARP noise sweep is read from warp_noise.parquet, each L(a) with its bootstrap interval
EVALUATOR_VERSION = "0.6.0"
