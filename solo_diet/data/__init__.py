"""Batched GPU data path: per-sample augmentations and solo-learn's augmentation pipelines (torch
only)."""

from solo_diet.data.pipeline import (
    AugmentationNode,
    CapturedAugmentation,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)

__all__ = [
    "AugmentationNode",
    "CapturedAugmentation",
    "EvalTransform",
    "MultiCropAugmentation",
    "ProbeTrainTransform",
]
