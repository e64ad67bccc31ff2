"""Version of the scoring rules; results made by another version are stale on the leaderboard."""

# 0.4.0: ignore regions (COCO crowd protocol), 0/0 values null, silent_failure needs no FP rise, strata
# 0.5.0: label_match (share of kept clean test boxes that copy a test label); content_sha256 in the provenance
EVALUATOR_VERSION = "0.5.0"
