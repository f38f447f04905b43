"""Per-sample random parameters from a generator on the images' device (torchvision's laws)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

Box = tuple[Tensor, Tensor, Tensor, Tensor]

CROP_RATIO = (3 / 4, 4 / 3)  # torchvision RandomResizedCrop's aspect ratios (solo-learn keeps them)
BLUR_SIGMA = (0.1, 2.0)  # solo-learn GaussianBlur's sigma range
# torchvision RandomErasing's area and aspect-ratio ranges (solo-learn keeps them)
ERASING_SCALE, ERASING_RATIO = (0.02, 0.33), (0.3, 3.3)
ATTEMPTS = 10  # draws per box before the fallback (RandomResizedCrop and RandomErasing)


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


def _box_sides(generator, count, height, width, scale, ratio, device):
    area = height * width
    ratio_log = (math.log(ratio[0]), math.log(ratio[1]))
    target = area * uniform(generator, (ATTEMPTS, count), device, *scale).T
    aspect = torch.exp(uniform(generator, (count, ATTEMPTS), device, *ratio_log))
    return torch.round(torch.sqrt(target * aspect)), torch.round(torch.sqrt(target / aspect))


def _fallback_sides(height: int | Tensor, width: int | Tensor):
    """``RandomResizedCrop``'s central crop when no draw fits: the image clamped to the ratios."""
    low, high = CROP_RATIO
    if not isinstance(height, Tensor):
        if width / height < low:
            return float(width), float(round(width / low))
        if width / height > high:
            return float(round(height * high)), float(height)
        return float(width), float(height)
    height, width = height.double(), width.double()
    narrow, wide = width / height < low, width / height > high
    fallback_w = torch.where(wide, torch.round(height * high), width)
    fallback_h = torch.where(narrow, torch.round(width / low), height)
    return fallback_w.float(), fallback_h.float()


def sample_resized_crop_boxes(
    generator: torch.Generator | None,
    count: int,
    height: int | Tensor,
    width: int | Tensor,
    scale: tuple[float | Tensor, float | Tensor],
    device: str | torch.device,
) -> Box:
    """torchvision ``RandomResizedCrop.get_params`` for ``count`` samples."""
    per_sample = isinstance(height, Tensor)
    side_h, side_w = (height[:, None], width[:, None]) if per_sample else (height, width)
    crop_w, crop_h = _box_sides(generator, count, side_h, side_w, scale, CROP_RATIO, device)
    fits = (crop_w > 0) & (crop_w <= side_w) & (crop_h > 0) & (crop_h <= side_h)
    crop_w, found = _first_valid(crop_w, fits)
    crop_h, _ = _first_valid(crop_h, fits)
    fallback_w, fallback_h = _fallback_sides(height, width)
    crop_w = torch.where(found, crop_w, fallback_w).long()
    crop_h = torch.where(found, crop_h, fallback_h).long()
    top = _place(generator, count, height - crop_h, device)
    left = _place(generator, count, width - crop_w, device)
    top = torch.where(found, top, (height - crop_h) // 2)
    left = torch.where(found, left, (width - crop_w) // 2)
    return top, left, crop_h, crop_w


def sample_erasing_boxes(
    generator: torch.Generator | None, count: int, height: int, width: int, device
) -> tuple[Box, Tensor]:
    """torchvision ``RandomErasing.get_params`` for ``count`` samples, and whether one fitted."""
    erase_h, erase_w = _box_sides(
        generator, count, height, width, ERASING_SCALE, ERASING_RATIO, device
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
