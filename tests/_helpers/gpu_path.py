"""The GPU data path's tiny runs: configs, a fit through the path (as the launcher fits) and
the recorded batches, the command lines of `pretrain` and `linear`, the DDP script."""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from lightning.pytorch import Callback
from solo.methods import METHODS

from solo_diet.launch.common import fit_or_raise
from solo_diet.launch.datapaths import make_data_path, parse_data_settings
from solo_diet.launch.settings import (
    PRETRAIN_PROBE_NODE,
    parse_loader_settings,
)
from solo_diet.methods.contract import method_contract
from tests._helpers import SCRIPTS
from tests._helpers.methods import (
    solo_learn_kwargs,
)
from tests._helpers.synthetic import write_image_folder
from tests._helpers.tiny import smoke_cfg, tiny_trainer

CLASSES, PER_CLASS, BATCH = 5, 4, 8

NUM_TRAIN = CLASSES * PER_CLASS


class BatchRecorder(Callback):
    """Keeps (epoch, indexes, first view) of each training batch; checks solo-learn's structure."""

    def __init__(self, num_views: int):
        self.num_views, self.seen = num_views, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        indexes, views, targets = batch
        assert isinstance(views, list) and len(views) == self.num_views
        assert all(v.dtype == torch.float32 and v.shape[0] == indexes.shape[0] for v in views)
        assert indexes.dtype == torch.int64 and targets.shape == indexes.shape
        self.seen.append((trainer.current_epoch, indexes.clone(), views[0].clone()))


def gpu_cfg(method: str, data: Path, **tiny):
    """A tiny parsed cfg whose data comes through the GPU path from the ImageFolder ``data``; the
    method's contract sets its smoke settings, views and ``num_samples``."""
    kwargs = solo_learn_kwargs(method, tiny)
    cfg = smoke_cfg(method, kwargs, num_samples=NUM_TRAIN, momentum=True, batch_size=BATCH, **tiny)
    cfg.data.update(format="gpu", train_path=str(data / "train"), val_path=str(data / "val"))
    return cfg


def settings_of(cfg, probe_node: str = PRETRAIN_PROBE_NODE):
    """The loader settings and the data path of a parsed cfg, as the launcher makes them once."""
    data = parse_data_settings(cfg)
    return parse_loader_settings(cfg, data, probe_node), make_data_path(data)


def fit_through_gpu_path(cfg, **trainer_overrides):
    method_cls = METHODS[cfg.method]
    run, path = settings_of(cfg)
    hook = functools.partial(method_contract(method_cls).train_batch_sampler, cfg)
    pretrain = path.pretrain_data(run, hook)
    train, num_samples = pretrain.source, pretrain.num_samples
    assert num_samples == NUM_TRAIN  # gpu_cfg sets method_kwargs.num_samples for index methods
    model = method_cls(cfg)
    recorder = BatchRecorder(cfg.data.num_large_crops + cfg.data.num_small_crops)
    trainer = tiny_trainer(cfg, callbacks=[recorder], **trainer_overrides)
    val = path.classification_val_loader(run, BATCH)
    # as the launcher fits: a streaming path's persistent workers stop when the fit ends
    fit_or_raise(trainer, model, cfg, None, path, train_dataloaders=train, val_dataloaders=val)
    return trainer, recorder, train


def check_fast_dev_run_through_the_gpu_path(method: str, data: Path):
    """One training and one val batch of ``method`` through the GPU path (on the CPU here), with
    the views and batch order its contract declares; returns the trained model."""
    cfg = gpu_cfg(method, data)
    trainer, recorder, train = fit_through_gpu_path(cfg)
    assert len(recorder.seen) == 1 and "val_acc1" in trainer.callback_metrics
    assert recorder.num_views == method_contract(METHODS[method]).views
    indexes = recorder.seen[0][1]
    assert indexes.unique().numel() == BATCH and 0 <= indexes.min() and indexes.max() < NUM_TRAIN
    assert torch.equal(indexes, torch.as_tensor(next(iter(train.batch_sampler))))
    return trainer.lightning_module


def pretrain_argv(data: Path, out: Path, config: str) -> list:
    return [
        "pretrain", "--config-path", str(SCRIPTS / "pretrain" / "custom"), "--config-name", config,
        f"data.train_path={data / 'train'}", f"data.val_path={data / 'val'}", "data.format=gpu",
        f"checkpoint.dir={out}", "auto_resume.enabled=False", "++wandb.enabled=False",
        "max_epochs=2", "accelerator=cpu", "devices=1", "precision=32",
        "++limit_train_batches=2", "++limit_val_batches=1",
        "++num_sanity_val_steps=0", "++enable_progress_bar=False", "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8", "augmentations.0.crop_size=32", "optimizer.batch_size=4",
    ]  # fmt: skip


def linear_argv(data: Path, ckpt: Path, out: Path) -> list:
    return [
        "linear", "--config-path", str(SCRIPTS / "linear" / "custom"), "--config-name", "diet",
        f"data.train_path={data / 'train'}", f"data.val_path={data / 'val'}", "data.format=gpu",
        f"pretrained_feature_extractor='{ckpt}'", "data.augmentations.crop_size=32",
        "optimizer.batch_size=4", f"checkpoint.dir={out}", "auto_resume.enabled=False",
        "wandb.enabled=False", "max_epochs=1", "accelerator=cpu", "devices=1", "precision=32",
        "++limit_train_batches=2", "++num_sanity_val_steps=0", "++enable_progress_bar=False",
    ]  # fmt: skip


class LoaderProbe(Callback):
    def on_train_end(self, trainer, pl_module):
        self.loader, self.model_sampler = trainer.train_dataloader, pl_module.super_batch_sampler


DDP_SCRIPT = """
import sys
import torch
from lightning.pytorch import Callback
from solo_diet.launch.common import compose_cfg
from solo_diet.launch.pretrain import run_pretrain

class SaveIndexes(Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.seen.append(batch[0].cpu())

    def on_train_end(self, trainer, module):
        torch.save(torch.stack(self.seen), f"{sys.argv[1]}/rank{trainer.global_rank}.pt")

run_pretrain(compose_cfg(sys.argv[2], "diet", sys.argv[3:]), extra_callbacks=[SaveIndexes()])
"""


def write_images(root: Path) -> Path:
    """The tiny ImageFolder of the GPU-path tests: CLASSES classes, PER_CLASS training images each,
    two val images each."""
    write_image_folder(root / "train", num_classes=CLASSES, per_class=PER_CLASS, seed=0)
    write_image_folder(root / "val", num_classes=CLASSES, per_class=2, seed=1)
    return root
