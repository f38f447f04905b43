"""Batched per-sample image augmentations on (B, C, H, W) tensors, GPU or CPU, torch only.

Every random parameter is a per-sample tensor, so one call transforms a whole batch with no Python
loop over samples and no host synchronisation. Images are uint8 (0..255) or float (0..1); the
crops also take a list of images of different sizes (``Images``: the streaming source's decoded
batches). Every op returns float32 on the 0..1 scale, except :func:`normalize` and :func:`erase`,
which work on any float tensor. The ops follow torchvision's functional ops (parity tests in
``tests/core/test_gpu_augment_ops.py``; tolerances and deviations from solo-learn's PIL pipeline in
``docs/gpu-augmentations.md``). The ``sample_*`` functions draw torchvision's parameter
distributions from a given generator on the images' device.

Rooms: :mod:`.resample` (crop, resize, flip), :mod:`.photometric` (colour, blur, solarization,
equalization), :mod:`.tensors` (helpers, normalisation, erasing), :mod:`.sampling` (parameters).
Use them through this package: ``from solo_diet.data import augment as ops``.
"""

from solo_diet.data.augment.photometric import (
    adjust_hue,
    color_jitter,
    equalize,
    gaussian_blur,
    grayscale,
    solarize,
)
from solo_diet.data.augment.resample import (
    Images,
    horizontal_flip,
    image_sides,
    resize_center_crop,
    resized_crop,
)
from solo_diet.data.augment.sampling import (
    BLUR_SIGMA,
    sample_erasing_boxes,
    sample_order,
    sample_resized_crop_boxes,
    uniform,
)
from solo_diet.data.augment.tensors import constant, erase, normalize, to_float

__all__ = [
    "BLUR_SIGMA",
    "Images",
    "adjust_hue",
    "color_jitter",
    "constant",
    "equalize",
    "erase",
    "gaussian_blur",
    "grayscale",
    "horizontal_flip",
    "image_sides",
    "normalize",
    "resize_center_crop",
    "resized_crop",
    "sample_erasing_boxes",
    "sample_order",
    "sample_resized_crop_boxes",
    "solarize",
    "to_float",
    "uniform",
]
