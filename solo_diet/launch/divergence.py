""":class:`DivergenceGuard` stops a fit whose loss or weights turn NaN or infinite."""

from __future__ import annotations

import itertools
from typing import Any, Iterable

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from solo_diet.core.errors import ConfigError


class Diverged(ConfigError):
    """The loss or the weights of a fit became NaN or infinite."""


def non_finite_tensors(named: Iterable[tuple[str, torch.Tensor]]) -> list[str]:
    """The names of the tensors of ``named`` holding a NaN or an infinity (one read-back)."""
    named = [(name, t) for name, t in named if t.is_floating_point()]
    if not named:
        return []
    device = named[0][1].device
    finite = torch.stack([torch.isfinite(t).all().to(device) for _, t in named]).tolist()
    return [name for (name, _), ok in zip(named, finite) if not ok]


class DivergenceGuard(Callback):
    """Stops a fit whose weights turn NaN or infinite, in one line; no host sync per step."""

    def __init__(self):
        super().__init__()
        self._finite = self._steps_finite = None  # on the loss's device
        self._first_step = self._steps = 0

    def on_train_batch_start(self, trainer: Trainer, *_: Any) -> None:
        if self._steps == 0:
            self._first_step = trainer.global_step

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            finite = torch.isfinite(loss.detach()).all()
            self._finite = finite if self._steps == 0 else self._finite & finite
            self._steps_finite = (0 if self._steps == 0 else self._steps_finite) + self._finite
            self._steps += 1
        if (batch_idx + 1) % max(1, trainer.log_every_n_steps) == 0:
            self._check(trainer, pl_module, weights=False)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._check(trainer, pl_module)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        loss = trainer.callback_metrics.get("val_loss")  # finite weights can overflow the outputs
        finite = not isinstance(loss, torch.Tensor) or bool(torch.isfinite(loss).all())
        if not (trainer.sanity_checking or finite):
            what = f"the validation loss became NaN or infinite by step {trainer.global_step}"
            _fail(trainer, what)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._check(trainer, pl_module)

    def _check(self, trainer: Trainer, pl_module: LightningModule, weights: bool = True) -> None:
        """A NaN loss alone is not divergence: solo-learn's DeepClusterV2 ignores every target in
        its first epoch (a mean over none); the weights are read when the loss was not finite."""
        finite_steps, steps = (int(self._steps_finite), self._steps) if self._steps else (0, 0)
        self._steps = 0
        loss_bad = not trainer.strategy.reduce_boolean_decision(finite_steps == steps, all=True)
        # the parameters and buffers (not the ``state_dict``, whose hooks may gather more)
        named = itertools.chain(pl_module.named_parameters(), pl_module.named_buffers())
        bad = non_finite_tensors(named) if (weights or loss_bad) else []
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            first = self._first_step + finite_steps
            where = f"at step {first}" if loss_bad else f"by step {trainer.global_step}"
            _fail(trainer, f"the weights `{bad[0]}`{more} became NaN or infinite {where}")


def _fail(trainer: Trainer, what: str) -> None:
    raise Diverged(
        f"the training diverged: {what} of epoch {trainer.current_epoch}; the likely cause is too "
        "large a learning rate: lower `optimizer.lr`. No checkpoint holds these weights."
    )
