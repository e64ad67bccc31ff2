"""Wrapped detectors (Ultralytics, torchvision), the detect / warp-detect runners and the reference detector."""
