"""The GPU data path's loaders (:class:`solo_diet.launch.datapaths.gpu.GPUPath`): the set
decoded once into a uint8 tensor, batches augmented on the training device (docs/data-path.md).

Each function takes the run's checked :class:`~solo_diet.launch.settings.GPUDataSettings`
(``gpu``); without them (a direct call) it parses them from ``cfg``. The keys are documented in
:mod:`solo_diet.launch.settings`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Optional, Union

from omegaconf import DictConfig, OmegaConf

from solo_diet.config import ConfigError
from solo_diet.data.loader import GPUBatchLoader
from solo_diet.data.pipeline import (
    IMAGENET_STATS,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
from solo_diet.data.stream import DEFAULT_WORKERS, EncodedFiles, StreamLoader
from solo_diet.data.tensor_data import ImageTensors, load_images
from solo_diet.launch.common import probe_settings
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    GPUDataSettings,
    core_errors_named,
    gpu_settings,
)

# solo-learn's classification pipelines of its named sets: crop, mean, std, eval resize size
PROBE_PIPELINES = {
    "cifar10": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "cifar100": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "stl10": (96, (0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261), 96),
    "imagenet": (224, *IMAGENET_STATS, 256),
    "imagenet100": (224, *IMAGENET_STATS, 256),
}


def _checked(cfg: DictConfig, gpu: Optional[GPUDataSettings]) -> GPUDataSettings:
    """The run's settings, or (a direct call without them) those of ``cfg``."""
    return gpu if gpu is not None else gpu_settings(cfg)


def load_split(
    cfg: DictConfig, split: str, fraction: float = -1.0, gpu: Optional[GPUDataSettings] = None
) -> Union[ImageTensors, EncodedFiles]:
    """Decode the ``pretrain``/``train`` (``data.train_path``) or ``val`` (``data.val_path``)
    set; with ``data.gpu.storage: stream``, list its files instead."""
    settings = _checked(cfg, gpu)
    root_key = "data.val_path" if split == "val" else "data.train_path"
    root = OmegaConf.select(cfg, root_key)
    no_labels = bool(OmegaConf.select(cfg, "data.no_labels", default=False))
    with core_errors_named(GPU_ARGUMENT_KEYS | {"root": root_key}):
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


def _loader_class(settings: GPUDataSettings) -> type[GPUBatchLoader]:
    """:class:`StreamLoader` for ``data.gpu.storage: stream``, else :class:`GPUBatchLoader`."""
    return StreamLoader if settings.storage == "stream" else GPUBatchLoader


def _loader_kwargs(cfg: DictConfig, settings: GPUDataSettings) -> dict[str, Any]:
    if settings.device == "cpu":
        _say_cpu_batches()
    stream = {
        "num_workers": int(OmegaConf.select(cfg, "data.num_workers", default=DEFAULT_WORKERS)),
        "on_corrupt": settings.on_corrupt,
    }
    return {
        "seed": int(cfg.seed),
        "storage": settings.storage,
        "device": settings.device,
        "cuda_graphs": settings.cuda_graphs,
    } | (stream if settings.storage == "stream" else {})


@functools.lru_cache(maxsize=None)
def _say_cpu_batches() -> None:
    """Once per process: the GPU data path on a CPU works, slowly."""
    print(
        "solo-diet: the GPU data path on the CPU: the same batched augmentations run eagerly in "
        "this process, slower than solo-learn's image-folder loader with loader workers on a CPU.",
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
    cfg: DictConfig,
    train_batch_sampler: Optional[Callable] = None,
    gpu: Optional[GPUDataSettings] = None,
) -> tuple[GPUBatchLoader, int]:
    """The pretraining loader ``[indexes, [views], targets]`` and N. ``train_batch_sampler(cfg,
    dataset)``, the method's hook (s-DIET), may return its own batch sampler; None: shuffled."""
    settings = _checked(cfg, gpu)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        augment = MultiCropAugmentation.from_config(list(cfg.augmentations), cfg.data.dataset)
    data = load_split(cfg, "pretrain", fraction=cfg.data.fraction, gpu=settings)
    _check_one_global_batch(cfg, len(data))
    sampler = None if train_batch_sampler is None else train_batch_sampler(cfg, data)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        loader = _loader_class(settings).for_pretraining(
            data,
            cfg.optimizer.batch_size,
            augment,
            batch_sampler=sampler,
            **_loader_kwargs(cfg, settings),
        )
    return loader, len(data)


def eval_loader(
    cfg: DictConfig,
    aug: DictConfig,
    batch_size: int,
    split: str = "val",
    split_ranks: bool = True,
    gpu: Optional[GPUDataSettings] = None,
) -> GPUBatchLoader:
    """``[images, targets]`` of a split in dataset order, eval-transformed (crop and statistics
    from ``aug``, as the probe's); ``split_ranks``: each DDP rank its contiguous share."""
    settings = _checked(cfg, gpu)
    data = load_split(cfg, split, gpu=settings)
    _, transform = probe_transforms(cfg.data.dataset, aug)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        return _loader_class(settings).for_classification(
            data,
            batch_size,
            transform,
            shuffle=False,
            split_ranks=split_ranks,
            **_loader_kwargs(cfg, settings),
        )


def linear_loaders(
    cfg: DictConfig, gpu: Optional[GPUDataSettings] = None
) -> tuple[GPUBatchLoader, GPUBatchLoader, Optional[dict[str, int]]]:
    """``solo-diet linear``: probe training (random resized crop + flip, shuffled, incomplete batch
    dropped, ``data.fraction`` as solo-learn) and validation loaders, and the batch fitted to a
    small training set (:func:`fit_probe_batch`)."""
    settings = _checked(cfg, gpu)
    aug = cfg.data.augmentations
    train_transform, _ = probe_transforms(cfg.data.dataset, aug)
    data = load_split(cfg, "train", fraction=cfg.data.fraction, gpu=settings)
    fitted = fit_probe_batch(cfg, len(data))
    batch_size = cfg.optimizer.batch_size
    with core_errors_named(GPU_ARGUMENT_KEYS):
        train = _loader_class(settings).for_classification(
            data, batch_size, train_transform, shuffle=True, **_loader_kwargs(cfg, settings)
        )
    return train, eval_loader(cfg, aug, batch_size, gpu=settings), fitted


def feature_loader(
    probe_cfg: DictConfig, split: str, batch_size: int, gpu: Optional[GPUDataSettings] = None
) -> GPUBatchLoader:
    """Every image of the probe's ``train`` or ``val`` set once, in dataset order, transformed as
    ``solo-diet linear`` validates (``probe_cfg`` is a linear cfg): feature extraction for kNN,
    RankMe, k-means. Not split over ranks."""
    OmegaConf.set_struct(probe_cfg, False)
    aug = probe_cfg.data.augmentations
    return eval_loader(probe_cfg, aug, batch_size, split=split, split_ranks=False, gpu=gpu)
