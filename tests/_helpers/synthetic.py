"""Synthetic image folders for plumbing tests and speed benchmarks (never for quality claims)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image


def write_image_folder(
    root: Path, num_classes: int, per_class: int, size: int = 32, seed: int = 0
) -> Path:
    """Write a class-per-folder PNG dataset of uniformly random ``size`` px RGB images."""
    rng = np.random.default_rng(seed)
    for label in range(num_classes):
        folder = Path(root) / f"class_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{i:05d}.png")
    return Path(root)


IMAGENET_LIKE_SIZES = ((375, 500), (500, 375), (333, 500), (500, 333), (400, 500), (375, 450))
"""(height, width) of the synthetic ImageNet-like JPEGs: ImageNet's common shapes around 500x375."""


def photo_like(count: int, height: int, width: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` uint8 (3, H, W) images on the generator's device: a smooth random colour field
    (an upsampled 8 x 8 grid) plus a gradient and fine noise, so JPEG sizes are photo-like."""
    device = generator.device
    coarse = torch.rand((count, 3, 8, 8), generator=generator, device=device)
    field = torch.nn.functional.interpolate(coarse, (height, width), mode="bilinear")
    ramp = torch.linspace(0, 1, width, device=device).expand(height, width)
    noise = torch.rand((count, 3, height, width), generator=generator, device=device)
    pixels = 160 * field + 50 * ramp + 45 * noise
    return pixels.clamp(0, 255).to(torch.uint8)


def write_jpeg_folder(
    root: Path,
    num_classes: int,
    per_class: int,
    sizes: Sequence[tuple[int, int]] = IMAGENET_LIKE_SIZES,
    quality: int = 90,
    seed: int = 0,
    device: str = "cpu",
    chunk: int = 64,
) -> Path:
    """A class-per-folder JPEG dataset (file ``k`` of a class has ``sizes[k % len(sizes)]``),
    generated and encoded with torchvision on ``device`` (a GPU encodes a chunk in one call)."""
    from torchvision.io import encode_jpeg

    generator = torch.Generator(device).manual_seed(seed)
    for label in range(num_classes):
        folder = Path(root) / f"class_{label:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        for first in range(0, per_class, chunk):
            count = min(chunk, per_class - first)
            by_size: dict[tuple[int, int], list[int]] = {}
            for k in range(first, first + count):
                by_size.setdefault(tuple(sizes[k % len(sizes)]), []).append(k)
            for (height, width), files in by_size.items():
                images = list(photo_like(len(files), height, width, generator))
                try:
                    encoded = encode_jpeg(images, quality=quality)
                except RuntimeError:  # a torchvision without nvJPEG: the host encodes
                    encoded = encode_jpeg([image.cpu() for image in images], quality=quality)
                for k, data in zip(files, encoded):
                    (folder / f"{k:06d}.jpg").write_bytes(data.cpu().numpy().tobytes())
    return Path(root)
