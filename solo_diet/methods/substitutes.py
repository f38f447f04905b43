"""Same-math substitutes for the parts of solo-learn's training step that wait on the GPU.

solo-learn's ``LARS`` asks ``p_norm != 0 and g_norm != 0`` in Python for every parameter, and its
``MomentumUpdater`` walks the momentum network parameter by parameter; ``BaseMomentumMethod`` logs
``tau`` as a Python float, which Lightning copies host -> device (a stream wait) every step. Our
launchers swap them, for every method alike (baselines included), for:

- ``solo_diet.lars.ForeachLARS``: solo-learn's LARS update with the decisions taken on the device;
- :class:`ForeachMomentumUpdater`: solo-learn's EMA (``solo_diet.ema.ema_update_``, the same floats)
  with the same tau schedule, whose ``cur_tau`` reads as a device scalar once it knows the device.

The config keeps solo-learn's names (``optimizer.name: lars``, so ``args.json`` and compare's
fingerprints are unchanged); the run's log names each substitute in one line.

The read-backs inside solo-learn's own method steps (VICReg's and Barlow Twins' boolean masks,
W-MSE's Cholesky status, the queue methods' pointer) get same-math substitutes per model instance
from ``solo_diet.methods.step_substitutes``, under the same key and in the same line.
``performance.foreach_substitutes: False`` keeps solo-learn's own classes.
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
"""True (default): swap solo-learn's ``LARS`` and ``MomentumUpdater`` for their same-math foreach
versions, and the read-backs of its VICReg, Barlow Twins, W-MSE and queue steps for same-math
ones (no host sync in a step); False: solo-learn's own."""

SUBSTITUTED_OPTIMIZERS = {"lars": "lars_foreach"}
"""solo-learn optimizer name -> the name (registered by ``solo_diet.register``) that replaces it."""


class ForeachMomentumUpdater(MomentumUpdater):
    """solo-learn's ``MomentumUpdater`` (same tau schedule, same EMA floats) updating the whole
    momentum network with ``_foreach`` ops.

    ``cur_tau`` is stored as a Python float; once an update has seen the momentum network's device,
    reading it gives that float as a 0-dim tensor on that device, made by a fill kernel, so that
    ``BaseMomentumMethod``'s ``self.log("tau", cur_tau)`` copies nothing host -> device."""

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
    for a :class:`ForeachMomentumUpdater` and the read-backs of solo-learn's own step
    (``substitute_solo_learn_steps``) when ``performance.foreach_substitutes`` is on; returns one
    description per substitute made (none when off or nothing applies)."""
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
