"""The data and performance settings of a launch, read, filled and checked once at the launcher's
boundary into frozen dataclasses (docs/launchers.md, "Settings and data paths"). The data format is
read here and by the data-path factory (:mod:`solo_diet.launch.datapaths`), nowhere else."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from solo_diet.config import ConfigError, KeyReader, parse_section, setting, write_section
from solo_diet.config import core_errors_named as core_errors_named  # the launchers import it here

FORMAT_KEY = "data.format"
LAUNCH_DATA_FORMATS = ("auto", "gpu", "image_folder")  # what `demo` and `compare` choose from
# the GPU data path's core arguments and the keys that set them: the core's errors name the
# arguments, `core_errors_named(GPU_ARGUMENT_KEYS)` (re-exported here) names the keys
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
    """The checked ``data.gpu.*`` values (docs/data-path.md) and where batches are made (``cuda``
    or ``cpu``, from ``accelerator``)."""

    storage: str = "auto"
    image_size: Optional[int] = setting(None, minimum=1)
    decode_threads: Optional[int] = setting(None, minimum=1)
    cuda_graphs: bool = True
    decode_cache: bool = True
    device: str = field(default="cuda", metadata={"computed": True})
    on_corrupt: str = "stop"

    def checked(self, cfg: DictConfig) -> "GPUDataSettings":
        """The storage and corrupt-file choices (torch modules: imported when a GPU path is
        parsed) and where batches are made, from ``accelerator``."""
        import torch

        from solo_diet.data.loader import STORAGES
        from solo_diet.data.stream import ON_CORRUPT

        read = KeyReader(cfg)
        if read.value("dali") is not None:
            raise read.fail(
                "dali",
                f"options apply to {FORMAT_KEY}=dali; with {FORMAT_KEY}=gpu remove the `dali` "
                "section.",
            )
        read.choice("data.gpu.storage", (*STORAGES, "stream"), default=self.storage)
        read.choice("data.gpu.on_corrupt", ON_CORRUPT, default=self.on_corrupt)
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
    """The checked ``dali.*`` values of solo-learn's DALI datamodule: where it augments, and
    whether its batches carry the true dataset indices (index methods need them)."""

    device: str = setting("gpu", choices=("gpu", "cpu"))
    encode_indexes_into_labels: bool = False


@dataclass(frozen=True)
class DataSettings:
    """How a run reads its data: the checked data format and, for the GPU and DALI data paths,
    their settings. Built once per run by :func:`parse_data_settings`."""

    format: str = "image_folder"
    gpu: Optional[GPUDataSettings] = None
    dali: Optional[DaliSettings] = None


@dataclass(frozen=True)
class PerformanceSettings:
    """The ``performance.*`` keys of ``solo-diet pretrain`` (docs/launchers.md): our same-math
    substitutes of solo-learn's step parts, channels-last."""

    foreach_substitutes: bool = True
    disable_channel_last: bool = False


def parse_performance_settings(cfg: DictConfig) -> PerformanceSettings:
    """Fill and check the ``performance`` section (a key that is none of its fields is refused,
    naming the closest)."""
    parsed = parse_section(PerformanceSettings, cfg, "performance", "`performance`")
    write_section(cfg, "performance", parsed)
    return parsed


# the sections a data path reads (its ``reads``): their key and schema
DATA_PATH_SECTIONS = {
    "gpu": ("data.gpu", GPUDataSettings, "the GPU data path"),
    "dali": ("dali", DaliSettings, "solo-learn's DALI datamodule"),
}


def resolve_launch_format(requested: str, on_gpu: bool, key: str) -> str:
    """A ``demo`` or ``compare`` choice of :data:`LAUNCH_DATA_FORMATS` (``key`` names it in the
    error): ``auto`` is the GPU data path on a GPU, solo-learn's image-folder loader otherwise."""
    if requested not in LAUNCH_DATA_FORMATS:
        raise ConfigError(f"{key} must be one of {list(LAUNCH_DATA_FORMATS)}, got {requested!r}.")
    if requested == "auto":
        return "gpu" if on_gpu else "image_folder"
    return requested


def resolve_spec_format(spec: DictConfig, spec_path: str | Path) -> str:
    """A compare spec's data format (:func:`resolve_launch_format`), written back into the spec."""
    import torch

    requested = OmegaConf.select(spec, FORMAT_KEY)
    key = f"{spec_path}: `{FORMAT_KEY}`"
    resolved = resolve_launch_format(requested, torch.cuda.is_available(), key)
    OmegaConf.update(spec, FORMAT_KEY, resolved)
    return resolved


def format_of(cfg: DictConfig) -> str:
    """The data format a composed config or a parsed compare spec holds (for reports and
    fingerprints; launchers use :func:`parse_data_settings`)."""
    return str(OmegaConf.select(cfg, FORMAT_KEY, default="image_folder"))


def format_override(data_format: str) -> str:
    """The Hydra override that sets the data format."""
    return f"{FORMAT_KEY}={data_format}"


def dali_installed() -> bool:
    """Whether NVIDIA DALI (solo-learn's ``dali`` data format) is importable."""
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` package at all
        return False
