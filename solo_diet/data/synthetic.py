"""Synthetic image folders for plumbing tests and speed benchmarks (never for quality claims)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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
