"""Per-sample crop boxes from a generator on the images' device (torchvision's laws), and crop,
resize and flip in one separable antialiased pass (per shape for a list of sizes)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Union

import torch
from torch import Tensor

Images = Union[Tensor, Sequence[Tensor]]  # a (B, C, H, W) batch, or B (C, H, W) of different sizes
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
    if not isinstance(height, Tensor):  # Python floats: graph capture refuses a CPU tensor's copy
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


def _bicubic(x: Tensor) -> Tensor:
    """PIL's (and torch's antialiased) cubic convolution kernel with a = -0.5, support 2."""
    a = -0.5
    x = x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


# bilinear: the triangle kernel, support 1
_KERNELS = {"bicubic": _bicubic, "bilinear": lambda x: (1 - x.abs()).clamp_(min=0)}


def _axis_weights(
    in_size: int,
    start: Tensor,
    length: Tensor,
    virtual_size: int,
    first: int,
    count: int,
    interpolation: str,
    flip: Tensor | None = None,
) -> Tensor:
    """(R, count, in_size) weights resampling an axis window to ``virtual_size``: PIL's antialiased
    kernel, as torchvision's ``resize(antialias=True)``."""
    device = start.device
    start, length = start.float(), length.float()
    scale = length / virtual_size
    stretch = scale.clamp(min=1.0)
    outputs = torch.arange(first, first + count, device=device, dtype=torch.float32)
    centre = (outputs + 0.5)[None, :, None] * scale[:, None, None]
    taps = torch.arange(in_size, device=device, dtype=torch.float32) - start[:, None, None]
    weights = _KERNELS[interpolation]((taps + 0.5 - centre) / stretch[:, None, None])
    weights = weights * ((taps >= 0) & (taps < length[:, None, None]))
    weights = weights / weights.sum(-1, keepdim=True)
    if flip is not None:
        weights = torch.where(flip[:, None, None], weights.flip(1), weights)
    return weights


def _apply_separable(images: Tensor, rows: Tensor, cols: Tensor) -> Tensor:
    """``rows @ image @ cols^T`` per output sample r, reading image ``r % B``; clamped to 0..1."""
    batch, channels, height, width = images.shape
    out_h, out_w = rows.shape[1], cols.shape[1]
    repeats = rows.shape[0] // batch
    scale = 1 / 255 if images.dtype == torch.uint8 else 1.0
    x = images.float()
    rows = rows.view(repeats, batch, out_h, height) * scale
    cols = cols.view(repeats, batch, out_w, width)
    if out_h * width * (height + out_w) <= out_w * height * (width + out_h):
        x = torch.einsum("kbyh,bchw->kbcyw", rows, x)
        x = torch.einsum("kbcyw,kbxw->kbcyx", x, cols)
    else:
        x = torch.einsum("kbxw,bchw->kbchx", cols, x)
        x = torch.einsum("kbchx,kbyh->kbcyx", x, rows)
    return x.reshape(repeats * batch, channels, out_h, out_w).clamp_(0, 1)


def to_device(host: Tensor, device: torch.device) -> Tensor:
    """A small host tensor on ``device`` without waiting for the device (pinned, asynchronous)."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _by_shape(
    images: Sequence[Tensor],
    count: int,
    size: tuple[int, int],
    resample: Callable[[Tensor, Tensor], Tensor],
) -> Tensor:
    """(count, C, *size) rows from B images of different sizes, each shape resampled together."""
    batch = len(images)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, image in enumerate(images):
        groups.setdefault(tuple(image.shape), []).append(i)
    device, views = images[0].device, count // batch
    order = [k * batch + i for members in groups.values() for k in range(views) for i in members]
    order_on_device = to_device(torch.tensor(order, dtype=torch.int64), device)
    out = torch.empty((count, images[0].shape[0], *size), device=device)
    start = 0
    for members in groups.values():
        rows = order_on_device[start : start + views * len(members)]
        start += len(rows)
        out.index_copy_(0, rows, resample(torch.stack([images[i] for i in members]), rows))
    return out


def resized_crop(
    images: Images,
    top: Tensor,
    left: Tensor,
    height: Tensor,
    width: Tensor,
    size: tuple[int, int],
    flip: Tensor | None = None,
    interpolation: str = "bicubic",
) -> Tensor:
    """Crop boxes (R,) resized to ``size`` and mirrored where ``flip``, in one antialiased pass;
    row r reads image ``r % B`` (several views per call); ``images`` may differ in size."""
    if not isinstance(images, Tensor):

        def crop(group: Tensor, rows: Tensor) -> Tensor:
            box = (top[rows], left[rows], height[rows], width[rows])
            mirror = None if flip is None else flip[rows]
            return resized_crop(group, *box, size, mirror, interpolation)

        return _by_shape(images, top.shape[0], size, crop)
    in_h, in_w = images.shape[-2:]
    rows = _axis_weights(in_h, top, height, size[0], 0, size[0], interpolation)
    cols = _axis_weights(in_w, left, width, size[1], 0, size[1], interpolation, flip)
    return _apply_separable(images, rows, cols)


def image_sides(images: Images, rows: int) -> tuple[int | Tensor, int | Tensor]:
    """Height and width of a batch's images (per row for a list of sizes)."""
    if isinstance(images, Tensor):
        return images.shape[-2], images.shape[-1]
    sides = torch.tensor([tuple(image.shape[-2:]) for image in images], dtype=torch.int64)
    sides = to_device(sides, images[0].device).repeat(rows // len(images), 1)
    return sides[:, 0], sides[:, 1]


def resize_center_crop(
    images: Images,
    resize_size: int,
    crop_size: int | None = None,
    flip: Tensor | None = None,
    interpolation: str = "bilinear",
) -> Tensor:
    """torchvision ``Resize`` then ``CenterCrop`` (None: none) and a mirror where ``flip``, in one
    pass; a list of images of different sizes needs ``crop_size``."""
    if not isinstance(images, Tensor):
        return _by_shape(
            images,
            len(images) if flip is None else flip.shape[0],
            (crop_size, crop_size),
            lambda group, rows: resize_center_crop(
                group, resize_size, crop_size, None if flip is None else flip[rows], interpolation
            ),
        )
    batch, _, in_h, in_w = images.shape
    batch = batch if flip is None else flip.shape[0]
    if in_h <= in_w:  # torchvision Resize(resize_size): the shorter side becomes resize_size
        new_h, new_w = resize_size, int(resize_size * in_w / in_h)
    else:
        new_h, new_w = int(resize_size * in_h / in_w), resize_size
    out_h, out_w = (new_h, new_w) if crop_size is None else (crop_size, crop_size)
    zeros = torch.zeros(batch, device=images.device)
    rows = _axis_weights(
        in_h, zeros, zeros + in_h, new_h, round((new_h - out_h) / 2), out_h, interpolation
    )
    cols = _axis_weights(
        in_w, zeros, zeros + in_w, new_w, round((new_w - out_w) / 2), out_w, interpolation, flip
    )
    return _apply_separable(images, rows, cols)
