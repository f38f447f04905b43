"""solo-learn's augmentation nodes as batched GPU pipelines (torch only; docs/gpu-augmentations.md):
nodes parsed in :mod:`.nodes`; in :mod:`.views` the multi-view pipeline, the probes' transforms and
their replay as CUDA graphs.
"""

from solo_diet.data.pipeline.nodes import DATASET_STATS, IMAGENET_STATS, AugmentationNode
from solo_diet.data.pipeline.views import (
    CapturedAugmentation,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
