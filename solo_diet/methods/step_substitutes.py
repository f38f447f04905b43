"""Same-math substitutes, per model instance, for the read-backs inside solo-learn's own steps.

- W-MSE: the model's ``whitening`` (solo-learn's ``Whitening2d``, whose Cholesky reads its status
  back) becomes :class:`solo_diet.nn.whitening.CholeskyWhitening`; its step's slice permutation
  (``torch.randperm`` on the host, then GPU features indexed by it: a blocking copy per slice)
  comes from :class:`DeviceRandpermTorch`, the same permutation sent to the device without a wait.
- The queue methods (MoCo V2+, NNBYOL, NNCLR, NNSiam, ReSSL, All4One) read their queue pointer as
  a Python number; the instance gets a bound ``dequeue_and_enqueue`` (``_dequeue_and_enqueue`` for
  MoCo) writing through :func:`solo_diet.queue.enqueue_`, pointer on the device, same contents.
- VICReg's covariance term and Barlow Twins' loss index with a boolean mask. solo-learn's code
  looks these functions up as module globals at call time (``solo.losses.vicreg.covariance_loss``
  from ``vicreg_loss_func``; ``solo.methods.barlow_twins.barlow_loss_func`` from the method), so
  each global is replaced, once per process, by a :class:`LossDispatch` that calls ours while a
  substituted model's training step runs and solo-learn's original otherwise (W-MSE's ``torch``
  global likewise, by a :class:`DeviceRandpermTorch`). The model's
  instance gets a ``training_step`` that sets a context variable around the class's own step: no
  other model, no other job of the same process (compare's workers) and no code outside a
  substituted step sees our version, and a model built with the key off runs solo-learn's.

The instance's substitutes are :class:`InstanceSubstitute` objects (not ``types.MethodType``,
which pickles as a lookup by its function's name): a deep copy or a pickle of the model keeps them,
bound to the copy.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
from typing import Any, Callable, Optional, Union

import torch
from solo.methods.all4one import All4One
from solo.methods.barlow_twins import BarlowTwins
from solo.methods.mocov2plus import MoCoV2Plus
from solo.methods.nnbyol import NNBYOL
from solo.methods.nnclr import NNCLR
from solo.methods.nnsiam import NNSiam
from solo.methods.ressl import ReSSL
from solo.methods.vicreg import VICReg
from solo.methods.wmse import WMSE
from solo.utils.misc import gather
from solo.utils.whitening import Whitening2d
from torch import nn

from solo_diet.losses.decorrelation import barlow_twins_loss, vicreg_covariance_loss
from solo_diet.nn.whitening import CholeskyWhitening
from solo_diet.queue import enqueue_

_SUBSTITUTED_STEP_DEVICE: contextvars.ContextVar[Optional[torch.device]] = contextvars.ContextVar(
    "solo_diet_substituted_step_device", default=None
)
"""The device of the substituted model whose training step runs now; None outside such a step."""

LOSS_SUBSTITUTES: dict[type, tuple[str, str, Callable]] = {
    VICReg: ("solo.losses.vicreg", "covariance_loss", vicreg_covariance_loss),
    BarlowTwins: ("solo.methods.barlow_twins", "barlow_loss_func", barlow_twins_loss),
}
"""solo-learn method -> (module, global its step calls, our same-math function)."""

QUEUE_BUFFERS = ("queue", "queue_y", "queue_index")
"""The queue buffers that ``dequeue_and_enqueue``'s arguments fill, in argument order."""

WHITENING_FIX = "raise method_kwargs.whitening_eps or method_kwargs.whitening_size"
"""How W-MSE's keys fix a whitening slice whose covariance is not positive definite."""


class LossDispatch:
    """Stands in for a solo-learn loss function: ours inside a substituted training step, the
    original everywhere else."""

    def __init__(self, original: Callable, ours: Callable):
        functools.update_wrapper(self, original)
        self.original, self.ours = original, ours

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        chosen = self.ours if _SUBSTITUTED_STEP_DEVICE.get() is not None else self.original
        return chosen(*args, **kwargs)


def install_loss_dispatch(module_name: str, name: str, ours: Callable) -> LossDispatch:
    """Replace ``module_name.name`` by a :class:`LossDispatch` (once; later calls find it)."""
    module = importlib.import_module(module_name)
    current = getattr(module, name)
    if not isinstance(current, LossDispatch):
        current = LossDispatch(current, ours)
        setattr(module, name, current)
    return current


def device_randperm(n: int, device: torch.device) -> torch.Tensor:
    """``torch.randperm(n)`` drawn from the host generator (the same numbers as solo-learn's call),
    on ``device``: for CUDA through pinned memory and an asynchronous copy, so nothing waits."""
    permutation = torch.randperm(n)
    if device.type != "cuda":
        return permutation.to(device)
    return permutation.pin_memory().to(device, non_blocking=True)


class DeviceRandpermTorch:
    """Stands in for the ``torch`` module in one solo-learn module: ``randperm(n)`` inside a
    substituted training step is :func:`device_randperm` on the step's device; every other name,
    and ``randperm`` anywhere else, is torch's own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def randperm(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        device = _SUBSTITUTED_STEP_DEVICE.get()
        if device is None or len(args) != 1 or kwargs:
            return torch.randperm(*args, **kwargs)
        return device_randperm(args[0], device)


def install_randperm_dispatch(module_name: str) -> None:
    """Replace ``module_name.torch`` by a :class:`DeviceRandpermTorch` (once)."""
    module = importlib.import_module(module_name)
    if not isinstance(module.torch, DeviceRandpermTorch):
        module.torch = DeviceRandpermTorch()


class InstanceSubstitute:
    """``function`` bound to the model ``owner``, set as an attribute of that one instance."""

    def __init__(self, function: Callable, owner: nn.Module):
        self.function, self.owner = function, owner

    def __call__(self, *args: Any) -> Any:
        return self.function(self.owner, *args)

    def __repr__(self) -> str:
        return f"<{_qualified(self.function)} of {type(self.owner).__name__}>"


def class_training_step(model: nn.Module, batch: Any, batch_idx: int) -> Any:
    """The training step of ``model``'s class (what the instance runs without substitutes)."""
    return type(model).training_step(model, batch, batch_idx)


class SubstitutedTrainingStep(InstanceSubstitute):
    """The class's training step, with our loss functions chosen by the dispatches (its signature
    is the one Lightning inspects)."""

    def __init__(self, owner: nn.Module):
        super().__init__(class_training_step, owner)

    @property
    def __wrapped__(self) -> Callable:
        """The class's step, for Lightning's ``is_overridden`` (it follows ``__wrapped__``)."""
        return type(self.owner).training_step

    def __call__(self, batch: Any, batch_idx: int) -> Any:
        token = _SUBSTITUTED_STEP_DEVICE.set(self.owner.device)
        try:
            return self.function(self.owner, batch, batch_idx)
        finally:
            _SUBSTITUTED_STEP_DEVICE.reset(token)


@torch.no_grad()
def enqueue_rows(self: nn.Module, *values: torch.Tensor) -> None:
    """``dequeue_and_enqueue`` of NNBYOL, NNCLR, NNSiam, ReSSL and All4One: the gathered
    ``values`` (features, then labels, then dataset indexes) as rows of the queues."""
    writes = [(getattr(self, b), 0, gather(v)) for b, v in zip(QUEUE_BUFFERS, values)]
    enqueue_(self.queue_ptr, self.queue_size, writes)


@torch.no_grad()
def enqueue_keys(self: nn.Module, keys: torch.Tensor) -> None:
    """MoCo V2+'s ``_dequeue_and_enqueue``: ``keys`` (views x B x D) as columns of the
    (views x D x size) queue."""
    enqueue_(self.queue_ptr, self.queue_size, [(self.queue, 2, keys.permute(0, 2, 1))])


QUEUE_SUBSTITUTES: dict[type, tuple[str, Callable]] = {
    MoCoV2Plus: ("_dequeue_and_enqueue", enqueue_keys),
    **{
        cls: ("dequeue_and_enqueue", enqueue_rows)
        for cls in (NNBYOL, NNCLR, NNSiam, ReSSL, All4One)
    },
}
"""solo-learn queue method -> (the method that reads the pointer back, our bound substitute)."""


def _uses_solo_learns(model: nn.Module, cls: type, name: str) -> bool:
    """Whether ``model`` is a ``cls`` and runs ``cls``'s own ``name`` (no subclass override)."""
    return isinstance(model, cls) and getattr(type(model), name) is cls.__dict__[name]


def _substitute_training_step(model: nn.Module) -> None:
    """Run ``model``'s training steps as :class:`SubstitutedTrainingStep` (once)."""
    if "training_step" not in vars(model):
        model.training_step = SubstitutedTrainingStep(model)


def _qualified(obj: Union[Callable, type]) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def substitute_solo_learn_steps(model: nn.Module) -> list[str]:
    """Swap, on one built solo-learn method, the parts of its step that read back from the GPU
    for ours; returns one description per substitute made."""
    made = []
    for cls, (module_name, name, ours) in LOSS_SUBSTITUTES.items():
        if isinstance(model, cls):
            install_loss_dispatch(module_name, name, ours)
            _substitute_training_step(model)
            made.append(f"loss `{module_name}.{name}` -> {_qualified(ours)}")
    for cls, (name, ours) in QUEUE_SUBSTITUTES.items():
        if _uses_solo_learns(model, cls, name):
            setattr(model, name, InstanceSubstitute(ours, model))
            made.append(f"`{_qualified(cls)}.{name}` -> {_qualified(ours)}")
    whitening = getattr(model, "whitening", None)
    if isinstance(model, WMSE) and type(whitening) is Whitening2d:
        model.whitening = CholeskyWhitening(whitening.output_dim, whitening.eps, WHITENING_FIX)
        made.append(f"whitening {_qualified(Whitening2d)} -> {_qualified(CholeskyWhitening)}")
    if isinstance(model, WMSE):
        install_randperm_dispatch(WMSE.__module__)
        _substitute_training_step(model)
        made.append(f"`{WMSE.__module__}.torch.randperm` -> {_qualified(device_randperm)}")
    return made
