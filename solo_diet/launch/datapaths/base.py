"""The interface every data path gives the launchers and compare's evaluation: pretraining data,
the online probe's val loader, the linear probe's loaders, the feature loaders and LiDAR's views.

A subclass names the data formats it serves in ``formats``; defining it registers it with the
factory (:func:`solo_diet.launch.datapaths.make_data_path`), so a new format is one new module in
this package."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Optional

import torch
from omegaconf import DictConfig

from solo_diet.data.tensor_data import FOLDER_DATASETS
from solo_diet.launch.settings import DataSettings

# the data path class serving each format, in the order the modules define them
REGISTRY: dict[str, type["DataPath"]] = {}


@dataclass(frozen=True)
class ViewRequest:
    """LiDAR's views: ``views`` augmented views (augmentation ``node``, or the probe's training
    transform when None) of each val image ``choose(number of images)`` picks, made
    ``batch_size`` at a time on ``device`` where the path augments there, seeded by ``seed``."""

    node: Optional[DictConfig]
    choose: Callable[[int], torch.Tensor]
    views: int
    batch_size: int
    seed: int
    device: torch.device


@dataclass
class PretrainData:
    """What pretraining reads: a loader (or a datamodule), the training set's size N and whether
    the method's own batch sampler orders the batches (it then splits the ranks itself)."""

    source: Any
    num_samples: int
    own_sampler: bool = False


class DataPath:
    """One data format's loaders, built from the run's checked :class:`DataSettings` and its
    (parsed) cfg."""

    formats: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.__dict__.get("formats", ()):
            REGISTRY[name] = cls

    def __init__(self, settings: DataSettings):
        self.settings = settings

    @classmethod
    def read_settings(cls, cfg: DictConfig, data_format: str) -> DataSettings:
        """The settings of this path's keys, filled and checked (by default it has none)."""
        return DataSettings(data_format)

    def check(self, cfg: DictConfig, contract: Any) -> None:
        """Refuse, before any data is read, what this path cannot give the method (its
        :class:`~solo_diet.methods.contract.Contract`)."""

    def pretrain_data(self, cfg: DictConfig, contract: Any) -> PretrainData:
        """The pretraining batches ``[indexes, [views...], targets]``; a contract's
        ``train_batch_sampler`` (s-DIET) orders them where the path allows."""
        raise NotImplementedError

    def val_loader(self, cfg: DictConfig) -> Optional[Any]:
        """The online probe's validation loader, or None without a labelled val set."""
        no_val = cfg.data.val_path is None and cfg.data.dataset in FOLDER_DATASETS
        if no_val or (cfg.data.dataset == "custom" and cfg.data.no_labels):
            return None
        return self.classification_val_loader(cfg, cfg.augmentations[0], cfg.optimizer.batch_size)

    def classification_val_loader(self, cfg: DictConfig, aug: DictConfig, batch_size: int) -> Any:
        """``[images, targets]`` of the val set in order, eval-transformed (crop and statistics
        from ``aug``), each DDP rank its share."""
        raise NotImplementedError

    def linear_loaders(self, cfg: DictConfig) -> tuple[Any, Any, Optional[dict[str, int]]]:
        """``solo-diet linear``'s training and validation loaders, and the batch fitted to a
        training set smaller than one batch (``fit_probe_batch``), or None."""
        raise NotImplementedError

    def feature_loaders(self, cfg: DictConfig, batch_size: int) -> tuple[Any, Any]:
        """Every image of the probe's (``cfg``, a linear cfg) train and val sets once, in order,
        eval-transformed: features for kNN, RankMe, k-means. Not split over ranks."""
        raise NotImplementedError

    def lidar_views(self, cfg: DictConfig, request: ViewRequest) -> torch.Tensor:
        """The views ``request`` asks for, on the CPU, in the order of the chosen images."""
        raise NotImplementedError

    def fit_kwargs(self, train: PretrainData, val_loader: Optional[Any]) -> dict[str, Any]:
        """How ``Trainer.fit`` is handed the pretraining and validation data."""
        return {"train_dataloaders": train.source, "val_dataloaders": val_loader}
