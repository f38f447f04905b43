"""Batched per-sample image augmentations on (B, C, H, W) tensors, torch only, no host sync
(docs/gpu-augmentations.md): uint8 or float input (or a list of sizes for the crops), float32 0..1
output except :func:`normalize` and :func:`erase`. Callers import the package as ``ops``. Here the
photometric ops, normalisation and random erasing; crops and their boxes in ``resample``."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from solo_diet.core.data.augment.resample import (
    BLUR_SIGMA,
    Box,
    Images,
    image_sides,
    resize_center_crop,
    resized_crop,
    sample_erasing_boxes,
    sample_order,
    sample_resized_crop_boxes,
    uniform,
)


@functools.cache
def constant(values: tuple, device: torch.device, shape: tuple = (-1,)) -> Tensor:
    """A float32 constant on ``device``, made once (no copy per call, none under capture)."""
    return torch.tensor(values, dtype=torch.float32, device=device).view(shape)


def to_float(images: Tensor) -> Tensor:
    """uint8 (0..255) or float (0..1) images as float32 on the 0..1 scale."""
    if images.dtype == torch.uint8:
        return images.float().div_(255)
    return images.float()


def normalize(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """``(x - mean) / std`` per channel; ``mean``/``std`` are (C,) or per sample (B, C)."""
    mean = mean.to(x).reshape(-1, x.shape[1], 1, 1)
    std = std.to(x).reshape(-1, x.shape[1], 1, 1)
    return torch.addcmul(-mean / std, x, 1 / std)


def erase(x: Tensor, box: Box, apply: Tensor, value: float = 0.0) -> Tensor:
    """Set each sample's box to ``value`` where ``apply`` (torchvision ``erase``)."""
    top, left, height, width = box
    ys = torch.arange(x.shape[-2], device=x.device)
    xs = torch.arange(x.shape[-1], device=x.device)
    inside_y = (ys >= top[:, None]) & (ys < (top + height)[:, None])
    inside_x = (xs >= left[:, None]) & (xs < (left + width)[:, None])
    mask = inside_y[:, :, None] & inside_x[:, None, :] & apply[:, None, None]
    return x.masked_fill(mask[:, None], value)


GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601 luma weights, as PIL's convert("L")
SOLARIZE_THRESHOLD = 128 / 255  # PIL ImageOps.solarize's default threshold 128, on the 0..1 scale


def luma(x: Tensor) -> Tensor:
    """(B, 1, H, W) ITU-R 601 luma of float RGB images."""
    r, g, b = x.unbind(1)
    return (GRAY_WEIGHTS[0] * r + GRAY_WEIGHTS[1] * g + GRAY_WEIGHTS[2] * b).unsqueeze(1)


def _require_rgb(x: Tensor) -> None:
    if x.shape[1] != 3:
        raise ValueError(f"colour ops need 3 channels, got images of shape {tuple(x.shape)}")


def grayscale(images: Tensor, apply: Tensor | None = None) -> Tensor:
    """3-channel ITU-R 601 grayscale of the samples where ``apply`` (B,) is True (all when None)."""
    x = to_float(images)
    _require_rgb(x)
    gray = luma(x).expand_as(x)
    return gray.contiguous() if apply is None else torch.where(apply[:, None, None, None], gray, x)


def adjust_hue(images: Tensor, shift: Tensor) -> Tensor:
    """Rotate the HSV hue by ``shift`` (B,) turns (torchvision ``adjust_hue``), staying in RGB."""
    x = to_float(images)
    _require_rgb(x)
    top = x.argmax(1, keepdim=True)  # first maximal channel: r, then g, then b (HSV's rule)
    value = x.gather(1, top)
    chroma = value - x.amin(1, keepdim=True)
    # channel c's hue within its sector: (x[c + 1] - x[c + 2]) / chroma, sector c starts at 2 c
    within = (x.roll(-1, 1) - x.roll(-2, 1)).gather(1, top)
    turns = shift.to(x).reshape(-1, 1, 1, 1)
    hue6 = within / torch.where(chroma > 0, chroma, 1.0) + 2 * top + 6 * turns
    sector = (hue6 + constant((5.0, 3.0, 1.0), x.device, (1, 3, 1, 1))).remainder_(6)
    ramp = torch.minimum(sector, 4 - sector).clamp_(0, 1)
    return value - chroma * ramp


def color_jitter(images: Tensor, factors: Tensor, hue: Tensor | None, order: Tensor) -> Tensor:
    """torchvision ``ColorJitter`` per sample: ``factors`` (B, 3), ``hue`` (B,) or None, ``order``
    the ops' order, as colour matrices around one hue rotation (docs/gpu-augmentations.md)."""
    x = to_float(images)
    _require_rgb(x)
    batch, channels, height, width = x.shape
    if hue is None:
        slots = order
    else:
        identity = torch.full((batch, 3), 3, dtype=torch.long, device=x.device)
        padded = torch.cat([identity, order, identity], 1)
        hue_position = torch.argmax((order == 3).long(), 1, keepdim=True)
        # the slots around the hue op at p of [3 identities, order, 3 identities]: p + (0..2, 4..6)
        around = torch.arange(6, device=x.device)
        around = around + (around >= 3)
        slots = padded.gather(1, hue_position + around)
    table = torch.cat([factors.to(x), torch.ones(batch, 1, device=x.device)], 1)
    factor = table.gather(1, slots)  # (B, slots)
    weights = constant(GRAY_WEIGHTS, x.device)
    to_gray = ((slots == 2) * (1 - factor))[..., None, None] * weights.expand(channels, 3)
    matrices = factor[..., None, None] * torch.eye(3, device=x.device) + to_gray
    to_mean = (slots == 1) * (1 - factor)
    pixels = x.reshape(batch, channels, height * width)
    for slot in range(slots.shape[1]):
        if hue is not None and slot == 3:
            shifted = adjust_hue(pixels.view_as(x), hue).view_as(pixels)
            pixels = torch.where((hue != 0)[:, None, None], shifted, pixels)
        offset = (to_mean[:, slot] * (pixels.mean(2) @ weights))[:, None, None]
        pixels = _mix_channels(matrices[:, slot], offset, pixels).clamp_(0, 1)
    return pixels.view_as(x)


def _mix_channels(matrix: Tensor, offset: Tensor, pixels: Tensor) -> Tensor:
    """``matrix @ pixels + offset`` (a batched product when small, multiply-adds when large)."""
    if pixels.shape[-1] <= 64 * 64:
        return torch.baddbmm(offset, matrix, pixels)
    out = torch.addcmul(offset, matrix[:, :, 0:1], pixels[:, 0:1])
    out.addcmul_(matrix[:, :, 1:2], pixels[:, 1:2])
    return out.addcmul_(matrix[:, :, 2:3], pixels[:, 2:3])


def solarize(images: Tensor, apply: Tensor | None = None) -> Tensor:
    """Invert the values >= 128/255 (PIL ``ImageOps.solarize``) where ``apply`` (B,) is True."""
    x = to_float(images)
    above = x >= SOLARIZE_THRESHOLD
    if apply is not None:
        above = above & apply[:, None, None, None]
    return torch.where(above, 1 - x, x)


def equalize(images: Tensor, apply: Tensor | None = None) -> Tensor:
    """Per-channel histogram equalisation (torchvision ``equalize``) where ``apply``."""
    if images.dtype == torch.uint8:
        levels = images.long()
    else:
        levels = images.float().mul(255).round_().clamp_(0, 255).long()
    batch, channels, height, width = levels.shape
    flat = levels.view(batch * channels, height * width)
    hist = torch.zeros(batch * channels, 256, dtype=torch.long, device=levels.device)
    hist.scatter_add_(1, flat, torch.ones_like(flat))
    bins = torch.arange(256, device=levels.device)
    last = torch.argmax(bins * (hist > 0), 1, keepdim=True)
    step = (height * width - hist.gather(1, last)) // 255
    before = hist.cumsum(1) - hist
    lut = ((before + step // 2) // step.clamp(min=1)).clamp_(max=255)
    lut = torch.where(step > 0, lut, bins)
    out = lut.gather(1, flat).view_as(levels).float().div_(255)
    if apply is None:
        return out
    return torch.where(apply[:, None, None, None], out, to_float(images))


def gaussian_blur(
    images: Tensor, sigma: Tensor, radius: int, apply: Tensor | None = None
) -> Tensor:
    """Gaussian blur with per-sample ``sigma`` (torchvision ``gaussian_blur``) where ``apply``."""
    x = to_float(images)
    batch, channels, height, width = x.shape
    offsets = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
    kernel = torch.exp(-0.5 * (offsets / sigma.to(x)[:, None]) ** 2)
    kernel = (kernel / kernel.sum(1, keepdim=True)).repeat_interleave(channels, 0)
    taps = 2 * radius + 1
    blurred = F.pad(x.reshape(1, batch * channels, height, width), [radius] * 4, mode="reflect")
    blurred = F.conv2d(blurred, kernel.view(-1, 1, taps, 1), groups=batch * channels)
    blurred = F.conv2d(blurred, kernel.view(-1, 1, 1, taps), groups=batch * channels)
    blurred = blurred.view_as(x)
    return blurred if apply is None else torch.where(apply[:, None, None, None], blurred, x)
