"""Version of the scoring rules; results made by another version are stale on the leaderboard."""

EVALUATOR_VERSION = "0.2.0"  # 0.2.0: fire-spread burnt iff p > threshold, ECE floor, held-out truth
