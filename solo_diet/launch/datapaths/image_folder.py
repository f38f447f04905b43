"""solo-learn's own datasets and loaders (``image_folder``, ``h5``) and DALI datamodule."""

from __future__ import annotations

import random
from typing import Any, Optional

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import KeyReader
from solo_diet.launch.datapaths.base import BatchSamplerHook, DataPath, PretrainData, ViewRequest
from solo_diet.launch.errors import download_failure_named, name_unreadable_images
from solo_diet.launch.settings import (
    FORMAT_KEY,
    DaliSettings,
    FittedBatch,
    LoaderSettings,
    ProbeAugmentation,
    dali_installed,
)


def build_pretrain_transform(dataset: str, aug_cfg: DictConfig):
    """solo-learn's pipeline for one node, + RandomErasing (DIET paper, Alg. 4)."""
    from solo.data.pretrain_dataloader import build_transform_pipeline
    from torchvision import transforms

    pipeline = build_transform_pipeline(dataset, aug_cfg)
    erasing = KeyReader(aug_cfg, "augmentations[]").probability("random_erasing.prob", 0.0)
    if erasing > 0:
        pipeline = transforms.Compose([pipeline, transforms.RandomErasing(p=erasing)])
    return pipeline


def classification_transforms(dataset: str, probe: Optional[ProbeAugmentation]):
    """Train/val probe transforms; custom data's from the probe node (solo-learn's: 224 px)."""
    from solo.data.classification_dataloader import prepare_transforms
    from torchvision import transforms

    if dataset != "custom":
        return prepare_transforms(dataset)
    crop_size, crop_min_scale, mean, std = probe
    normalize = [transforms.ToTensor(), transforms.Normalize(mean=list(mean), std=list(std))]
    crop = transforms.RandomResizedCrop(crop_size, scale=(crop_min_scale, 1.0))
    train = transforms.Compose([crop, transforms.RandomHorizontalFlip(), *normalize])
    resize = transforms.Resize(round(crop_size * 256 / 224))
    val = transforms.Compose([resize, transforms.CenterCrop(crop_size), *normalize])
    return train, val


class ImageFolderPath(DataPath):
    """solo-learn's ``prepare_datasets`` / ``prepare_dataloader`` in the format it reads."""

    formats = ("image_folder", "h5")

    @property
    def solo_format(self) -> str:
        """The format handed to solo-learn's dataset builders (DALI's probes read the folder)."""
        return "h5" if self.settings.format == "h5" else "image_folder"

    def pretrain_data(
        self, run: LoaderSettings, batch_sampler: Optional[BatchSamplerHook] = None
    ) -> PretrainData:
        from solo.data.pretrain_dataloader import (
            FullTransformPipeline,
            NCropAugmentation,
            prepare_dataloader,
            prepare_datasets,
        )

        pipelines = [(build_pretrain_transform(run.dataset, a), a) for a in run.augmentations]
        transform = FullTransformPipeline([NCropAugmentation(p, a.num_crops) for p, a in pipelines])
        if run.debug_augmentations:
            print("Transforms:", transform)
        with download_failure_named(run, "train_path"):
            train_dataset = prepare_datasets(
                run.dataset,
                transform,
                train_data_path=run.train_path,
                data_format=self.solo_format,
                no_labels=run.no_labels,
                data_fraction=run.fraction,
            )
        run.check_one_global_batch(len(train_dataset))
        name_unreadable_images(train_dataset)
        sampler = None if batch_sampler is None else batch_sampler(train_dataset)
        if sampler is not None:
            loader = DataLoader(
                train_dataset, batch_sampler=sampler, num_workers=run.num_workers, pin_memory=True
            )
        else:
            loader = prepare_dataloader(
                train_dataset, batch_size=run.batch_size, num_workers=run.num_workers
            )
        return PretrainData(loader, len(train_dataset), sampler is not None)

    def _datasets(self, run: LoaderSettings, train_transform, val_transform, fraction=-1.0):
        """solo-learn's (train, val) datasets with these transforms, unreadable images named."""
        from solo.data.classification_dataloader import prepare_datasets

        with download_failure_named(run, "train_path", "val_path"):
            datasets = prepare_datasets(
                run.dataset,
                train_transform,
                val_transform,
                train_data_path=run.train_path,
                val_data_path=run.val_path,
                data_format=self.solo_format,
                data_fraction=fraction,
            )
        for dataset in datasets:
            name_unreadable_images(dataset)
        return datasets

    def _probe_loaders(
        self, run: LoaderSettings, batch: int, fitted: bool = False
    ) -> tuple[Any, Any, Optional[FittedBatch]]:
        """solo-learn's loaders of the probe's datasets (``fitted``: the fitted batch too)."""
        from solo.data.classification_dataloader import prepare_dataloaders

        fraction = run.fraction if fitted else -1.0
        datasets = self._datasets(run, *classification_transforms(run.dataset, run.probe), fraction)
        fit = run.fit_probe_batch(len(datasets[0])) if fitted else None
        batch = fit.batch_size if fit else batch
        loaders = prepare_dataloaders(*datasets, batch_size=batch, num_workers=run.num_workers)
        return (*loaders, fit)

    def classification_val_loader(self, run: LoaderSettings, batch_size: int) -> Any:
        return self._probe_loaders(run, batch_size)[1]

    def linear_loaders(self, run: LoaderSettings) -> tuple[Any, Any, Optional[FittedBatch]]:
        return self._probe_loaders(run, run.batch_size, fitted=True)

    def feature_loaders(self, run: LoaderSettings, batch_size: int) -> tuple[Any, Any]:
        transform = classification_transforms(run.dataset, run.probe)[1]
        train, val = self._datasets(run, transform, transform)
        return tuple(
            DataLoader(s, batch_size=batch_size, shuffle=False, num_workers=run.workers(0))
            for s in (train, val)
        )

    def lidar_views(self, run: LoaderSettings, request: ViewRequest) -> torch.Tensor:
        random.seed(request.seed)
        np.random.seed(request.seed)
        torch.manual_seed(request.seed)
        if request.node is not None:
            transform = build_pretrain_transform(run.dataset, request.node)
        else:
            transform = classification_transforms(run.dataset, run.probe)[0]
        _, raw_val = self._datasets(run, None, None)
        chosen = request.choose(len(raw_val)).tolist()
        return torch.stack([transform(raw_val[i][0]) for i in chosen for _ in range(request.views)])


class DaliPath(ImageFolderPath):
    """Pretraining through ``PretrainDALIDataModule`` with the config's augmentations."""

    formats = ("dali",)
    reads = "dali"

    @property
    def dali(self) -> DaliSettings:
        """The run's ``dali`` settings (solo-learn's defaults for settings built by hand)."""
        return self.settings.dali or DaliSettings()

    def check(self, method: str, contract: Any) -> None:
        """Refuse set-ups that would hand an index-based method wrong dataset indices."""
        if contract.uses_sample_indexes and not self.dali.encode_indexes_into_labels:
            raise ConfigError(
                f"method '{method}' uses dataset indices, which {FORMAT_KEY}=dali gives only with "
                "`dali.encode_indexes_into_labels: True` (else arange(B)): set it."
            )

    def pretrain_data(
        self, run: LoaderSettings, batch_sampler: Optional[BatchSamplerHook] = None
    ) -> PretrainData:
        """solo-learn's DALI datamodule (it orders the batches itself)."""
        if not dali_installed():
            raise ConfigError(
                f"`{FORMAT_KEY}: dali` needs NVIDIA DALI, which is not installed: use "
                f"{FORMAT_KEY}=gpu (augmentations on the GPU) or {FORMAT_KEY}=image_folder."
            )
        from solo.data.dali_dataloader import PretrainDALIDataModule, build_transform_pipeline_dali
        from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation
        from solo.utils.misc import compute_dataset_size

        if any(OmegaConf.select(a, "random_erasing.prob", default=0) for a in run.augmentations):
            raise ConfigError(
                f"`augmentations[].random_erasing` is not available with {FORMAT_KEY}=dali."
            )
        device, augmentations = self.dali.device, run.augmentations
        pipelines = [
            build_transform_pipeline_dali(run.dataset, a, dali_device=device) for a in augmentations
        ]
        crops = [NCropAugmentation(p, a.num_crops) for p, a in zip(pipelines, augmentations)]
        data = {"dataset": run.dataset, "no_labels": run.no_labels, "data_fraction": run.fraction}
        datamodule = PretrainDALIDataModule(
            **data,
            train_data_path=run.train_path,
            transforms=FullTransformPipeline(crops),
            num_large_crops=run.num_large_crops,
            num_small_crops=run.num_small_crops,
            num_workers=run.num_workers,
            batch_size=run.batch_size,
            dali_device=device,
            encode_indexes_into_labels=self.dali.encode_indexes_into_labels,
        )
        size = compute_dataset_size(
            **data, train=True, data_path=run.train_path, data_format="dali"
        )
        return PretrainData(datamodule, size)

    def fit_kwargs(self, train: PretrainData, val_loader: Optional[Any]) -> dict[str, Any]:
        """The datamodule, its val loader the online probe's."""
        train.source.val_dataloader = lambda: val_loader
        return {"datamodule": train.source}
