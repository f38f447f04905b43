"""Batched per-sample image augmentations on (B, C, H, W) tensors, GPU or CPU, torch only.

Every random parameter is a per-sample tensor, so one call transforms a whole batch with no Python
loop over samples and no host synchronisation. Images are uint8 (0..255) or float (0..1); every op
returns float32 on the 0..1 scale, except :func:`normalize` and :func:`erase`, which work on any
float tensor. The ops follow torchvision's functional ops (parity tests in
``tests/core/test_gpu_augment_ops.py``; tolerances and deviations from solo-learn's PIL pipeline in
``docs/gpu-augmentations.md``). The ``sample_*`` functions draw torchvision's parameter
distributions from a given generator on the images' device.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

Tensor = torch.Tensor
Box = tuple[Tensor, Tensor, Tensor, Tensor]

GRAY_WEIGHTS = (0.299, 0.587, 0.114)
"""ITU-R 601 luma weights, as PIL's ``convert("L")``."""

SOLARIZE_THRESHOLD = 128 / 255
"""PIL ``ImageOps.solarize``'s default threshold 128 on the 0..1 scale."""

CROP_RATIO = (3 / 4, 4 / 3)
"""torchvision ``RandomResizedCrop``'s aspect-ratio range (solo-learn does not change it)."""

BLUR_SIGMA = (0.1, 2.0)
"""solo-learn ``GaussianBlur``'s sigma range."""


@functools.cache
def constant(values: tuple, device: torch.device, shape: tuple = (-1,)) -> Tensor:
    """A float32 constant on ``device``, made once: no host-to-device copy (a synchronisation, and
    not allowed under CUDA graph capture) per call."""
    return torch.tensor(values, dtype=torch.float32, device=device).view(shape)


def to_float(images: Tensor) -> Tensor:
    """uint8 (0..255) or float (0..1) images as float32 on the 0..1 scale."""
    if images.dtype == torch.uint8:
        return images.float().div_(255)
    return images.float()


# --- resampling: crop, resize and flip in one separable pass -----------------------------------


def _bicubic(x: Tensor) -> Tensor:
    """PIL's (and torch's antialiased) cubic convolution kernel with a = -0.5, support 2."""
    a = -0.5
    x = x.abs()
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return torch.where(x < 1, near, torch.where(x < 2, far, torch.zeros_like(x)))


def _bilinear(x: Tensor) -> Tensor:
    """Triangle kernel, support 1."""
    return (1 - x.abs()).clamp_(min=0)


_KERNELS = {"bicubic": _bicubic, "bilinear": _bilinear}


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
    """(R, count, in_size) weights resampling the window ``[start, start + length)`` of an axis to
    ``virtual_size`` samples and keeping outputs ``first .. first + count - 1``: PIL's antialiased
    resampling (the kernel stretched by the downscale factor, taps outside the window dropped and
    the rest renormalised), which torchvision's tensor ``resize(antialias=True)`` reproduces."""
    if interpolation not in _KERNELS:
        raise ValueError(f"interpolation must be one of {sorted(_KERNELS)}, got {interpolation!r}")
    device = start.device
    start, length = start.float(), length.float()
    scale = length / virtual_size
    stretch = scale.clamp(min=1.0)
    outputs = torch.arange(first, first + count, device=device, dtype=torch.float32)
    centre = (outputs + 0.5)[None, :, None] * scale[:, None, None]
    taps = (
        torch.arange(in_size, device=device, dtype=torch.float32)[None, None, :]
        - start[:, None, None]
    )
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
    if repeats * batch != rows.shape[0]:
        raise ValueError(f"{rows.shape[0]} parameter rows for a batch of {batch} images")
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


def resized_crop(
    images: Tensor,
    top: Tensor,
    left: Tensor,
    height: Tensor,
    width: Tensor,
    size: tuple[int, int],
    flip: Tensor | None = None,
    interpolation: str = "bicubic",
) -> Tensor:
    """Crop box ``(top, left, height, width)`` (R,) of each image resized to ``size`` = (h, w), then
    mirrored where ``flip`` (R,) is True, in one antialiased resampling pass (torchvision's
    ``resized_crop(..., antialias=True)`` + ``horizontal_flip``). R may be a multiple of the batch:
    row r reads image ``r % B``, so several views of a batch come out in one call."""
    in_h, in_w = images.shape[-2:]
    rows = _axis_weights(in_h, top, height, size[0], 0, size[0], interpolation)
    cols = _axis_weights(in_w, left, width, size[1], 0, size[1], interpolation, flip)
    return _apply_separable(images, rows, cols)


def resized_shape(height: int, width: int, shorter: int) -> tuple[int, int]:
    """torchvision ``Resize(shorter)``'s output shape: the shorter side becomes ``shorter``."""
    if height <= width:
        return shorter, int(shorter * width / height)
    return int(shorter * height / width), shorter


def resize_center_crop(
    images: Tensor,
    resize_size: int,
    crop_size: int | None = None,
    flip: Tensor | None = None,
    interpolation: str = "bilinear",
) -> Tensor:
    """torchvision ``Resize(resize_size)`` (shorter side) then ``CenterCrop(crop_size)`` (skipped
    when None), then a mirror where ``flip`` (B,) is True, in one resampling pass."""
    batch, _, in_h, in_w = images.shape
    new_h, new_w = resized_shape(in_h, in_w, resize_size)
    out_h, out_w = (new_h, new_w) if crop_size is None else (crop_size, crop_size)
    if out_h > new_h or out_w > new_w:
        raise ValueError(f"crop {crop_size} is larger than the resized image {new_h}x{new_w}")
    zeros = torch.zeros(batch, device=images.device)
    rows = _axis_weights(
        in_h, zeros, zeros + in_h, new_h, round((new_h - out_h) / 2), out_h, interpolation
    )
    cols = _axis_weights(
        in_w, zeros, zeros + in_w, new_w, round((new_w - out_w) / 2), out_w, interpolation, flip
    )
    return _apply_separable(images, rows, cols)


def horizontal_flip(images: Tensor, flip: Tensor) -> Tensor:
    """Mirror the samples where ``flip`` (B,) is True."""
    x = to_float(images)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


# --- colour ------------------------------------------------------------------------------------


def _per_sample(values: Tensor | float, x: Tensor) -> Tensor:
    """Per-sample values (B,) (or a scalar) shaped (B, 1, 1, 1) for broadcasting over x."""
    return torch.as_tensor(values, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)


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


def adjust_brightness(images: Tensor, factor: Tensor) -> Tensor:
    """Scale by ``factor`` (B,), clamped to 0..1 (torchvision ``adjust_brightness``)."""
    return (to_float(images) * _per_sample(factor, images.float())).clamp_(0, 1)


def adjust_contrast(images: Tensor, factor: Tensor) -> Tensor:
    """Blend with the image's mean luma (torchvision ``adjust_contrast``)."""
    x = to_float(images)
    _require_rgb(x)
    f = _per_sample(factor, x)
    return (f * x + (1 - f) * luma(x).mean((-2, -1), keepdim=True)).clamp_(0, 1)


def adjust_saturation(images: Tensor, factor: Tensor) -> Tensor:
    """Blend with the per-pixel luma (torchvision ``adjust_saturation``)."""
    x = to_float(images)
    _require_rgb(x)
    f = _per_sample(factor, x)
    return (f * x + (1 - f) * luma(x)).clamp_(0, 1)


def adjust_hue(images: Tensor, shift: Tensor) -> Tensor:
    """Rotate the HSV hue by ``shift`` (B,) turns in [-0.5, 0.5] (torchvision ``adjust_hue``),
    computed without leaving RGB: value and chroma stay, the hue moves, and channel c becomes
    ``value - chroma * clamp(min(k, 4 - k), 0, 1)``, ``k = (hue6 + (5, 3, 1)[c]) % 6``."""
    x = to_float(images)
    _require_rgb(x)
    top = x.argmax(1, keepdim=True)  # first maximal channel: r, then g, then b (HSV's rule)
    value = x.gather(1, top)
    chroma = value - x.amin(1, keepdim=True)
    # channel c's hue within its sector: (x[c + 1] - x[c + 2]) / chroma, sector c starts at 2 c
    within = (x.roll(-1, 1) - x.roll(-2, 1)).gather(1, top)
    hue6 = within / torch.where(chroma > 0, chroma, 1.0) + 2 * top + 6 * _per_sample(shift, x)
    sector = (hue6 + constant((5.0, 3.0, 1.0), x.device, (1, 3, 1, 1))).remainder_(6)
    ramp = torch.minimum(sector, 4 - sector).clamp_(0, 1)
    return value - chroma * ramp


def color_jitter(images: Tensor, factors: Tensor, hue: Tensor | None, order: Tensor) -> Tensor:
    """torchvision ``ColorJitter`` with per-sample parameters: ``factors`` (B, 3) are the
    brightness, contrast and saturation factors (1 = unchanged), ``hue`` (B,) the hue shifts (None:
    no hue op), ``order`` (B, 4) a permutation of 0..3 per sample (0 brightness, 1 contrast,
    2 saturation, 3 hue; (B, 3) of 0..2 without hue), the order the ops run in.

    Each of brightness, contrast and saturation is a per-sample 3 x 3 colour matrix plus an offset
    (contrast's: the current mean luma), clamped to 0..1 like torchvision's blends. They run in
    slots before and after the hue rotation, so a batch costs one rotation, not one per position;
    an identity slot (factor 1) leaves the values exactly as they are."""
    x = to_float(images)
    _require_rgb(x)
    batch, channels, height, width = x.shape
    if hue is None:
        slots = order
    else:
        identity = torch.full((batch, 3), 3, dtype=torch.long, device=x.device)
        padded = torch.cat([identity, order, identity], 1)
        hue_position = torch.argmax((order == 3).long(), 1, keepdim=True)
        # the three slots before the hue op at position p of [3 identities, order, 3 identities]
        # and the three after it: p + (0, 1, 2, 4, 5, 6)
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
    """``matrix @ pixels + offset`` for (B, 3, 3) matrices and (B, 3, H W) pixels: one batched
    matrix product for small images (fewest launches), three fused multiply-adds for large ones
    (a 3 x 3 product streams the pixels badly: measured 1.5x slower at 224 px on an H200)."""
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
    """Per-channel histogram equalisation on the 0..255 levels (PIL ``ImageOps.equalize``,
    torchvision ``equalize``) where ``apply`` (B,) is True. The output is quantised to 1/255."""
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
    """Gaussian blur with per-sample ``sigma`` (B,), a (2 radius + 1)-tap kernel and reflected
    borders (torchvision ``gaussian_blur`` with ``kernel_size = 2 radius + 1``), where ``apply``."""
    x = to_float(images)
    batch, channels, height, width = x.shape
    if not 0 < radius < min(height, width):
        raise ValueError(f"blur radius {radius} needs images larger than {height}x{width}")
    offsets = torch.arange(-radius, radius + 1, device=x.device, dtype=x.dtype)
    kernel = torch.exp(-0.5 * (offsets / sigma.to(x)[:, None]) ** 2)
    kernel = (kernel / kernel.sum(1, keepdim=True)).repeat_interleave(channels, 0)
    taps = 2 * radius + 1
    blurred = F.pad(x.reshape(1, batch * channels, height, width), [radius] * 4, mode="reflect")
    blurred = F.conv2d(blurred, kernel.view(-1, 1, taps, 1), groups=batch * channels)
    blurred = F.conv2d(blurred, kernel.view(-1, 1, 1, taps), groups=batch * channels)
    blurred = blurred.view_as(x)
    return blurred if apply is None else torch.where(apply[:, None, None, None], blurred, x)


# --- tensor ops after normalisation ------------------------------------------------------------


def normalize(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """``(x - mean) / std`` per channel; ``mean``/``std`` are (C,) or per sample (B, C)."""
    mean = mean.to(x).reshape(-1, x.shape[1], 1, 1)
    std = std.to(x).reshape(-1, x.shape[1], 1, 1)
    return torch.addcmul(-mean / std, x, 1 / std)


def erase(x: Tensor, box: Box, apply: Tensor, value: float = 0.0) -> Tensor:
    """Set the box ``(top, left, height, width)`` (B,) of each sample where ``apply`` to ``value``
    (torchvision ``erase``)."""
    top, left, height, width = box
    ys = torch.arange(x.shape[-2], device=x.device)
    xs = torch.arange(x.shape[-1], device=x.device)
    inside_y = (ys >= top[:, None]) & (ys < (top + height)[:, None])
    inside_x = (xs >= left[:, None]) & (xs < (left + width)[:, None])
    mask = inside_y[:, :, None] & inside_x[:, None, :] & apply[:, None, None]
    return x.masked_fill(mask[:, None], value)


# --- parameter sampling ------------------------------------------------------------------------


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
