"""Version of the scoring rules; results made by another version are stale on the leaderboard."""

EVALUATOR_VERSION = "0.4.0"  # 0.4.0: ignore regions (COCO crowd protocol), 0/0 values null, silent_failure needs no FP rise, strata
