"""solo-learn's augmentation nodes as batched GPU pipelines (docs/gpu-augmentations.md)."""

from solo_diet.core.data.pipeline.nodes import DATASET_STATS, IMAGENET_STATS, AugmentationNode
from solo_diet.core.data.pipeline.views import (
    CapturedAugmentation,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
