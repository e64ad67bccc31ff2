"""The leaderboard: long-format results aggregated per condition, the page and its exports."""
