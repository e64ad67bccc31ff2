"""Version of the scoring rules; results made by another version are stale on the leaderboard."""

EVALUATOR_VERSION = "0.3.0"  # 0.3.0: bootstrap resamples with a 0/0 ratio left out of its interval
