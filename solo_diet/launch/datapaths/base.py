"""The interface every data path gives the launchers and compare (checked settings, no config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional, Sequence

import torch
from omegaconf import DictConfig

from solo_diet.core.data import FOLDER_DATASETS
from solo_diet.launch.settings import DataSettings, FittedBatch, LoaderSettings

# a method's batch order for a training set (None: shuffled), bound to its config by the launcher
BatchSamplerHook = Callable[[Sequence[Any]], Optional[Any]]
# the data path class serving each format, in the order the modules define them
REGISTRY: dict[str, type["DataPath"]] = {}


@dataclass(frozen=True)
class ViewRequest:
    """LiDAR's ``views`` seeded views (``node``'s, or the probe's) of the chosen val images."""

    node: Optional[DictConfig]
    choose: Callable[[int], torch.Tensor]
    views: int
    batch_size: int
    seed: int
    device: torch.device


@dataclass
class PretrainData:
    """A loader (or datamodule), N, and whether the method's own sampler orders it."""

    source: Any
    num_samples: int
    own_sampler: bool = False


class DataPath:
    """One data format's loaders, built from the run's checked :class:`DataSettings`."""

    formats: ClassVar[tuple[str, ...]] = ()
    # the section of DataSettings this path reads ("gpu", "dali"; None: no keys of its own)
    reads: ClassVar[Optional[str]] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("formats", ()):
            REGISTRY[name] = cls

    def __init__(self, settings: DataSettings):
        self.settings = settings

    def close(self) -> None:
        """Release what the loaders hold, once a fit ends however it ends; nothing by default."""

    def check(self, method: str, contract: Any) -> None:
        """Refuse what this path cannot give ``method`` (its contract), before any data is read."""

    def pretrain_data(
        self, run: LoaderSettings, batch_sampler: Optional[BatchSamplerHook] = None
    ) -> PretrainData:
        """The pretraining batches, in ``batch_sampler(dataset)``'s order, else shuffled."""
        raise NotImplementedError

    def val_loader(self, run: LoaderSettings) -> Optional[Any]:
        """The online probe's validation loader, or None without a labelled val set."""
        no_val = run.val_path is None and run.dataset in FOLDER_DATASETS
        if no_val or (run.dataset == "custom" and run.no_labels):
            return None
        return self.classification_val_loader(run, run.batch_size)

    def classification_val_loader(self, run: LoaderSettings, batch_size: int) -> Any:
        """The val set in order, eval-transformed as the probe's, each DDP rank its share."""
        raise NotImplementedError

    def linear_loaders(self, run: LoaderSettings) -> tuple[Any, Any, Optional[FittedBatch]]:
        """``solo-diet linear``'s train and val loaders, and the fitted batch or None."""
        raise NotImplementedError

    def feature_loaders(self, run: LoaderSettings, batch_size: int) -> tuple[Any, Any]:
        """The probe's train and val sets once, in order, eval-transformed, not split over ranks."""
        raise NotImplementedError

    def lidar_views(self, run: LoaderSettings, request: ViewRequest) -> torch.Tensor:
        """The views ``request`` asks for, on the CPU, in the order of the chosen images."""
        raise NotImplementedError

    def fit_kwargs(self, train: PretrainData, val_loader: Optional[Any]) -> dict[str, Any]:
        """How ``Trainer.fit`` is handed the pretraining and validation data."""
        return {"train_dataloaders": train.source, "val_dataloaders": val_loader}
