"""``data.format: gpu`` for our launchers: keys, checks and the loaders they hand to Lightning.

Keys (defaults in brackets), read by :func:`gpu_settings`:

- ``data.format`` [``image_folder``]: one of :data:`DATA_FORMATS`; ``gpu`` decodes the set once into
  a uint8 tensor and augments batches on the training device (docs/data-path.md).
- ``data.gpu.storage`` [``auto``]: ``device`` keeps the decoded set in GPU memory, ``pinned`` in
  page-locked host memory with asynchronous copies of each batch, ``auto`` picks ``device`` when the
  set takes at most half of the free GPU memory; ``stream`` keeps nothing: ``data.num_workers``
  processes read an image folder's files as bytes and each batch is decoded on the GPU and cropped
  from the full-resolution images (:mod:`solo_diet.data.stream`).
- ``data.gpu.on_corrupt`` [``stop``]: with ``stream``, a file that cannot be decoded stops the run
  naming it (``stop``), or is named and left out (``skip``: another sample of its batch fills it).
- ``data.gpu.image_size`` [null]: the stored side for sets whose images differ in size (shorter side
  resized, center crop); null keeps the images' own size, which must then be one size.
- ``data.gpu.decode_threads`` [null]: threads decoding the files (null: up to 16, one per core).
- ``data.gpu.cuda_graphs`` [true]: on a GPU, replay the augmentations as CUDA graphs (one per batch
  shape; ~3x faster at 32 px); false runs them eagerly.
- ``data.gpu.decode_cache`` [true]: keep an image folder's decoded tensor on disk
  (:mod:`solo_diet.data.decode_cache`), so later runs on the same files skip decoding.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch
from omegaconf import DictConfig, OmegaConf

from solo_diet.config import (
    ConfigError,
    check_bool,
    check_choice,
    check_known_keys,
    check_positive_int,
    fill_default,
)
from solo_diet.data.loader import STORAGES, GPUBatchLoader
from solo_diet.data.pipeline import (
    IMAGENET_STATS,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
from solo_diet.data.stream import DEFAULT_WORKERS, ON_CORRUPT, EncodedFiles, StreamLoader
from solo_diet.data.tensor_data import ImageTensors, load_images
from solo_diet.launch.common import probe_settings

DATA_FORMATS = ("image_folder", "h5", "dali", "gpu")
GPU_KEYS = ("storage", "image_size", "decode_threads", "cuda_graphs", "decode_cache", "on_corrupt")
GPU_STORAGES = (*STORAGES, "stream")
# solo-learn's classification pipelines of its named sets: crop, mean, std, eval resize size
PROBE_PIPELINES = {
    "cifar10": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "cifar100": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "stl10": (96, (0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261), 96),
    "imagenet": (224, *IMAGENET_STATS, 256),
    "imagenet100": (224, *IMAGENET_STATS, 256),
}


@dataclass(frozen=True)
class GPUDataSettings:
    """The checked ``data.gpu.*`` values."""

    storage: str
    image_size: Optional[int]
    decode_threads: Optional[int]
    cuda_graphs: bool
    decode_cache: bool
    on_corrupt: str


LAUNCH_DATA_FORMATS = ("auto", "gpu", "image_folder")  # what `demo` and `compare` choose from


def choose_data_format(requested: str, on_gpu: bool) -> str:
    """``auto`` is the GPU data path on a GPU and solo-learn's image-folder loader otherwise."""
    if requested == "auto":
        return "gpu" if on_gpu else "image_folder"
    return requested


def dali_installed() -> bool:
    """Whether NVIDIA DALI (solo-learn's `data.format: dali`) is importable."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` package at all
        return False


def check_data_format(cfg: DictConfig) -> str:
    """Validate ``data.format`` before solo-learn's ``parse_cfg`` (which accepts any value and
    trains from the image folder); refuse ``dali`` options with ``gpu``."""
    data_format = fill_default(cfg, "data.format", "image_folder")
    check_choice(cfg, "data.format", DATA_FORMATS)
    if data_format == "gpu" and OmegaConf.select(cfg, "dali") is not None:
        raise ConfigError(
            "the `dali` options apply to data.format=dali; with data.format=gpu remove the "
            "`dali` section."
        )
    return data_format


def gpu_settings(cfg: DictConfig) -> GPUDataSettings:
    """Fill and check the ``data.gpu.*`` keys (module docstring)."""
    given = OmegaConf.select(cfg, "data.gpu", default=None) or {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"`data.gpu` must be a mapping of {list(GPU_KEYS)}, got {given!r}.")
    check_known_keys(cfg, "data.gpu", GPU_KEYS, "the GPU data path")
    fill_default(cfg, "data.gpu.storage", "auto")
    check_choice(cfg, "data.gpu.storage", GPU_STORAGES)
    fill_default(cfg, "data.gpu.on_corrupt", "stop")
    check_choice(cfg, "data.gpu.on_corrupt", ON_CORRUPT)
    for key in ("image_size", "decode_threads"):
        if fill_default(cfg, f"data.gpu.{key}", None) is not None:
            check_positive_int(cfg, f"data.gpu.{key}")
    for key in ("cuda_graphs", "decode_cache"):
        fill_default(cfg, f"data.gpu.{key}", True)
        check_bool(cfg, f"data.gpu.{key}")
    gpu = cfg.data.gpu
    return GPUDataSettings(
        gpu.storage,
        gpu.image_size,
        gpu.decode_threads,
        gpu.cuda_graphs,
        gpu.decode_cache,
        gpu.on_corrupt,
    )


def loader_device(cfg: DictConfig) -> str:
    """Where batches are made, from ``accelerator``: ``cuda`` (each process's GPU) or ``cpu``."""
    accelerator = str(OmegaConf.select(cfg, "accelerator", default="auto"))
    if accelerator in ("gpu", "cuda"):
        return "cuda"
    if accelerator == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if accelerator == "cpu":
        return "cpu"
    raise ConfigError(f"data.format=gpu runs on `accelerator: gpu` or `cpu`, got {accelerator!r}.")


def load_split(
    cfg: DictConfig, split: str, fraction: float = -1.0
) -> Union[ImageTensors, EncodedFiles]:
    """Decode the ``pretrain``/``train`` (``data.train_path``) or ``val`` (``data.val_path``)
    set; with ``data.gpu.storage: stream``, list its files instead."""
    settings = gpu_settings(cfg)
    root = cfg.data.val_path if split == "val" else cfg.data.train_path
    no_labels = bool(OmegaConf.select(cfg, "data.no_labels", default=False))
    if settings.storage == "stream":
        return EncodedFiles.from_folder(
            cfg.data.dataset, root, split, no_labels=no_labels, fraction=fraction
        )
    return load_images(
        cfg.data.dataset,
        root,
        split,
        no_labels=no_labels,
        fraction=fraction,
        image_size=settings.image_size,
        threads=settings.decode_threads,
        cache=settings.decode_cache,
    )


def _loader_class(cfg: DictConfig) -> type[GPUBatchLoader]:
    """:class:`StreamLoader` for ``data.gpu.storage: stream``, else :class:`GPUBatchLoader`."""
    return StreamLoader if gpu_settings(cfg).storage == "stream" else GPUBatchLoader


def _loader_kwargs(cfg: DictConfig) -> dict[str, Any]:
    settings = gpu_settings(cfg)
    device = loader_device(cfg)
    if device == "cpu":
        _say_cpu_batches()
    stream = {
        "num_workers": int(OmegaConf.select(cfg, "data.num_workers", default=DEFAULT_WORKERS)),
        "on_corrupt": settings.on_corrupt,
    }
    return {
        "seed": int(cfg.seed),
        "storage": settings.storage,
        "device": device,
        "cuda_graphs": settings.cuda_graphs,
    } | (stream if settings.storage == "stream" else {})


@functools.lru_cache(maxsize=None)
def _say_cpu_batches() -> None:
    """Once per process: the GPU data path on a CPU works, slowly."""
    print(
        "solo-diet: data.format=gpu on the CPU: the same batched augmentations run eagerly in "
        "this process, slower than data.format=image_folder with loader workers on a CPU.",
        file=sys.stderr,
        flush=True,
    )


def probe_transforms(dataset: str, aug: DictConfig):
    """GPU twins of :func:`solo_diet.launch.common.classification_transforms`: ``(train, eval)``."""
    if dataset in PROBE_PIPELINES:
        crop_size, mean, std, resize_size = PROBE_PIPELINES[dataset]
        min_scale = 0.08
    else:
        (crop_size, min_scale, mean, std), resize_size = probe_settings(aug), None
    train = ProbeTrainTransform(crop_size, mean, std, min_scale=min_scale)
    return train, EvalTransform(crop_size, mean, std, resize_size=resize_size)


def _world_size(cfg: DictConfig) -> int:
    devices = OmegaConf.select(cfg, "devices", default=1)
    per_node = devices if isinstance(devices, int) else len(devices)
    return per_node * int(OmegaConf.select(cfg, "num_nodes", default=1))


def _check_one_global_batch(cfg: DictConfig, num_samples: int) -> None:
    world = _world_size(cfg)
    if num_samples < cfg.optimizer.batch_size * world:
        raise ConfigError(
            f"the training set has {num_samples} samples, fewer than one global batch "
            f"(optimizer.batch_size={cfg.optimizer.batch_size} x {world} devices): lower the "
            "batch size."
        )


def fit_probe_batch(cfg: DictConfig, num_samples: int) -> Optional[dict[str, int]]:
    """A probe's training set smaller than one global batch would give no training batch (the
    incomplete one is dropped): lower ``optimizer.batch_size`` to the set's size per device, scale
    the learning rate with it (solo-learn's linear scaling) and say so in one line. Returns what
    was fitted, or None when the batch fits."""
    world, batch = _world_size(cfg), cfg.optimizer.batch_size
    if num_samples >= batch * world:
        return None
    fitted = num_samples // world
    devices = f" x {world} devices" if world > 1 else ""
    if fitted < 1:
        raise ConfigError(
            f"the probe's training set has {num_samples} images, fewer than the {world} devices: "
            "add images or use fewer devices."
        )
    lr = cfg.optimizer.lr
    cfg.optimizer.batch_size, cfg.optimizer.lr = fitted, lr * fitted / batch
    print(
        f"solo-diet linear: the training set has {num_samples} images, fewer than one batch "
        f"(optimizer.batch_size={batch}{devices}, incomplete batches dropped): the probe trains "
        f"at optimizer.batch_size={fitted}, learning rate {lr:g} -> {cfg.optimizer.lr:g}.",
        flush=True,
    )
    return {"train_images": num_samples, "batch_size": fitted, "configured_batch_size": batch}


def pretrain_loader(
    cfg: DictConfig, train_batch_sampler: Optional[Callable] = None
) -> tuple[GPUBatchLoader, int]:
    """The pretraining loader ``[indexes, [views], targets]`` and N. ``train_batch_sampler(cfg,
    dataset)``, the method's hook (s-DIET), may return its own batch sampler; None: shuffled."""
    augment = MultiCropAugmentation.from_config(list(cfg.augmentations), cfg.data.dataset)
    data = load_split(cfg, "pretrain", fraction=cfg.data.fraction)
    _check_one_global_batch(cfg, len(data))
    sampler = None if train_batch_sampler is None else train_batch_sampler(cfg, data)
    loader = _loader_class(cfg).for_pretraining(
        data, cfg.optimizer.batch_size, augment, batch_sampler=sampler, **_loader_kwargs(cfg)
    )
    return loader, len(data)


def eval_loader(
    cfg: DictConfig, aug: DictConfig, batch_size: int, split: str = "val", split_ranks: bool = True
) -> GPUBatchLoader:
    """``[images, targets]`` of a split in dataset order, eval-transformed (crop and statistics
    from ``aug``, as the probe's); ``split_ranks``: each DDP rank its contiguous share."""
    data = load_split(cfg, split)
    _, transform = probe_transforms(cfg.data.dataset, aug)
    return _loader_class(cfg).for_classification(
        data, batch_size, transform, shuffle=False, split_ranks=split_ranks, **_loader_kwargs(cfg)
    )


def linear_loaders(
    cfg: DictConfig,
) -> tuple[GPUBatchLoader, GPUBatchLoader, Optional[dict[str, int]]]:
    """``solo-diet linear``: probe training (random resized crop + flip, shuffled, incomplete batch
    dropped, ``data.fraction`` as solo-learn) and validation loaders, and the batch fitted to a
    small training set (:func:`fit_probe_batch`)."""
    aug = cfg.data.augmentations
    train_transform, _ = probe_transforms(cfg.data.dataset, aug)
    data = load_split(cfg, "train", fraction=cfg.data.fraction)
    fitted = fit_probe_batch(cfg, len(data))
    batch_size = cfg.optimizer.batch_size
    train = _loader_class(cfg).for_classification(
        data, batch_size, train_transform, shuffle=True, **_loader_kwargs(cfg)
    )
    return train, eval_loader(cfg, aug, batch_size), fitted


def feature_loader(probe_cfg: DictConfig, split: str, batch_size: int) -> GPUBatchLoader:
    """Every image of the probe's ``train`` or ``val`` set once, in dataset order, transformed as
    ``solo-diet linear`` validates (``probe_cfg`` is a linear cfg): feature extraction for kNN,
    RankMe, k-means. Not split over ranks."""
    OmegaConf.set_struct(probe_cfg, False)
    return eval_loader(
        probe_cfg, probe_cfg.data.augmentations, batch_size, split=split, split_ranks=False
    )
