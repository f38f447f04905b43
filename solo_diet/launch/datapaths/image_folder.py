"""solo-learn's own datasets and loaders (``image_folder`` and ``h5``): PIL transforms in loader
worker processes, as solo-learn's scripts train."""

from __future__ import annotations

import random
from typing import Any, Optional

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from solo_diet.config import ConfigError
from solo_diet.launch.common import classification_transforms
from solo_diet.launch.datapaths.base import DataPath, PretrainData, ViewRequest
from solo_diet.launch.errors import download_failure_named, name_unreadable_images
from solo_diet.launch.gpu_data import fit_probe_batch


def build_pretrain_transform(dataset: str, aug_cfg: DictConfig):
    """solo-learn's pipeline for one augmentation node, + RandomErasing (DIET paper, Alg. 4) when
    ``random_erasing.prob > 0`` (applied on the normalised tensor, torchvision defaults)."""
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision import transforms

    pipeline = build_transform_pipeline(dataset, aug_cfg)
    erasing = float(OmegaConf.select(aug_cfg, "random_erasing.prob", default=0.0))
    if not 0.0 <= erasing <= 1.0:
        raise ConfigError(
            f"`augmentations[].random_erasing.prob` must be in [0, 1], got {erasing}."
        )
    if erasing > 0:
        pipeline = transforms.Compose([pipeline, transforms.RandomErasing(p=erasing)])
    return pipeline


class ImageFolderPath(DataPath):
    """solo-learn's ``prepare_datasets`` / ``prepare_dataloader`` in the format it reads."""

    formats = ("image_folder", "h5")

    @property
    def solo_format(self) -> str:
        """The format handed to solo-learn's dataset builders."""
        return self.settings.format

    def pretrain_data(self, cfg: DictConfig, contract: Any) -> PretrainData:
        from solo.data.pretrain_dataloader import (
            FullTransformPipeline,
            NCropAugmentation,
            prepare_dataloader,
            prepare_datasets,
        )

        transform = FullTransformPipeline(
            [
                NCropAugmentation(build_pretrain_transform(cfg.data.dataset, aug), aug.num_crops)
                for aug in cfg.augmentations
            ]
        )
        if cfg.debug_augmentations:
            print("Transforms:", transform)
        with download_failure_named(cfg.data, "train_path"):
            train_dataset = prepare_datasets(
                cfg.data.dataset,
                transform,
                train_data_path=cfg.data.train_path,
                data_format=self.solo_format,
                no_labels=cfg.data.no_labels,
                data_fraction=cfg.data.fraction,
            )
        batch_sampler = contract.train_batch_sampler(cfg, train_dataset)
        if batch_sampler is not None:
            from torch.utils.data import DataLoader

            loader = DataLoader(
                train_dataset,
                batch_sampler=batch_sampler,
                num_workers=cfg.data.num_workers,
                pin_memory=True,
            )
        else:
            loader = prepare_dataloader(
                train_dataset,
                batch_size=cfg.optimizer.batch_size,
                num_workers=cfg.data.num_workers,
            )
        return PretrainData(loader, len(train_dataset), batch_sampler is not None)

    def classification_loaders(
        self, cfg: DictConfig, aug: DictConfig, batch_size: int, fraction: float = -1
    ):
        """solo-learn's classification datasets/loaders (train shuffled, val in order) with our
        transforms; ``aug`` holds ``crop_size`` and optionally ``mean``, ``std``,
        ``crop_min_scale``."""
        from solo.data.classification_dataloader import prepare_dataloaders, prepare_datasets

        train_transform, val_transform = classification_transforms(cfg.data.dataset, aug)
        with download_failure_named(cfg.data, "train_path", "val_path"):
            train_set, val_set = prepare_datasets(
                cfg.data.dataset,
                train_transform,
                val_transform,
                train_data_path=cfg.data.train_path,
                val_data_path=cfg.data.val_path,
                data_format=self.solo_format,
                data_fraction=fraction,
            )
        name_unreadable_images(train_set)
        name_unreadable_images(val_set)
        return prepare_dataloaders(
            train_set, val_set, batch_size=batch_size, num_workers=cfg.data.num_workers
        )

    def classification_val_loader(self, cfg: DictConfig, aug: DictConfig, batch_size: int) -> Any:
        return self.classification_loaders(cfg, aug, batch_size)[1]

    def linear_loaders(self, cfg: DictConfig) -> tuple[Any, Any, Optional[dict[str, int]]]:
        def loaders():
            aug, batch_size = cfg.data.augmentations, cfg.optimizer.batch_size
            return self.classification_loaders(cfg, aug, batch_size, cfg.data.fraction)

        train, val = loaders()
        fitted = fit_probe_batch(cfg, len(train.dataset))
        if fitted:
            train, val = loaders()
        return train, val, fitted

    def _datasets(self, cfg: DictConfig, eval_transform: bool):
        """The probe's (train, val) datasets, eval-transformed or raw (PIL images)."""
        from solo.data.classification_dataloader import prepare_datasets

        data = cfg.data
        transform = (
            classification_transforms(data.dataset, data.augmentations)[1]
            if eval_transform
            else None
        )
        with download_failure_named(data, "train_path", "val_path"):
            return prepare_datasets(
                data.dataset,
                transform,
                transform,
                train_data_path=data.train_path,
                val_data_path=data.val_path,
                data_format=self.solo_format,
            )

    def feature_loaders(self, cfg: DictConfig, batch_size: int) -> tuple[Any, Any]:
        from torch.utils.data import DataLoader

        workers = int(OmegaConf.select(cfg, "data.num_workers", default=0))
        train, val = self._datasets(cfg, eval_transform=True)
        return tuple(
            DataLoader(s, batch_size=batch_size, shuffle=False, num_workers=workers)
            for s in (train, val)
        )

    def lidar_views(self, cfg: DictConfig, request: ViewRequest) -> torch.Tensor:
        random.seed(request.seed)
        np.random.seed(request.seed)
        torch.manual_seed(request.seed)
        if request.node is not None:
            transform = build_pretrain_transform(cfg.data.dataset, request.node)
        else:
            transform = classification_transforms(cfg.data.dataset, cfg.data.augmentations)[0]
        _, raw_val = self._datasets(cfg, eval_transform=False)
        chosen = request.choose(len(raw_val)).tolist()
        return torch.stack([transform(raw_val[i][0]) for i in chosen for _ in range(request.views)])
