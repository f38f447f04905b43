"""A launch's data, loader and performance settings, parsed once (docs/launchers.md)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import NamedTuple, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from solo_diet.core.data import FOLDER_DATASETS
from solo_diet.core.data.loader import STORAGES
from solo_diet.core.data.pipeline import IMAGENET_STATS, MultiCropAugmentation
from solo_diet.core.data.stream import ON_CORRUPT
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import (
    FORMAT_KEY,
    KeyReader,
    core_errors_named,
    is_number,
    parse_section,
    setting,
    world_size,
    write_section,
)
from solo_diet.launch.errors import same_class_folders
from solo_diet.methods._common import SOLO_LEARN_SEED

# the GPU data path's core arguments and the keys that set them (for `core_errors_named`)
GPU_ARGUMENT_KEYS = {
    "storage": "data.gpu.storage",
    "cuda_graphs": "data.gpu.cuda_graphs",
    "image_size": "data.gpu.image_size",
    "on_corrupt": "data.gpu.on_corrupt",
    "num_workers": "data.num_workers",
    "dataset": "data.dataset",
    "fraction": "data.fraction",
    "nodes": "augmentations",
}


@dataclass(frozen=True)
class GPUDataSettings:
    """The checked ``data.gpu.*`` values and where batches are made (``cuda`` or ``cpu``)."""

    storage: str = setting("auto", choices=(*STORAGES, "stream"))
    image_size: Optional[int] = setting(None, minimum=1)
    decode_threads: Optional[int] = setting(None, minimum=1)
    cuda_graphs: bool = True
    decode_cache: bool = True
    device: str = field(default="cuda", metadata={"computed": True})
    on_corrupt: str = setting("stop", choices=ON_CORRUPT)

    def checked(self, cfg: DictConfig) -> "GPUDataSettings":
        """No ``dali`` section beside it, and where batches are made, from ``accelerator``."""
        read = KeyReader(cfg)
        if read.value("dali") is not None:
            raise read.fail("dali", f"options apply to {FORMAT_KEY}=dali: remove them.")
        accelerator = str(read.value("accelerator", "auto"))
        if accelerator == "auto":
            accelerator = "cuda" if torch.cuda.is_available() else "cpu"
        if accelerator not in ("gpu", "cuda", "cpu"):
            raise ConfigError(
                f"{FORMAT_KEY}=gpu runs on `accelerator: gpu` or `cpu`, got {accelerator!r}."
            )
        return replace(self, device="cpu" if accelerator == "cpu" else "cuda")


@dataclass(frozen=True)
class DaliSettings:
    """The checked ``dali.*`` values of solo-learn's DALI datamodule."""

    device: str = setting("gpu", choices=("gpu", "cpu"))
    encode_indexes_into_labels: bool = False


@dataclass(frozen=True)
class DataSettings:
    """The checked data format and its data path's settings (:func:`parse_data_settings`)."""

    format: str = "image_folder"
    gpu: Optional[GPUDataSettings] = None
    dali: Optional[DaliSettings] = None


@dataclass(frozen=True)
class PerformanceSettings:
    """The ``performance.*`` keys of ``solo-diet pretrain`` (docs/launchers.md)."""

    foreach_substitutes: bool = True
    disable_channel_last: bool = False
    step_graph: str = setting("auto", choices=("auto", "on", "off"))


def parse_performance_settings(cfg: DictConfig) -> PerformanceSettings:
    """Fill and check the ``performance`` section; an unknown key is refused, naming the closest."""
    parsed = parse_section(PerformanceSettings, cfg, "performance", "`performance`")
    write_section(cfg, "performance", parsed)
    return parsed


# the sections a data path reads (its ``reads``): their key and schema
DATA_PATH_SECTIONS = {
    "gpu": ("data.gpu", GPUDataSettings, "the GPU data path"),
    "dali": ("dali", DaliSettings, "solo-learn's DALI datamodule"),
}


def dali_installed() -> bool:
    """Whether NVIDIA DALI (solo-learn's ``dali`` data format) is importable."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` package at all
        return False


COMPUTED = {"computed": True}  # a field set by its parser, not read from the config as it stands
PRETRAIN_PROBE_NODE = "augmentations[0]"  # the online probe's eval transform while pretraining
LINEAR_PROBE_NODE = "data.augmentations"  # a linear probe's (and compare's evaluation's)


class ProbeAugmentation(NamedTuple):
    """A probe's crop and statistics on custom data."""

    crop_size: int
    min_scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class LoaderSettings:
    """The checked values every data path reads (:func:`parse_loader_settings`)."""

    dataset: str = setting(None, key="data.dataset")
    train_path: Optional[str] = setting(None, key="data.train_path")
    val_path: Optional[str] = setting(None, key="data.val_path")
    fraction: float = field(default=-1.0, metadata=COMPUTED)
    no_labels: bool = setting(False, key="data.no_labels")
    num_classes: Optional[int] = setting(None, key="data.num_classes")
    num_workers: Optional[int] = setting(None, minimum=0, key="data.num_workers")
    batch_size: Optional[int] = setting(None, minimum=1, key="optimizer.batch_size")
    lr: Optional[float] = setting(None, key="optimizer.lr")
    seed: int = setting(SOLO_LEARN_SEED, minimum=0, key="seed")
    world_size: int = field(default=1, metadata=COMPUTED)
    augmentations: tuple[DictConfig, ...] = field(default=(), metadata=COMPUTED)
    # the GPU data path's augmentation, of ``augmentations``
    views: Optional[MultiCropAugmentation] = field(default=None, metadata=COMPUTED)
    probe: Optional[ProbeAugmentation] = field(default=None, metadata=COMPUTED)
    num_large_crops: int = setting(0, minimum=0, key="data.num_large_crops")
    num_small_crops: int = setting(0, minimum=0, key="data.num_small_crops")
    debug_augmentations: bool = setting(False, key="debug_augmentations")

    def workers(self, default: int) -> int:
        """``data.num_workers``, or ``default`` when the config leaves it out."""
        return default if self.num_workers is None else self.num_workers

    def fit_probe_batch(self, num_samples: int) -> Optional["FittedBatch"]:
        """The probe batch lowered to a training set smaller than one global batch, or None."""
        world, batch = self.world_size, self.batch_size
        if num_samples >= batch * world:
            return None
        fitted = num_samples // world
        if fitted < 1:
            raise ConfigError(
                f"the probe's training set has {num_samples} images, fewer than the {world} "
                "devices: add images or use fewer devices."
            )
        scaled = self.lr * fitted / batch
        devices = f" x {world} devices" if world > 1 else ""
        print(
            f"solo-diet linear: the training set has {num_samples} images, fewer than one batch "
            f"(optimizer.batch_size={batch}{devices}, incomplete batches dropped): the probe "
            f"trains at optimizer.batch_size={fitted}, learning rate {self.lr:g} -> {scaled:g}.",
            flush=True,
        )
        return FittedBatch(num_samples, fitted, batch, scaled)

    def check_classes(self, needed: int, reader: str) -> None:
        """Refuse fewer than ``needed`` classes, or val class folders unlike the train ones."""
        if self.no_labels:
            return
        train, val, classes = self.train_path, self.val_path, self.num_classes
        if classes is not None and classes < needed:
            raise ConfigError(
                f"`data.train_path` = {train} holds {classes} class(es); {reader} needs at least "
                f"{needed}: give it one subfolder per class (or `data.no_labels=True` for images "
                "without classes)."
            )
        if self.dataset in FOLDER_DATASETS and val is not None:
            same_class_folders(train, val)

    def check_one_global_batch(self, num_samples: int) -> None:
        """Refuse a pretraining set smaller than one global batch."""
        if self.batch_size is not None and num_samples < self.batch_size * self.world_size:
            raise ConfigError(
                f"the training set has {num_samples} samples, fewer than one global batch "
                f"(optimizer.batch_size={self.batch_size} x {self.world_size} devices): lower it."
            )


@dataclass(frozen=True)
class FittedBatch:
    """A probe batch lowered to a small training set, and its scaled learning rate."""

    train_images: int
    batch_size: int
    configured_batch_size: int
    lr: float

    def report(self) -> dict[str, int]:
        """What ``solo-diet linear`` returns as ``fitted_batch`` (and compare's report says)."""
        return {k: v for k, v in asdict(self).items() if k != "lr"}


def probe_augmentation(node: Mapping, key: str) -> ProbeAugmentation:
    """The probe's ``crop_size``, ``crop_min_scale``, ``mean`` and ``std`` of ``node``."""
    read = KeyReader(node, key)
    min_scale = read.value("crop_min_scale", 0.08)
    if not (is_number(min_scale) and 0 < min_scale <= 1):
        raise read.fail("crop_min_scale", f"must be in (0, 1], got {min_scale!r}.")
    return ProbeAugmentation(
        read.int("crop_size", 1),
        float(min_scale),
        _statistics(read, "mean", IMAGENET_STATS[0]),
        _statistics(read, "std", IMAGENET_STATS[1]),
    )


def _statistics(read: KeyReader, key: str, default: tuple[float, ...]) -> tuple[float, ...]:
    value = read.value(key, default)
    is_list = isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0
    if not (is_list and all(is_number(v) for v in value)):
        raise read.fail(key, f"must be a list of numbers, one per channel, got {value!r}.")
    return tuple(float(v) for v in value)


def _probe(cfg: DictConfig, dataset: str, node_key: str) -> Optional[ProbeAugmentation]:
    """The probe's node parsed; None where it is absent and the dataset's own pipeline serves."""
    node = OmegaConf.select(cfg, node_key)
    if dataset != "custom" and (node is None or OmegaConf.select(node, "crop_size") is None):
        return None
    if not isinstance(node, Mapping):
        wanted = "must be an augmentation node with `crop_size` for custom data"
        raise KeyReader(cfg).fail(node_key, f"{wanted}, got {node!r}.")
    return probe_augmentation(node, node_key)


def parse_loader_settings(
    cfg: DictConfig, data: DataSettings, probe_node: str = LINEAR_PROBE_NODE
) -> LoaderSettings:
    """What the data paths read of a parsed cfg, checked."""
    read = KeyReader(cfg)
    parsed = parse_section(LoaderSettings, cfg, "", "the launcher", strict=False)
    fraction = read.value("data.fraction", -1)
    if not (is_number(fraction) and (fraction == -1 or 0 < fraction <= 1)):
        raise read.fail("data.fraction", f"must be in (0, 1] or -1 (all), got {fraction!r}.")
    nodes = tuple(read.value("augmentations", ()))
    views = None
    if data.gpu is not None and nodes:  # the GPU path's augmentation, parsed once
        with core_errors_named(GPU_ARGUMENT_KEYS):
            views = MultiCropAugmentation.from_config(list(nodes), parsed.dataset)
    return replace(
        parsed,
        fraction=float(fraction),
        world_size=world_size(cfg),
        augmentations=nodes,
        views=views,
        probe=_probe(cfg, parsed.dataset, probe_node),
    )
