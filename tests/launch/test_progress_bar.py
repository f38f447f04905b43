"""``TimedProgressBar``: Lightning's bar redrawn by the clock and at each loop's last batch, not
after every step; the launchers use it unless the bar is turned off (plain Lightning on a CPU)."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Trainer
from omegaconf import OmegaConf

from solo_diet.launch.callbacks import TimedProgressBar
from solo_diet.launch.common import logger_and_callbacks
from tests._helpers.lightning import KnownLosses, solo_batches


class CountingBar(TimedProgressBar):
    """Counts the batches after which the training bar was redrawn."""

    def __init__(self, interval: float):
        super().__init__()
        self.interval = interval
        self.drawn_after: list[int] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._should_update(batch_idx + 1, self.train_progress_bar.total):
            self.drawn_after.append(batch_idx)
            self._last_drawn = -float("inf")  # let the parent's check draw it too
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


def fit_with(bar: TimedProgressBar) -> None:
    trainer = Trainer(
        max_epochs=2,
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(KnownLosses(), solo_batches(batches=2, size=3))


def test_an_hour_long_interval_draws_the_first_and_each_epochs_last_batch():
    bar = CountingBar(interval=3600.0)
    fit_with(bar)
    assert bar.drawn_after == [0, 1, 1]  # the first ever, then the last batch of each epoch


def test_a_tiny_interval_draws_after_every_batch_as_lightnings_bar():
    bar = CountingBar(interval=1e-9)
    fit_with(bar)
    assert bar.drawn_after == [0, 1, 0, 1]


@pytest.mark.parametrize("enabled, bars", [(None, 1), (True, 1), (False, 0)])
def test_the_launchers_use_it_unless_the_bar_is_off(enabled, bars, tmp_path):
    cfg = OmegaConf.create({"checkpoint": {"enabled": False}, "wandb": {"enabled": False}})
    if enabled is not None:
        cfg.enable_progress_bar = enabled
    _, callbacks, _ = logger_and_callbacks(cfg, torch.nn.Linear(1, 1), str(tmp_path), None)
    assert sum(isinstance(c, TimedProgressBar) for c in callbacks) == bars
