"""The ops' shared helpers (constants on the device, conversion to float) and the ops on normalised
float tensors: normalisation and random erasing."""

from __future__ import annotations

import functools

import torch

Tensor = torch.Tensor
Box = tuple[Tensor, Tensor, Tensor, Tensor]


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
