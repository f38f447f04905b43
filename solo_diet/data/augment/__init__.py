"""Batched per-sample image augmentations on (B, C, H, W) tensors, GPU or CPU, torch only
(docs/gpu-augmentations.md): every random parameter is a per-sample tensor, so one call transforms
a batch with no loop over samples and no host synchronisation. Images are uint8 (0..255) or float
(0..1), or for the crops a list of images of different sizes; the ops return float32 on the 0..1
scale, except :func:`normalize` and :func:`erase`. Callers import the package as ``ops``.
"""

from solo_diet.data.augment.photometric import (
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
from solo_diet.data.augment.resample import Images, image_sides, resize_center_crop, resized_crop
from solo_diet.data.augment.sampling import (
    BLUR_SIGMA,
    sample_erasing_boxes,
    sample_order,
    sample_resized_crop_boxes,
    uniform,
)
