"""Resampling: crop, resize and horizontal flip in one separable, antialiased pass per batch."""

from __future__ import annotations

import torch

from solo_diet.data.augment.tensors import Tensor, to_float


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
