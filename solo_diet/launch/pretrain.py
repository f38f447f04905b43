"""``solo-diet pretrain``: solo-learn pretraining for every registered method, ours included.

Our own launcher calling solo-learn's library functions. Differences from solo-learn's script:
single-view methods are allowed; ``method_kwargs.num_samples`` is computed from the real training
set for methods that use dataset indices; DALI is refused for them unless indices are encoded;
wandb gradient watching is optional; ``augmentations[i].random_erasing.prob`` is supported;
solo-learn's ``LARS`` and ``MomentumUpdater`` run as their same-math foreach versions unless
``performance.foreach_substitutes: False`` (``solo_diet.methods.substitutes``).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from solo_diet.config import ConfigError, unknown_method_hint
from solo_diet.data.pipeline.nodes import check_augmentation_keys
from solo_diet.data.tensor_data import FOLDER_DATASETS
from solo_diet.launch.checkpointing import resume_checkpoint
from solo_diet.launch.common import (
    already_finished,
    classification_loaders,
    fit_or_raise,
    logger_and_callbacks,
    normalize_devices,
    trainer_kwargs,
)
from solo_diet.launch.errors import download_failure_named, name_unreadable_images
from solo_diet.launch.gpu_data import (
    check_data_format,
    dali_installed,
    eval_loader,
    pretrain_loader,
)
from solo_diet.launch.launch_checks import (
    check_accelerator_present,
    check_launch_cfg,
    check_solo_learn_choices,
)
from solo_diet.methods.contract import Contract, method_contract
from solo_diet.methods.substitutes import (
    fill_and_check_substitutes,
    substitute_step_parts,
    substitutes_line,
)


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


def _uses_erasing(cfg: DictConfig) -> bool:
    return any(
        float(OmegaConf.select(a, "random_erasing.prob", default=0.0)) > 0
        for a in cfg.augmentations
    )


def check_augmentations(cfg: DictConfig) -> None:
    """Every augmentation node holds only keys of solo-learn's pipeline, whatever the data format
    (solo-learn's own transforms ignore the others)."""
    for index, node in enumerate(cfg.augmentations):
        check_augmentation_keys(node, f"augmentations[{index}]")


def check_index_source(cfg: DictConfig, contract: Contract) -> None:
    """Refuse set-ups that would hand an index-based method wrong dataset indices."""
    if not contract.uses_sample_indexes or cfg.data.format != "dali":
        return
    if not OmegaConf.select(cfg, "dali.encode_indexes_into_labels", default=False):
        raise ConfigError(
            f"method '{cfg.method}' uses dataset indices as labels, but with data.format=dali "
            "solo-learn returns dummy indices (arange(B)) unless `dali.encode_indexes_into_labels: "
            "True`. Set it."
        )


def set_num_samples(cfg: DictConfig, contract: Contract, num_samples: int) -> None:
    """Write N into ``cfg.method_kwargs.num_samples`` (so args.json carries it); refuse a wrong
    value."""
    if not contract.uses_sample_indexes:
        return
    given = OmegaConf.select(cfg, "method_kwargs.num_samples")
    if given not in (None, "None", num_samples):
        raise ConfigError(
            f"method_kwargs.num_samples={given} but the training set has {num_samples} samples "
            "(after data.fraction). Remove the key: the launcher sets it."
        )
    if cfg.get("method_kwargs") is None:
        cfg.method_kwargs = {}
    cfg.method_kwargs.num_samples = num_samples


def _pretrain_data(cfg: DictConfig, contract: Contract):
    """(train_loader or DALI datamodule, N, whether the method's own batch sampler is used). A
    method whose contract has a ``train_batch_sampler`` (s-DIET) gets it; it also splits the data
    over DDP ranks."""
    from solo.data.pretrain_dataloader import (
        FullTransformPipeline,
        NCropAugmentation,
        prepare_dataloader,
        prepare_datasets,
    )

    if cfg.data.format == "gpu":
        loader, num_samples = pretrain_loader(cfg, contract.train_batch_sampler)
        return loader, num_samples, False
    if cfg.data.format == "dali":
        datamodule, num_samples = _dali_data(cfg)
        return datamodule, num_samples, False

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
            data_format=cfg.data.format,
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
            train_dataset, batch_size=cfg.optimizer.batch_size, num_workers=cfg.data.num_workers
        )
    return loader, len(train_dataset), batch_sampler is not None


def _dali_data(cfg: DictConfig):
    """(solo-learn's DALI datamodule with the config's augmentations, N) for ``data.format:
    dali``."""
    if not dali_installed():
        raise ConfigError(
            "`data.format: dali` needs NVIDIA DALI, which is not installed: use data.format=gpu "
            "(batched augmentations on the GPU) or data.format=image_folder."
        )
    from solo.data.dali_dataloader import PretrainDALIDataModule, build_transform_pipeline_dali
    from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation
    from solo.utils.misc import compute_dataset_size

    if _uses_erasing(cfg):
        raise ConfigError(
            "`augmentations[].random_erasing` is not available with data.format=dali."
        )
    transform = FullTransformPipeline(
        [
            NCropAugmentation(
                build_transform_pipeline_dali(cfg.data.dataset, aug, dali_device=cfg.dali.device),
                aug.num_crops,
            )
            for aug in cfg.augmentations
        ]
    )
    datamodule = PretrainDALIDataModule(
        dataset=cfg.data.dataset,
        train_data_path=cfg.data.train_path,
        transforms=transform,
        num_large_crops=cfg.data.num_large_crops,
        num_small_crops=cfg.data.num_small_crops,
        num_workers=cfg.data.num_workers,
        batch_size=cfg.optimizer.batch_size,
        no_labels=cfg.data.no_labels,
        data_fraction=cfg.data.fraction,
        dali_device=cfg.dali.device,
        encode_indexes_into_labels=cfg.dali.encode_indexes_into_labels,
    )
    num_samples = compute_dataset_size(
        dataset=cfg.data.dataset,
        train=True,
        data_path=cfg.data.train_path,
        data_format="dali",
        no_labels=cfg.data.no_labels,
        data_fraction=cfg.data.fraction,
    )
    return datamodule, num_samples


def _val_loader(cfg: DictConfig):
    """Validation loader for the online probe, or None when there is no labelled val set."""
    no_val = cfg.data.val_path is None and cfg.data.dataset in FOLDER_DATASETS
    if no_val or (cfg.data.dataset == "custom" and cfg.data.no_labels):
        return None
    if cfg.data.format == "gpu":
        return eval_loader(cfg, cfg.augmentations[0], cfg.optimizer.batch_size)
    _, val_loader = classification_loaders(cfg, cfg.augmentations[0], cfg.optimizer.batch_size)
    return val_loader


def prepare_cfg(cfg: DictConfig) -> tuple[DictConfig, type, Contract]:
    """What ``run_pretrain`` does to a composed cfg before reading any data: devices, data format,
    solo-learn's ``parse_cfg``; returns it with the registered method class and its contract."""
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    OmegaConf.set_struct(cfg, False)
    normalize_devices(cfg)
    check_launch_cfg(cfg)
    check_data_format(cfg)
    check_augmentations(cfg)
    cfg = parse_cfg(cfg)
    if cfg.method not in METHODS:
        hint = unknown_method_hint(cfg.method, METHODS)
        raise ConfigError(f"unknown `method: {cfg.method}`; {hint}")
    method_cls = METHODS[cfg.method]
    check_solo_learn_choices(cfg, method_cls)
    contract = method_contract(method_cls)
    check_index_source(cfg, contract)
    fill_and_check_substitutes(cfg)
    return cfg, method_cls, contract


def build_model(cfg: DictConfig, method_cls: type) -> torch.nn.Module:
    """The method as the launcher trains it: built from the parsed cfg, with our same-math
    substitutes (named in one printed line), contiguous, channels-last unless
    ``performance.disable_channel_last``."""
    from solo.utils.misc import make_contiguous

    model = method_cls(cfg)
    substitutes = substitutes_line(substitute_step_parts(cfg, model))
    if substitutes:
        print(substitutes, flush=True)
    make_contiguous(model)
    if not OmegaConf.select(cfg, "performance.disable_channel_last", default=False):
        model = model.to(memory_format=torch.channels_last)
    return model


def run_pretrain(cfg: DictConfig, extra_callbacks: Sequence = ()) -> Optional[str]:
    """Pretrain ``cfg.method`` as solo-learn would; returns the last checkpoint path (or None).

    ``extra_callbacks`` (Lightning callbacks) are added to the Trainer's (``solo-diet compare``).
    An interrupted fit raises ``solo_diet.launch.errors.Interrupted``; resuming a run that already
    reached ``max_epochs`` trains nothing and returns its checkpoint."""
    from lightning.pytorch import Trainer, seed_everything

    import solo_diet

    solo_diet.register()
    check_accelerator_present(cfg)
    cfg, method_cls, contract = prepare_cfg(cfg)
    seed_everything(cfg.seed)

    train_data, num_samples, own_sampler = _pretrain_data(cfg, contract)
    name_unreadable_images(getattr(train_data, "dataset", None))
    set_num_samples(cfg, contract, num_samples)
    val_loader = _val_loader(cfg)

    model = build_model(cfg, method_cls)

    logdir = os.path.join(cfg.checkpoint.dir, cfg.method)
    ckpt_path, wandb_run_id = resume_checkpoint(cfg, logdir)
    if already_finished(ckpt_path, cfg):
        epochs = cfg.max_epochs
        print(f"nothing to train: {ckpt_path} already holds the last of max_epochs={epochs}.")
        return str(ckpt_path)
    logger, callbacks, checkpointer = logger_and_callbacks(
        cfg, model, logdir, wandb_run_id, resume_from=ckpt_path
    )
    kwargs = trainer_kwargs(cfg, callbacks + list(extra_callbacks), logger)
    if own_sampler:
        kwargs["use_distributed_sampler"] = (
            False  # the method's batch sampler splits the ranks itself
        )
    trainer = Trainer(**kwargs)
    if cfg.data.format == "dali":
        train_data.val_dataloader = lambda: val_loader
        fit_or_raise(trainer, model, cfg, checkpointer, ckpt_path=ckpt_path, datamodule=train_data)
    else:
        fit_or_raise(
            trainer,
            model,
            cfg,
            checkpointer,
            train_dataloaders=train_data,
            val_dataloaders=val_loader,
            ckpt_path=ckpt_path,
        )
    last = getattr(checkpointer, "last_ckpt", None)
    return None if last is None else str(last)
