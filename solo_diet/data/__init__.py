"""Batched GPU data path: per-sample augmentations and solo-learn's augmentation pipelines (torch
only)."""
