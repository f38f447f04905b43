"""Batched per-sample image augmentations on (B, C, H, W) tensors, torch only, no host sync
(docs/gpu-augmentations.md): uint8 or float input (or a list of sizes for the crops), float32 0..1
output except :func:`normalize` and :func:`erase`. Callers import the package as ``ops``."""

from solo_diet.core.data.augment.photometric import (
    adjust_hue,
    color_jitter,
    constant,
    equalize,
    erase,
    gaussian_blur,
    grayscale,
    normalize,
    solarize,
    to_float,
)
from solo_diet.core.data.augment.resample import (
    BLUR_SIGMA,
    Images,
    image_sides,
    resize_center_crop,
    resized_crop,
    sample_erasing_boxes,
    sample_order,
    sample_resized_crop_boxes,
    uniform,
)
