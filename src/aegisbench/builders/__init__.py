"""Builders: source tables, the HF dataset repo (configs, shards, manifest, card), verify and publish."""
