"""``OneProcessAwareDDP``: on one process, values logged with ``sync_dist=True`` are not reduced
(no barrier, no all_reduce per step) and end the same, bit for bit, as with Lightning's
``DDPStrategy``; the launchers build it for ``strategy: ddp`` (plain Lightning, CPU, gloo)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.strategies.ddp import DDPStrategy
from omegaconf import OmegaConf

from solo_diet.launch.checkpointing import OneProcessAwareDDP
from solo_diet.launch.common import trainer_kwargs
from tests._helpers.lightning import solo_batches


class LogsSyncedValues(LightningModule):
    """Logs a per-step value and its mean over the epoch with ``sync_dist=True``, as solo-learn."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.tensor([0.5]))

    def training_step(self, batch, batch_idx):
        loss = (self.weight * (batch_idx + 1.3)).pow(2).sum()
        self.log("train_value", loss / 3, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class CollectiveCounter(Callback):
    """Counts ``barrier`` and ``all_reduce`` calls made inside training steps."""

    def __init__(self, monkeypatch) -> None:
        self.inside, self.calls = False, 0
        for name in ("barrier", "all_reduce"):
            original = getattr(dist, name)
            monkeypatch.setattr(dist, name, self._counting(original))

    def _counting(self, original):
        def counted(*args, **kwargs):
            self.calls += self.inside
            return original(*args, **kwargs)

        return counted

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.inside = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.inside = False


def fit(strategy: DDPStrategy, monkeypatch) -> tuple[dict, int]:
    counter = CollectiveCounter(monkeypatch)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        strategy=strategy,
        max_epochs=2,
        callbacks=[counter],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    environ = dict(os.environ)
    try:
        trainer.fit(LogsSyncedValues(), solo_batches(batches=3, size=2))
    finally:
        if dist.is_initialized():  # Lightning leaves the process group up
            dist.destroy_process_group()
        # and its rendezvous variables (MASTER_ADDR, MASTER_PORT, ...) in os.environ, which a later
        # test's DDP subprocesses would inherit and hang on
        os.environ.clear()
        os.environ.update(environ)
    monkeypatch.undo()
    return {k: v.clone() for k, v in trainer.callback_metrics.items()}, counter.calls


def test_one_process_logs_the_same_values_without_a_collective_per_step(monkeypatch):
    ours, our_calls = fit(OneProcessAwareDDP(process_group_backend="gloo"), monkeypatch)
    theirs, their_calls = fit(DDPStrategy(process_group_backend="gloo"), monkeypatch)
    assert our_calls == 0
    assert their_calls >= 2 * 6  # a barrier and an all_reduce per step: what it removes
    assert ours.keys() == theirs.keys() and "train_value_epoch" in ours
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name


@pytest.mark.parametrize("strategy, expected", [("ddp", OneProcessAwareDDP), ("auto", str)])
def test_the_launchers_build_it_for_ddp(strategy, expected):
    cfg = OmegaConf.create({"strategy": strategy, "accelerator": "cpu", "devices": [0]})
    built = trainer_kwargs(cfg, [], None)["strategy"]
    assert type(built) is expected
