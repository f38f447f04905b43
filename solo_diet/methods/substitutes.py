"""Same-math substitutes for the parts of solo-learn's training step that wait on the GPU, for
every method alike (docs/data-path.md): ``solo_diet.lars.ForeachLARS`` for its ``LARS`` (decisions
on the device), :class:`ForeachMomentumUpdater` for its ``MomentumUpdater`` (``_foreach`` EMA,
``tau`` logged as a device scalar) and, per model instance, ``solo_diet.methods.step_substitutes``
for the read-backs inside its method steps. The config keeps solo-learn's names; the run's log names
each substitute in one line; ``performance.foreach_substitutes: False`` keeps solo-learn's own.
"""

from __future__ import annotations

from typing import Union

import torch
from omegaconf import DictConfig
from solo.utils.momentum import MomentumUpdater
from torch import Tensor, nn

from solo_diet.config import KeyReader
from solo_diet.ema import ema_update_
from solo_diet.methods.step_substitutes import substitute_solo_learn_steps

SUBSTITUTES_KEY = "performance.foreach_substitutes"

SUBSTITUTED_OPTIMIZERS = {"lars": "lars_foreach"}
"""solo-learn optimizer name -> the name (registered by ``solo_diet.register``) that replaces it."""


class ForeachMomentumUpdater(MomentumUpdater):
    """solo-learn's ``MomentumUpdater`` (same tau schedule, same EMA floats) with ``_foreach``
    ops; once an update has seen the device, ``cur_tau`` reads as a 0-dim tensor there, so
    ``self.log("tau", cur_tau)`` copies nothing host -> device.
    """

    def __init__(self, base_tau: float = 0.996, final_tau: float = 1.0):
        self._device: Union[torch.device, None] = None
        super().__init__(base_tau, final_tau)

    @classmethod
    def like(cls, updater: MomentumUpdater) -> "ForeachMomentumUpdater":
        """A foreach updater in the state of ``updater`` (its taus)."""
        substitute = cls(updater.base_tau, updater.final_tau)
        substitute.cur_tau = float(updater.cur_tau)
        return substitute

    @property
    def cur_tau(self) -> Union[float, Tensor]:
        if self._device is None:
            return self._tau
        return torch.full((), self._tau, device=self._device)

    @cur_tau.setter
    def cur_tau(self, value: float) -> None:
        self._tau = float(value)

    @torch.no_grad()
    def update(self, online_net: nn.Module, momentum_net: nn.Module) -> None:
        """``momentum <- tau * momentum + (1 - tau) * online`` over the paired parameters."""
        momentum = list(momentum_net.parameters())
        if momentum:
            self._device = momentum[0].device
        ema_update_(momentum, online_net.parameters(), self._tau)


def substitutes_on(cfg: DictConfig) -> bool:
    """``performance.foreach_substitutes`` (default True), True or False."""
    return KeyReader(cfg).bool(SUBSTITUTES_KEY, default=True)


def substitute_step_parts(cfg: DictConfig, model: nn.Module) -> list[str]:
    """Swap, on a built solo-learn method, ``lars`` for ``lars_foreach``, a ``MomentumUpdater``
    for a :class:`ForeachMomentumUpdater` and the read-backs of its own step, when
    ``performance.foreach_substitutes`` is on; returns one description per substitute made.
    """
    if not substitutes_on(cfg):
        return []
    made = []
    name = getattr(model, "optimizer", None)
    if isinstance(name, str) and name in SUBSTITUTED_OPTIMIZERS:
        replacement = SUBSTITUTED_OPTIMIZERS[name]
        chosen = type(model)._OPTIMIZERS[replacement]
        model.optimizer = replacement
        made.append(f"optimizer `{name}` -> {chosen.__module__}.{chosen.__qualname__}")
    updater = getattr(model, "momentum_updater", None)
    if type(updater) is MomentumUpdater:
        model.momentum_updater = ForeachMomentumUpdater.like(updater)
        made.append(
            f"momentum updater {MomentumUpdater.__module__}.MomentumUpdater -> "
            f"{ForeachMomentumUpdater.__module__}.ForeachMomentumUpdater"
        )
    return made + substitute_solo_learn_steps(model)


def substitutes_line(made: list[str]) -> str:
    """The run's one log line naming the substitutes, or "" when none was made."""
    if not made:
        return ""
    return (
        f"solo-diet: same-math substitutes (no host sync per step): {'; '.join(made)} "
        f"(`{SUBSTITUTES_KEY}=False` keeps solo-learn's)"
    )
