"""Batched GPU data path: per-sample augmentations and solo-learn's augmentation pipelines (torch
only)."""

# ruff: noqa: F401 (the imports are the package's public names)

from solo_diet.data.pipeline import (
    AugmentationNode,
    CapturedAugmentation,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
