"""Version of the scoring rules; results made by another version are stale on the leaderboard."""

EVALUATOR_VERSION = "0.1.0"
