"""solo-learn's augmentation nodes as batched GPU pipelines (torch only).

:class:`AugmentationNode` parses one of solo-learn's augmentation nodes (every key of
``solo.data.pretrain_dataloader.build_transform_pipeline``, plus our ``random_erasing``);
:class:`MultiCropAugmentation` turns the list into views, node by node and ``num_crops`` times each,
as solo-learn's ``FullTransformPipeline`` of ``NCropAugmentation`` s. :class:`EvalTransform` and
:class:`ProbeTrainTransform` are the probes' validation and training transforms;
:class:`CapturedAugmentation` replays any of them as CUDA graphs. The op order per view is
solo-learn's: crop (or resize), colour jitter, grayscale, blur, solarization, equalization, flip,
normalisation, random erasing. An op whose probability is 0 in every node is never computed.

Rooms: :mod:`.nodes` (parsing a node), :mod:`.views` (the multi-crop pipeline), :mod:`.probes`,
:mod:`.captured`; import from this package.
"""

from solo_diet.data.pipeline.captured import CapturedAugmentation
from solo_diet.data.pipeline.nodes import DATASET_STATS, IMAGENET_STATS, AugmentationNode
from solo_diet.data.pipeline.probes import EvalTransform, ProbeTrainTransform
from solo_diet.data.pipeline.views import MultiCropAugmentation

__all__ = [
    "DATASET_STATS",
    "IMAGENET_STATS",
    "AugmentationNode",
    "CapturedAugmentation",
    "EvalTransform",
    "MultiCropAugmentation",
    "ProbeTrainTransform",
]
