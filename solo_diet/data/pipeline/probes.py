"""The linear and online probes' transforms: :class:`EvalTransform` (validation) and
:class:`ProbeTrainTransform` (training)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from solo_diet.data import augment as ops


class EvalTransform:
    """Resize the shorter side to ``resize_size`` (default ``round(crop_size * 256 / 224)``),
    centre-crop ``crop_size``, normalise: the probes' validation transform (bilinear, antialiased,
    as torchvision's ``Resize`` + ``CenterCrop``)."""

    def __init__(
        self,
        crop_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        resize_size: int | None = None,
    ) -> None:
        self.crop_size = crop_size
        self.resize_size = resize_size or round(crop_size * 256 / 224)
        if self.resize_size < crop_size:
            raise ValueError(f"resize_size {self.resize_size} is smaller than crop {crop_size}")
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def __call__(
        self, images: ops.Images, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """A (B, C, H, W) batch, or a list of B images of different sizes."""
        height, width = ops.image_sides(images, len(images))
        same = isinstance(height, int) and min(height, width) == max(height, width)
        if same and height == self.resize_size == self.crop_size:
            x = ops.to_float(images)
        else:
            x = ops.resize_center_crop(images, self.resize_size, self.crop_size)
        return ops.normalize(x, ops.constant(self.mean, x.device), ops.constant(self.std, x.device))


class ProbeTrainTransform:
    """RandomResizedCrop(scale=(min_scale, 1), bilinear) + horizontal flip + normalise: the probes'
    training transform."""

    def __init__(
        self, crop_size: int, mean: Sequence[float], std: Sequence[float], min_scale: float = 0.08
    ) -> None:
        self.crop_size, self.min_scale = crop_size, min_scale
        self.mean, self.std = tuple(map(float, mean)), tuple(map(float, std))

    def __call__(
        self, images: ops.Images, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """A (B, C, H, W) batch, or a list of B images of different sizes."""
        count, device = len(images), images[0].device
        height, width = ops.image_sides(images, count)
        box = ops.sample_resized_crop_boxes(
            generator, count, height, width, (self.min_scale, 1.0), device
        )
        flip = ops.uniform(generator, count, device) < 0.5
        size = (self.crop_size, self.crop_size)
        x = ops.resized_crop(images, *box, size, flip=flip, interpolation="bilinear")
        return ops.normalize(x, ops.constant(self.mean, device), ops.constant(self.std, device))
