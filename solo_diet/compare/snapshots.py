"""The pretraining callback behind the learning curves (:mod:`~solo_diet.compare.curves`): the
backbone's weights after chosen epochs, each a small checkpoint that the offline probe and kNN
load like any pretraining checkpoint (``state_dict`` with the ``backbone.*`` tensors only, and the
run's ``args.json`` beside it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from lightning.pytorch import Callback, LightningModule, Trainer
from omegaconf import OmegaConf

from solo_diet._atomic import atomic_write, write_text_atomic
from solo_diet.compare.curves import SNAPSHOT_DIR, drop_points_after, snapshot_path


class BackboneSnapshots(Callback):
    """Saves the backbone after each of ``epochs`` (epochs trained, counted from 1) as
    ``<run_dir>/curves/epoch_<E>.ckpt``; when training starts (resumed or started over) it drops
    the snapshots and curve points after the epochs already trained. Rank 0 only: no collective
    call, so DDP ranks never wait on it."""

    def __init__(self, run_dir: str | Path, epochs: Sequence[int]):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.epochs = frozenset(int(e) for e in epochs)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.is_global_zero:  # current_epoch: the epochs already trained
            drop_points_after(self.run_dir, trainer.current_epoch)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        trained = trainer.current_epoch + 1
        if not trainer.is_global_zero or trained not in self.epochs:
            return
        folder = self.run_dir / SNAPSHOT_DIR
        folder.mkdir(parents=True, exist_ok=True)
        args = OmegaConf.to_container(pl_module.cfg)
        write_text_atomic(folder / "args.json", json.dumps(args, default=str))
        weights = {
            f"backbone.{name}": tensor.detach().cpu().contiguous()
            for name, tensor in pl_module.backbone.state_dict().items()
        }
        with atomic_write(snapshot_path(self.run_dir, trained), binary=True) as handle:
            torch.save({"state_dict": weights, "epoch": trainer.current_epoch}, handle)
