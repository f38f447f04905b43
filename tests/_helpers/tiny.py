"""Tiny CPU configs, fake loaders and trainers that drive solo-learn methods, for the tests and two
benchmarks (moved here from the installed package). Those that need solo-learn or Lightning import
it when called, so importing this module needs neither."""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader


def augmentation_cfg(crop_size: int = 32, num_crops: int = 2) -> dict:
    """A light solo-learn augmentation pipeline node (crop + flip) of ``num_crops`` views."""
    return {
        "crop_size": crop_size,
        "num_crops": num_crops,
        "rrc": {"enabled": True, "crop_min_scale": 0.5, "crop_max_scale": 1.0},
        "color_jitter": {
            "prob": 0.0,
            "brightness": 0.4,
            "contrast": 0.4,
            "saturation": 0.2,
            "hue": 0.1,
        },
        "grayscale": {"prob": 0.0},
        "gaussian_blur": {"prob": 0.0},
        "solarization": {"prob": 0.0},
        "equalization": {"prob": 0.0},
        "horizontal_flip": {"prob": 0.5},
    }


def tiny_cfg(
    method: str,
    method_kwargs: Optional[dict] = None,
    *,
    num_large_crops: int = 2,
    num_small_crops: int = 0,
    num_classes: int = 5,
    batch_size: int = 4,
    backbone: str = "cp_resnet8",
    backbone_kwargs: Optional[dict] = None,
    dataset: str = "custom",
    optimizer: str = "adamw",
    momentum: bool = False,
    max_epochs: int = 2,
) -> DictConfig:
    """A complete, already-parsed solo-learn cfg for a tiny CPU run (no files needed)."""
    if backbone_kwargs is None:
        backbone_kwargs = {"width": 8} if backbone == "cp_resnet8" else {}
    cfg = {
        "name": f"test-{method}",
        "method": method,
        "backbone": {"name": backbone, "kwargs": backbone_kwargs},
        "method_kwargs": dict(method_kwargs or {}),
        "data": {
            "dataset": dataset,
            "train_path": ".",
            "val_path": ".",
            "format": "image_folder",
            "num_workers": 0,
            "num_large_crops": num_large_crops,
            "num_small_crops": num_small_crops,
            "num_classes": num_classes,
            "no_labels": False,
            "fraction": -1,
        },
        "augmentations": [augmentation_cfg(32, num_large_crops)]
        + ([augmentation_cfg(16, num_small_crops)] if num_small_crops else []),
        "optimizer": {
            "name": optimizer,
            "batch_size": batch_size,
            "lr": 1e-3,
            "classifier_lr": 1e-3,
            "weight_decay": 1e-4,
            "kwargs": {"betas": [0.9, 0.999]} if optimizer == "adamw" else {"momentum": 0.9},
        },
        "scheduler": {"name": "warmup_cosine", "warmup_epochs": 0},
        "checkpoint": {"enabled": False},
        "auto_resume": {"enabled": False},
        "max_epochs": max_epochs,
        "devices": 1,
        "accelerator": "cpu",
        "strategy": "auto",
        "num_nodes": 1,
        "precision": 32,
        "seed": 0,
    }
    if momentum:
        cfg["momentum"] = {"base_tau": 0.99, "final_tau": 1.0}
    cfg = OmegaConf.create(cfg)
    OmegaConf.set_struct(cfg, False)
    return cfg


def smoke_cfg(
    method: str,
    method_kwargs: Optional[dict] = None,
    *,
    num_samples: int = 32,
    **tiny: Any,
) -> DictConfig:
    """:func:`tiny_cfg` for the registered ``method`` as its contract asks
    (:mod:`solo_diet.methods.contract`): its ``smoke_kwargs`` under ``method_kwargs``,
    ``num_samples`` when it uses sample indexes, and its ``views`` as large crops unless ``tiny``
    sets ``num_large_crops``. Chooses nothing by the method's name."""
    from solo.methods import METHODS

    from solo_diet.methods.contract import method_contract

    contract = method_contract(METHODS[method])
    kwargs = {**contract.smoke_kwargs, **(method_kwargs or {})}
    if contract.uses_sample_indexes:
        kwargs.setdefault("num_samples", num_samples)
    tiny.setdefault("num_large_crops", contract.views)
    return tiny_cfg(method, kwargs, **tiny)


def fake_pretrain_loader(
    cfg: DictConfig, num_samples: int = 32, image_size: int = 32, shuffle: bool = True
) -> DataLoader:
    """solo-learn's real pretraining pipeline (index, crops, target) over ``FakeData``."""
    from solo.data.pretrain_dataloader import (
        FullTransformPipeline,
        NCropAugmentation,
        build_transform_pipeline,
        dataset_with_index,
    )
    from torchvision.datasets import FakeData

    pipelines = [
        NCropAugmentation(build_transform_pipeline(cfg.data.dataset, aug), aug.num_crops)
        for aug in cfg.augmentations
    ]
    dataset = dataset_with_index(FakeData)(
        size=num_samples,
        image_size=(3, image_size, image_size),
        num_classes=cfg.data.num_classes,
        transform=FullTransformPipeline(pipelines),
    )
    return DataLoader(
        dataset, batch_size=cfg.optimizer.batch_size, shuffle=shuffle, drop_last=True, num_workers=0
    )


def fake_val_loader(cfg: DictConfig, num_samples: int = 16, image_size: int = 32) -> DataLoader:
    """Validation batches ``(X, target)`` over ``FakeData``."""
    from torchvision import transforms
    from torchvision.datasets import FakeData

    dataset = FakeData(
        size=num_samples,
        image_size=(3, image_size, image_size),
        num_classes=cfg.data.num_classes,
        transform=transforms.ToTensor(),
    )
    return DataLoader(dataset, batch_size=cfg.optimizer.batch_size, num_workers=0)


def tiny_trainer(cfg: DictConfig, callbacks: Iterable[Any] = (), **overrides: Any) -> Any:
    """A CPU Trainer from the cfg's Trainer keys; no logger, no checkpointing, ``fast_dev_run`` by
    default."""
    from lightning.pytorch import Trainer

    valid = inspect.signature(Trainer.__init__).parameters
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg).items() if k in valid}
    kwargs.update(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=list(callbacks),
        fast_dev_run=True,
    )
    kwargs.update(overrides)
    return Trainer(**kwargs)


def batch_of(
    cfg: DictConfig, batch_size: int = 4, image_size: int = 32, num_samples: int = 32
) -> list:
    """One random training batch ``[indexes, [views], targets]`` in solo-learn's format."""
    generator = torch.Generator().manual_seed(0)
    views = [
        torch.randn(batch_size, 3, image_size, image_size, generator=generator)
        for _ in range(cfg.data.num_large_crops)
    ]
    indexes = torch.randperm(num_samples, generator=generator)[:batch_size]
    targets = torch.randint(0, cfg.data.num_classes, (batch_size,), generator=generator)
    return [indexes, views, targets]
