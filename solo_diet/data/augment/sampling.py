"""Per-sample random parameters drawn from a given generator on the images' device, with
torchvision's distributions."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from solo_diet.data.augment.tensors import Box, Tensor

CROP_RATIO = (3 / 4, 4 / 3)
"""torchvision ``RandomResizedCrop``'s aspect-ratio range (solo-learn does not change it)."""

BLUR_SIGMA = (0.1, 2.0)
"""solo-learn ``GaussianBlur``'s sigma range."""


def uniform(generator: torch.Generator | None, shape, device, low=0.0, high=1.0) -> Tensor:
    """U(low, high) draws; ``low``/``high`` may be per-sample tensors."""
    draws = torch.rand(shape, generator=generator, device=device)
    if isinstance(low, float) and isinstance(high, float) and (low, high) == (0.0, 1.0):
        return draws
    return low + (high - low) * draws


def _place(generator, count: int, room: Tensor, device) -> Tensor:
    """Uniform integer offsets in ``0 .. room`` (torchvision's ``randint(0, room + 1)``)."""
    offset = torch.floor(uniform(generator, count, device) * (room + 1)).long()
    return torch.minimum(offset, room.long())


def _first_valid(candidates: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Per row, the first candidate (R, attempts) that is valid, and whether one was."""
    pick = torch.argmax(valid.long(), 1, keepdim=True)
    return candidates.gather(1, pick).squeeze(1), valid.any(1)


def _box_sides(generator, count, height, width, scale_low, scale_high, ratio, attempts, device):
    area = height * width
    ratio_log = (math.log(ratio[0]), math.log(ratio[1]))
    target = area * uniform(generator, (attempts, count), device, scale_low, scale_high).T
    aspect = torch.exp(uniform(generator, (count, attempts), device, *ratio_log))
    return torch.round(torch.sqrt(target * aspect)), torch.round(torch.sqrt(target / aspect))


def sample_resized_crop_boxes(
    generator: torch.Generator | None,
    count: int,
    height: int,
    width: int,
    scale: tuple[float | Tensor, float | Tensor],
    device: str | torch.device,
    ratio: Sequence[float] = CROP_RATIO,
    attempts: int = 10,
) -> Box:
    """torchvision ``RandomResizedCrop.get_params`` for ``count`` samples: up to ``attempts`` draws
    of area fraction ~ U(scale) and log aspect ratio ~ U(log ratio) each, the first that fits,
    otherwise the central crop clamped to the ratio range. ``scale`` bounds may be per sample."""
    crop_w, crop_h = _box_sides(
        generator, count, height, width, scale[0], scale[1], ratio, attempts, device
    )
    fits = (crop_w > 0) & (crop_w <= width) & (crop_h > 0) & (crop_h <= height)
    crop_w, found = _first_valid(crop_w, fits)
    crop_h, _ = _first_valid(crop_h, fits)
    if width / height < min(ratio):
        fallback_w, fallback_h = width, round(width / min(ratio))
    elif width / height > max(ratio):
        fallback_w, fallback_h = round(height * max(ratio)), height
    else:
        fallback_w, fallback_h = width, height
    crop_w = torch.where(found, crop_w, float(fallback_w)).long()
    crop_h = torch.where(found, crop_h, float(fallback_h)).long()
    top = _place(generator, count, height - crop_h, device)
    left = _place(generator, count, width - crop_w, device)
    top = torch.where(found, top, (height - crop_h) // 2)
    left = torch.where(found, left, (width - crop_w) // 2)
    return top, left, crop_h, crop_w


def sample_erasing_boxes(
    generator: torch.Generator | None,
    count: int,
    height: int,
    width: int,
    device: str | torch.device,
    scale: tuple[float, float] = (0.02, 0.33),
    ratio: tuple[float, float] = (0.3, 3.3),
    attempts: int = 10,
) -> tuple[Box, Tensor]:
    """torchvision ``RandomErasing.get_params`` (defaults) for ``count`` samples: the box and
    whether one of the ``attempts`` fitted (no erasing otherwise)."""
    erase_h, erase_w = _box_sides(
        generator, count, height, width, scale[0], scale[1], ratio, attempts, device
    )
    fits = (erase_h < height) & (erase_w < width)
    erase_h, found = _first_valid(erase_h, fits)
    erase_w, _ = _first_valid(erase_w, fits)
    erase_h, erase_w = erase_h.long(), erase_w.long()
    top = _place(generator, count, (height - erase_h).clamp(min=0), device)
    left = _place(generator, count, (width - erase_w).clamp(min=0), device)
    return (top, left, erase_h, erase_w), found


def sample_order(generator: torch.Generator | None, count: int, ops: int, device) -> Tensor:
    """(count, ops) uniformly random permutations of ``0 .. ops - 1`` (a ``randperm`` per row)."""
    return torch.argsort(torch.rand((count, ops), generator=generator, device=device), 1)
