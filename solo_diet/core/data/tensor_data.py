"""Datasets decoded once into a uint8 ``(N, C, H, W)`` tensor and int64 targets."""

from __future__ import annotations

import contextlib
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from solo_diet.core.data import ARRAY_DATASETS, DATASETS, FOLDER_DATASETS
from solo_diet.core.data.decode_cache import cached_decode
from solo_diet.core.errors import Argument, ArgumentError, ConfigError

FRACTION_RANDOM_STATE = 42  # solo-learn's train_test_split seed for its fraction of a folder
STL10_SPLITS = {"pretrain": "train+unlabeled", "train": "train", "val": "test"}
DECODE_CHUNK = 128  # images per thread task
GIB = 2**30
PathLike = Union[str, Path]


@dataclass
class ImageTensors:
    """A decoded set: ``images`` uint8 ``(N, C, H, W)``, ``targets`` int64 ``(N,)`` (-1: none)."""

    images: Tensor
    targets: Tensor

    def __post_init__(self) -> None:
        images, targets = self.images, self.targets
        shaped = images.dim() == 4 and targets.shape == images.shape[:1]
        if images.dtype != torch.uint8 or targets.dtype != torch.int64 or not shaped:
            raise ValueError(
                f"images must be uint8 (N, C, H, W) and targets int64 (N,), got {images.dtype} "
                f"{tuple(images.shape)} and {targets.dtype} {tuple(targets.shape)}"
            )

    def __len__(self) -> int:
        return self.images.shape[0]


def check_host_memory(nbytes: int, what: str, *fix: Any) -> None:
    """An error with both sizes when ``nbytes`` exceed ``MemAvailable`` of ``/proc/meminfo``."""
    available = None
    with contextlib.suppress(OSError), open("/proc/meminfo") as meminfo:
        lines = [line for line in meminfo if line.startswith("MemAvailable:")]
        available = int(lines[0].split()[1]) * 1024 if lines else None
    if available is not None and nbytes > available:
        raise ArgumentError(
            f"{what} needs {nbytes / GIB:.2f} GiB of host memory but "
            f"{available / GIB:.2f} GiB are available. ",
            *fix,
        )


def fit_size(image: Image.Image, image_size: Optional[int]) -> Image.Image:
    """The stored image: unchanged, or shorter side resized to ``image_size`` and center-cropped."""
    if image_size is None or image.size == (image_size, image_size):
        return image
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms import functional as TF

    resized = TF.resize(image, image_size, interpolation=InterpolationMode.BICUBIC, antialias=True)
    return TF.center_crop(resized, [image_size, image_size])


def read_rgb(path: PathLike) -> Image.Image:
    """The file as an RGB PIL image; a ConfigError naming the path when it cannot be decoded."""
    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ConfigError(
            f"cannot decode the image {path}: {err}. Remove or replace the file."
        ) from err


def decode_all(
    names: Sequence[str],
    read: Callable[[int], Image.Image],
    image_size: Optional[int],
    threads: Optional[int],
) -> Tensor:
    """``(len(names), 3, H, W)`` uint8 from ``read(i)`` by a thread pool (errors name ``names``)."""
    count = len(names)
    if count == 0:
        raise ConfigError("the dataset is empty: no image to decode.")
    first = fit_size(read(0), image_size)
    width, height = first.size
    check_host_memory(
        count * 3 * height * width,
        f"decoding {count} images of 3x{height}x{width} px",
        "Set a smaller ",
        Argument("image_size"),
        " or use solo-learn's image-folder data path.",
    )
    out = torch.empty((count, 3, height, width), dtype=torch.uint8)

    def decode(start: int) -> None:
        for i in range(start, min(start + DECODE_CHUNK, count)):
            image = first if i == 0 else fit_size(read(i), image_size)
            if image.size != (width, height):
                raise ArgumentError(
                    f"{names[i]} is {image.size[0]}x{image.size[1]} px but {names[0]} is "
                    f"{width}x{height} px: the GPU data path stores one size. Set ",
                    Argument("image_size"),
                    " (shorter side resized, then center-cropped to a square).",
                )
            out[i] = torch.from_numpy(np.array(image)).permute(2, 0, 1)

    with ThreadPoolExecutor(
        max_workers=threads or min(16, len(os.sched_getaffinity(0))),
        thread_name_prefix="solo-diet-decode",
    ) as pool:
        list(pool.map(decode, range(0, count, DECODE_CHUNK)))
    return out


def folder_samples(root: PathLike, no_labels: bool = False) -> list[tuple[str, int]]:
    """``(path, target)`` in solo-learn's order: ImageFolder's, or ``os.listdir``'s with -1."""
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

    if not Path(root).is_dir():
        raise ConfigError(f"the data path {root} is not a directory.")
    if no_labels:
        return [(os.path.join(root, name), -1) for name in os.listdir(root)]
    try:
        _, class_to_idx = find_classes(root)
        return make_dataset(str(root), class_to_idx, extensions=IMG_EXTENSIONS)
    except FileNotFoundError as err:
        raise ConfigError(
            f"{root} is not an ImageFolder (class sub-folders of images): {err}"
        ) from err


def check_root(root: Optional[PathLike], split: str) -> None:
    """A split's data path is given (the launchers name its key: ``argument `root```)."""
    if root is None:
        raise ArgumentError(Argument("root"), f" must be the path of the {split} set, got None.")


def check_fraction(fraction: float) -> bool:
    """True when ``fraction`` selects a subset (solo-learn: ``0 < fraction < 1``; <= 0: all)."""
    if fraction >= 1:
        raise ArgumentError(
            Argument("fraction"), f" must be in (0, 1), or -1 for every sample; got {fraction}."
        )
    return fraction > 0


def folder_split_samples(
    dataset: str, root: PathLike, split: str, no_labels: bool, fraction: float
) -> list[tuple[str, int]]:
    """``(path, target)`` of a folder split as solo-learn reads it (its fraction kept in order)."""
    from sklearn.model_selection import train_test_split  # a requirement of solo-learn

    if dataset not in FOLDER_DATASETS:
        raise ArgumentError(
            Argument("dataset", f": {dataset}"),
            f" is not an image folder; only {list(FOLDER_DATASETS)} are streamed from files (use ",
            Argument("storage", ": auto"),
            ").",
        )
    check_root(root, split)
    unlabelled = no_labels and dataset == "custom" and split == "pretrain"
    samples = folder_samples(root, unlabelled)
    if check_fraction(fraction):
        stratify = None if unlabelled else [t for _, t in samples]
        samples = train_test_split(
            samples, train_size=fraction, stratify=stratify, random_state=FRACTION_RANDOM_STATE
        )[0]
    return samples


def load_torchvision(
    dataset: str,
    root: PathLike,
    split: str,
    fraction: float,
    image_size: Optional[int],
    threads: Optional[int],
) -> ImageTensors:
    """A torchvision set under ``root`` (never downloaded)."""
    from torchvision import datasets

    if check_fraction(fraction):
        raise ArgumentError(
            Argument("fraction"),
            f" selects part of an ImageFolder; solo-learn has none for {dataset}. Remove it.",
        )
    try:
        if dataset == "stl10":
            found = datasets.STL10(str(root), split=STL10_SPLITS[split], download=False)
            arrays, targets = found.data, np.asarray(found.labels)
        else:
            found = getattr(datasets, dataset.upper())(
                str(root), train=split != "val", download=False
            )
            arrays, targets = found.data.transpose(0, 3, 1, 2), np.asarray(found.targets)
    except RuntimeError as err:
        raise ConfigError(
            f"no {dataset} files under {root} ({err}). The GPU data path never downloads: "
            "run solo-learn's own loader once (it downloads), or put torchvision's files there."
        ) from err
    if image_size is None or arrays.shape[2:] == (image_size, image_size):
        images = torch.from_numpy(np.ascontiguousarray(arrays))
    else:
        images = decode_all(
            [f"{dataset} image {i}" for i in range(len(arrays))],
            lambda i: Image.fromarray(arrays[i].transpose(1, 2, 0)),
            image_size,
            threads,
        )
    return ImageTensors(images, torch.from_numpy(targets.astype(np.int64)))


def load_images(
    dataset: str,
    root: PathLike,
    split: str,
    *,
    no_labels: bool = False,
    fraction: float = -1.0,
    image_size: Optional[int] = None,
    threads: Optional[int] = None,
    cache: bool = False,
) -> ImageTensors:
    """Decode one split (``pretrain``, ``train``, ``val``); ``cache``: keep it on disk."""
    if dataset not in DATASETS:
        raise ArgumentError(
            Argument("dataset", f": {dataset}"),
            f" has no GPU data path; choose one of {list(DATASETS)}.",
        )
    if image_size is not None and (
        isinstance(image_size, bool) or not isinstance(image_size, int) or image_size <= 0
    ):
        raise ArgumentError(
            Argument("image_size"), f" must be a positive integer or null, got {image_size!r}."
        )
    check_root(root, split)
    if dataset in ARRAY_DATASETS:
        return load_torchvision(dataset, root, split, fraction, image_size, threads)
    samples = folder_split_samples(dataset, root, split, no_labels, fraction)
    paths = [path for path, _ in samples]
    decode = functools.partial(decode_all, paths, lambda i: read_rgb(paths[i]), image_size, threads)
    images = cached_decode(samples, image_size, decode) if cache else decode()
    targets = torch.tensor([t for _, t in samples], dtype=torch.int64)
    return ImageTensors(images, targets)
