"""Same-math substitutes for the parts of solo-learn's step that wait on the GPU (docs/data-path.md)
: ``lars_foreach``, :class:`ForeachMomentumUpdater`, and the steps and queue writes that read back,
set per instance of solo-learn's methods by picklable :class:`InstanceSubstitute` objects."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Optional, Sequence, Union

import torch
from solo.losses.vicreg import invariance_loss, variance_loss
from solo.losses.wmse import wmse_loss_func
from solo.methods import NNBYOL, NNCLR, All4One, BarlowTwins, MoCoV2Plus, NNSiam, ReSSL, VICReg
from solo.methods.wmse import WMSE
from solo.utils.misc import gather
from solo.utils.momentum import MomentumUpdater
from solo.utils.whitening import Whitening2d
from torch import Tensor, nn

from solo_diet.core.data.augment.resample import to_device
from solo_diet.core.losses.decorrelation import barlow_twins_loss, vicreg_covariance_loss
from solo_diet.core.momentum import ema_update_, enqueue_
from solo_diet.core.nn.layers import CholeskyWhitening

SUBSTITUTES_KEY = "performance.foreach_substitutes"


class ForeachMomentumUpdater(MomentumUpdater):
    """solo-learn's ``MomentumUpdater`` by ``_foreach`` ops (``cur_tau``: once used, on device)."""

    def __init__(self, base_tau: float = 0.996, final_tau: float = 1.0):
        self._device: Optional[torch.device] = None
        super().__init__(base_tau, final_tau)

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


QUEUE_BUFFERS = ("queue", "queue_y", "queue_index")  # filled by dequeue_and_enqueue's arguments
# how W-MSE's keys fix a whitening slice whose covariance is not positive definite
WHITENING_FIX = "raise method_kwargs.whitening_eps or method_kwargs.whitening_size"


def device_randperm(n: int, device: torch.device) -> Tensor:
    """``torch.randperm(n)`` from the host generator, on ``device`` without a wait."""
    return to_device(torch.randperm(n), device)


class InstanceSubstitute:
    """``function`` bound to the model ``owner``, set as an attribute of that one instance."""

    def __init__(self, function: Callable, owner: nn.Module):
        self.function, self.owner = function, owner

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(self.owner, *args, **kwargs)


class StepSubstitute(InstanceSubstitute):
    """A substitute ``training_step`` (its signature is the one Lightning inspects)."""

    @property
    def __wrapped__(self) -> Callable:
        """Our step function, for Lightning's ``is_overridden`` (it follows ``__wrapped__``)."""
        return self.function

    def __call__(self, batch: Sequence[Any], batch_idx: int) -> Any:
        return self.function(self.owner, batch, batch_idx)


def vicreg_step(model: VICReg, batch: Sequence[Any], batch_idx: int) -> Tensor:
    """VICReg's step with the mask-free covariance term."""
    out = super(VICReg, model).training_step(batch, batch_idx)
    z1, z2 = out["z"]
    invariance = invariance_loss(z1, z2)
    z1, z2 = gather(z1), gather(z2)  # as solo-learn: the regularisers see every process's rows
    loss = (
        model.sim_loss_weight * invariance
        + model.var_loss_weight * variance_loss(z1, z2)
        + model.cov_loss_weight * vicreg_covariance_loss(z1, z2)
    )
    model.log("train_vicreg_loss", loss, on_epoch=True, sync_dist=True)
    return loss + out["loss"]


def barlow_twins_step(model: BarlowTwins, batch: Sequence[Any], batch_idx: int) -> Tensor:
    """Barlow Twins' step with :func:`~solo_diet.core.losses.decorrelation.barlow_twins_loss`."""
    out = super(BarlowTwins, model).training_step(batch, batch_idx)
    loss = barlow_twins_loss(*out["z"], lamb=model.lamb, scale_loss=model.scale_loss)
    model.log("train_barlow_loss", loss, on_epoch=True, sync_dist=True)
    return loss + out["loss"]


def wmse_step(model: WMSE, batch: Sequence[Any], batch_idx: int) -> Tensor:
    """W-MSE's step as solo-learn runs it, its permutations drawn by :func:`device_randperm`."""
    out = super(WMSE, model).training_step(batch, batch_idx)
    views = torch.stack(out["z"])  # crops x batch x dim
    pairs = list(itertools.combinations(range(model.num_large_crops), 2))
    total = 0
    for _ in range(model.whitening_iters):
        whitened = torch.empty_like(views)
        slices = device_randperm(model.batch_size, views.device).view(-1, model.whitening_size)
        for rows in slices:
            for crop in range(model.num_large_crops):
                whitened[crop, rows] = model.whitening(views[crop, rows]).type_as(whitened)
        for first, second in pairs:
            total = total + wmse_loss_func(whitened[first], whitened[second])
    loss = total / (len(pairs) * model.whitening_iters)
    model.log("train_wmse_loss", loss, on_epoch=True, sync_dist=True)
    return loss + out["loss"]


@torch.no_grad()
def enqueue_rows(self: nn.Module, *values: torch.Tensor) -> None:
    """``dequeue_and_enqueue`` of NNBYOL, NNCLR, NNSiam, ReSSL and All4One."""
    writes = [(getattr(self, b), 0, gather(v)) for b, v in zip(QUEUE_BUFFERS, values)]
    enqueue_(self.queue_ptr, self.queue_size, writes)


@torch.no_grad()
def enqueue_keys(self: nn.Module, keys: torch.Tensor) -> None:
    """MoCo V2+'s ``_dequeue_and_enqueue``: ``keys`` (views x B x D) as columns of the queue."""
    enqueue_(self.queue_ptr, self.queue_size, [(self.queue, 2, keys.permute(0, 2, 1))])


INSTANCE_SUBSTITUTES: dict[tuple[type, str], Callable] = {
    (VICReg, "training_step"): vicreg_step,
    (BarlowTwins, "training_step"): barlow_twins_step,
    (WMSE, "training_step"): wmse_step,
    (MoCoV2Plus, "_dequeue_and_enqueue"): enqueue_keys,
    **{
        (cls, "dequeue_and_enqueue"): enqueue_rows
        for cls in (NNBYOL, NNCLR, NNSiam, ReSSL, All4One)
    },
}
"""(solo-learn method, its method that reads back) -> ours, bound to an instance of it."""


def _qualified(obj: Union[Callable, type]) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def substitute_step_parts(model: nn.Module) -> list[str]:
    """Swap a built method's ``lars``, ``MomentumUpdater`` and read-backs for ours; returns what
    was swapped, a line each. ``solo-diet pretrain`` calls it unless ``SUBSTITUTES_KEY`` is off."""
    made = []
    if getattr(model, "optimizer", None) == "lars":  # "lars_foreach": registered by register()
        model.optimizer = "lars_foreach"
        made.append(f"optimizer `lars` -> {_qualified(type(model)._OPTIMIZERS['lars_foreach'])}")
    updater = getattr(model, "momentum_updater", None)
    if type(updater) is MomentumUpdater:
        model.momentum_updater = ForeachMomentumUpdater(updater.base_tau, updater.final_tau)
        model.momentum_updater.cur_tau = updater.cur_tau  # the updater's state: its taus
        foreach = _qualified(ForeachMomentumUpdater)
        made.append(f"momentum updater {_qualified(MomentumUpdater)} -> {foreach}")
    for (cls, name), ours in INSTANCE_SUBSTITUTES.items():  # where `cls`'s own `name` runs
        if isinstance(model, cls) and getattr(type(model), name) is cls.__dict__[name]:
            bound = StepSubstitute if name == "training_step" else InstanceSubstitute
            setattr(model, name, bound(ours, model))
            made.append(f"`{_qualified(cls)}.{name}` -> {_qualified(ours)}")
    whitening = getattr(model, "whitening", None)
    if isinstance(model, WMSE) and type(whitening) is Whitening2d:
        model.whitening = CholeskyWhitening(whitening.output_dim, whitening.eps, WHITENING_FIX)
        made.append(f"whitening {_qualified(Whitening2d)} -> {_qualified(CholeskyWhitening)}")
    return made


def substitutes_line(made: list[str]) -> str:
    """The run's one log line naming the substitutes, or "" when none was made."""
    if not made:
        return ""
    return (
        f"solo-diet: same-math substitutes (no host sync per step): {'; '.join(made)} "
        f"(`{SUBSTITUTES_KEY}=False` keeps solo-learn's)"
    )
