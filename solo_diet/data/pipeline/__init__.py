"""solo-learn's augmentation nodes as batched GPU pipelines (torch only; docs/gpu-augmentations.md).

:class:`AugmentationNode` parses one node (:mod:`.nodes`); in :mod:`.views`,
:class:`MultiCropAugmentation` turns the list into views as solo-learn's ``FullTransformPipeline``,
:class:`EvalTransform` and :class:`ProbeTrainTransform` are the probes' transforms and
:class:`CapturedAugmentation` replays any of them as CUDA graphs.
"""

from solo_diet.data.pipeline.nodes import DATASET_STATS, IMAGENET_STATS, AugmentationNode
from solo_diet.data.pipeline.views import (
    CapturedAugmentation,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
