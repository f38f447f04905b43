"""What the data paths read of a run besides its data format: the Hydra config read and checked
once, at the launcher's boundary (after solo-learn's ``parse_cfg`` filled its defaults), into a
frozen :class:`LoaderSettings`; every error is one line naming the key and the fix
(:class:`~solo_diet.config.KeyReader`). The data paths (:mod:`solo_diet.launch.datapaths`) and
:mod:`solo_diet.launch.gpu_data` take these settings, never the config.

Keys (defaults in brackets; solo-learn's YAML files set most of them):

- ``data.dataset``: solo-learn's dataset name (``custom`` for an image folder).
- ``data.train_path``, ``data.val_path`` [null]: the training and validation sets.
- ``data.fraction`` [-1]: the fraction of the training set used, as solo-learn's ``data_fraction``
  (-1: all of it).
- ``data.no_labels`` [false]: a custom training set without class folders.
- ``data.num_workers`` [null]: loader worker processes; null leaves each loader its own default.
- ``optimizer.batch_size`` [null]: the batch size per device (compare's feature loaders take
  their own).
- ``optimizer.lr`` [null]: the learning rate, scaled with a probe batch fitted to a small set.
- ``seed`` [5, solo-learn's methods' default]: seeds the GPU data path's batch order and views.
- ``devices`` x ``num_nodes`` [1 x 1]: the world size (one global batch is ``batch_size`` x it).
- ``augmentations``: the pretraining views' nodes, handed as they are to solo-learn's pipeline
  builders (``image_folder``, ``dali``); with the GPU data path also parsed into its
  :class:`~solo_diet.data.pipeline.MultiCropAugmentation` here.
- the probe's node (``augmentations[0]`` when pretraining, ``data.augmentations`` for a linear
  probe): ``crop_size``, ``crop_min_scale`` [0.08], ``mean`` and ``std`` [ImageNet's], read
  into a :class:`ProbeAugmentation` (custom data needs ``crop_size``; solo-learn's named sets use
  their own pipelines).
- ``data.num_large_crops``, ``data.num_small_crops`` [0]: counted by solo-learn's ``parse_cfg``.
- ``debug_augmentations`` [false]: print the pretraining transforms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Optional

from omegaconf import DictConfig, OmegaConf

from solo_diet.config import ConfigError, KeyReader, is_number, world_size
from solo_diet.data.pipeline import IMAGENET_STATS, MultiCropAugmentation
from solo_diet.launch.settings import GPU_ARGUMENT_KEYS, DataSettings, core_errors_named
from solo_diet.methods._common import SOLO_LEARN_SEED

PRETRAIN_PROBE_NODE = "augmentations[0]"  # the online probe's eval transform while pretraining
LINEAR_PROBE_NODE = "data.augmentations"  # a linear probe's (and compare's evaluation's)


class ProbeAugmentation(NamedTuple):
    """A probe's transforms on custom data: random resized crop to ``crop_size`` (scale from
    ``min_scale``) for training, resize and center crop for evaluation; normalised by
    ``mean``/``std``."""

    crop_size: int
    min_scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True)
class LoaderSettings:
    """The checked values every data path reads (module docstring). Built once per run by
    :func:`parse_loader_settings`."""

    dataset: str
    train_path: Optional[str] = None
    val_path: Optional[str] = None
    fraction: float = -1.0
    no_labels: bool = False
    num_workers: Optional[int] = None
    batch_size: Optional[int] = None
    lr: Optional[float] = None
    seed: int = SOLO_LEARN_SEED
    world_size: int = 1
    augmentations: tuple[DictConfig, ...] = ()
    views: Optional[MultiCropAugmentation] = None  # the GPU data path's, of ``augmentations``
    probe: Optional[ProbeAugmentation] = None
    num_large_crops: int = 0
    num_small_crops: int = 0
    debug_augmentations: bool = False

    def workers(self, default: int) -> int:
        """``data.num_workers``, or ``default`` when the config leaves it out."""
        return default if self.num_workers is None else self.num_workers

    def check_one_global_batch(self, num_samples: int) -> None:
        """Refuse a pretraining set smaller than one global batch: it would give no batch (the
        incomplete one is dropped), or stop a method's own batch sampler mid-run."""
        if self.batch_size is not None and num_samples < self.batch_size * self.world_size:
            raise ConfigError(
                f"the training set has {num_samples} samples, fewer than one global batch "
                f"(optimizer.batch_size={self.batch_size} x {self.world_size} devices): lower the "
                "batch size."
            )


@dataclass(frozen=True)
class FittedBatch:
    """A probe batch lowered to a training set smaller than one global batch, and its learning
    rate scaled with it (``fit_probe_batch``); the launcher writes both into the probe's config."""

    train_images: int
    batch_size: int
    configured_batch_size: int
    lr: float

    def report(self) -> dict[str, int]:
        """What ``solo-diet linear`` returns as ``fitted_batch`` (and compare's report says)."""
        return {
            "train_images": self.train_images,
            "batch_size": self.batch_size,
            "configured_batch_size": self.configured_batch_size,
        }


def probe_augmentation(node: Mapping, key: str) -> ProbeAugmentation:
    """The probe's settings of augmentation ``node`` (its config key ``key``): ``crop_size``, and
    the optional ``crop_min_scale`` (default 0.08), ``mean`` and ``std`` (default ImageNet's)."""
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
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise read.fail(key, f"must be a list of numbers, one per channel, got {value!r}.")
    if not all(is_number(v) for v in value):
        raise read.fail(key, f"must be a list of numbers, one per channel, got {list(value)!r}.")
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
    """Read and check what the data paths read (module docstring) of a parsed cfg; ``probe_node``
    is the key of the probe's augmentation node. With the GPU data path (``data.gpu`` set) the
    pretraining nodes are parsed into its augmentation here, once."""
    read = KeyReader(cfg)
    dataset = read.value("data.dataset")
    if not isinstance(dataset, str):
        raise read.fail("data.dataset", f"must be a dataset name, got {dataset!r}.")
    fraction = read.value("data.fraction", -1)
    if not (is_number(fraction) and (fraction == -1 or 0 < fraction <= 1)):
        raise read.fail("data.fraction", f"must be in (0, 1] or -1 (all), got {fraction!r}.")
    batch_size = read.value("optimizer.batch_size", None)
    lr = read.value("optimizer.lr", None)
    nodes = tuple(read.value("augmentations", ()))
    views = None
    if data.gpu is not None and nodes:  # the GPU path's augmentation, parsed once
        with core_errors_named(GPU_ARGUMENT_KEYS):
            views = MultiCropAugmentation.from_config(list(nodes), dataset)
    paths = [read.value(f"data.{key}", None) for key in ("train_path", "val_path")]
    return LoaderSettings(
        dataset=dataset,
        train_path=None if paths[0] is None else str(paths[0]),
        val_path=None if paths[1] is None else str(paths[1]),
        fraction=float(fraction),
        no_labels=read.bool("data.no_labels", default=False),
        num_workers=(
            None
            if read.value("data.num_workers", None) is None
            else read.int("data.num_workers", 0)
        ),
        batch_size=None if batch_size is None else read.int("optimizer.batch_size", 1),
        lr=None if lr is None else float(lr),
        seed=read.int("seed", 0, default=SOLO_LEARN_SEED),
        world_size=world_size(cfg),
        augmentations=nodes,
        views=views,
        probe=_probe(cfg, dataset, probe_node),
        num_large_crops=read.int("data.num_large_crops", 0, default=0),
        num_small_crops=read.int("data.num_small_crops", 0, default=0),
        debug_augmentations=read.bool("debug_augmentations", default=False),
    )
