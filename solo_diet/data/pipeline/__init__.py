"""solo-learn's augmentation nodes as batched GPU pipelines (torch only; docs/gpu-augmentations.md).

:class:`AugmentationNode` parses one node (:mod:`.nodes`), :class:`MultiCropAugmentation` turns the
list into views as solo-learn's ``FullTransformPipeline`` (:mod:`.views`), :class:`EvalTransform`
and :class:`ProbeTrainTransform` are the probes' transforms (:mod:`.probes`) and
:class:`CapturedAugmentation` replays any of them as CUDA graphs (:mod:`.captured`).
"""

# ruff: noqa: F401 (the imports are the package's public names)

from solo_diet.data.pipeline.captured import CapturedAugmentation
from solo_diet.data.pipeline.nodes import DATASET_STATS, IMAGENET_STATS, AugmentationNode
from solo_diet.data.pipeline.probes import EvalTransform, ProbeTrainTransform
from solo_diet.data.pipeline.views import MultiCropAugmentation
