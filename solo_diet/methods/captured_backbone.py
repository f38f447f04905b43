"""The backbone's forward and backward replayed as CUDA graphs (``performance.capture_backbone``).

A step of a small backbone at 32 px is mostly host time: the GPU waits for Python to launch a few
hundred kernels. The backbone's forward and backward are the part of a step that no schedule
touches (the learning rate, BYOL's tau, DINO's teacher temperature and SwAV's prototype freezing
all live outside it), so they can be captured once with ``torch.cuda.make_graphed_callables`` and
replayed, while the loss, the heads and the optimizer step stay eager and keep reading their
schedules every step.

- **Where:** the model's ``backbone`` gets an instance ``forward`` (:class:`CapturedForward`); its
  parameters, buffers and state-dict keys are unchanged, so checkpoints load with the key on or off.
- **When:** a call with one CUDA tensor, gradients enabled and the backbone in training mode. Each
  such call of a step takes a free graph of its input's shape, stride and autocast state (captured
  on first use, at most :data:`MAX_GRAPHS`); a graph is busy from its forward until its output's
  gradient arrives, so two views of one step never share one. Every other call (validation, no
  grad, a new shape, a partial last batch) runs the backbone's own forward eagerly.
- **Same math:** a replay runs the kernels the eager forward and backward would run. The capture's
  warm-up passes update BatchNorm's running statistics, so they are restored after it; autocast's
  weight cache is off while capturing (graphs cannot keep it). A backbone that draws random numbers
  in training (dropout, drop-path) is refused: its draws under a graph would differ from eager ones.
- One process, one device, one backward per optimizer step: the key refuses CPU runs, more than
  one device or node, and gradient accumulation (the parameters' gradients may be the graph's own
  buffers until the optimizer's ``zero_grad(set_to_none=True)``, solo-learn's).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten

from solo_diet.config import ConfigError, check_bool, fill_default, world_size

CAPTURE_KEY = "performance.capture_backbone"
"""False (default): the backbone runs eagerly. True: its forward and backward are captured as CUDA
graphs and replayed (one CUDA device, no dropout or drop-path in the backbone)."""

MAX_GRAPHS = 4
"""Backbone calls of one step that get a graph of their own (one per view); more run eagerly."""


def fill_and_check_capture(cfg: DictConfig) -> bool:
    """Fill ``performance.capture_backbone`` (default False), check it is a bool and, when on, that
    the run trains on one CUDA device."""
    fill_default(cfg, CAPTURE_KEY, False)
    if not check_bool(cfg, CAPTURE_KEY):
        return False
    accelerator = str(OmegaConf.select(cfg, "accelerator", default="auto")).lower()
    cuda = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if not cuda:
        raise ConfigError(
            f"`{CAPTURE_KEY}: True` needs a CUDA device, got `accelerator: {accelerator}`: set "
            f"accelerator=gpu, or {CAPTURE_KEY}=False."
        )
    if world_size(cfg) != 1:
        devices = OmegaConf.select(cfg, "devices", default=1)
        nodes = OmegaConf.select(cfg, "num_nodes", default=1)
        raise ConfigError(
            f"`{CAPTURE_KEY}: True` runs on one device of one node, got devices={devices} and "
            f"num_nodes={nodes}: train on one GPU, or set {CAPTURE_KEY}=False."
        )
    accumulate = OmegaConf.select(cfg, "accumulate_grad_batches", default=1)
    if accumulate not in (None, 1):
        raise ConfigError(
            f"`{CAPTURE_KEY}: True` needs one backward per optimizer step (a replayed backward "
            f"writes its gradients into the graph's own buffers), got accumulate_grad_batches="
            f"{accumulate}: raise optimizer.batch_size instead, or set {CAPTURE_KEY}=False."
        )
    return True


def random_modules(backbone: nn.Module) -> list[str]:
    """The backbone's submodules that draw random numbers in training: dropout with ``p > 0`` and
    drop-path (timm's ``drop_prob``) above 0."""
    found = []
    for name, module in backbone.named_modules():
        rate = getattr(module, "drop_prob", None)
        if isinstance(module, nn.modules.dropout._DropoutNd):
            rate = module.p
        if isinstance(rate, (int, float)) and rate > 0:
            found.append(f"{name or type(module).__name__} ({type(module).__name__}, {rate})")
    return found


def capture_backbone(cfg: DictConfig, model: nn.Module) -> list[str]:
    """Give ``model.backbone`` a :class:`CapturedForward` when ``performance.capture_backbone`` is
    on; returns one description for the run's log line (none when off)."""
    if not fill_and_check_capture(cfg):
        return []
    backbone = model.backbone
    drawing = random_modules(backbone)
    if drawing:
        raise ConfigError(
            f"`{CAPTURE_KEY}: True`: the backbone draws random numbers in training "
            f"({', '.join(drawing)}), which a replayed graph would draw differently from an eager "
            f"step: set those rates to 0, or {CAPTURE_KEY}=False."
        )
    backbone.forward = CapturedForward(backbone)
    return [
        f"backbone {type(backbone).__name__}: forward and backward replayed as CUDA graphs "
        f"(`{CAPTURE_KEY}=False` runs it eagerly)"
    ]


class _ClassForward(nn.Module):
    """The backbone's own (class) forward, as the module ``make_graphed_callables`` captures: its
    parameters are the backbone's, and it does not go through the instance ``forward``."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone

    def forward(self, x: Tensor) -> Any:
        return type(self.backbone).forward(self.backbone, x)


def _autocast_state() -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")


class BackboneGraph:
    """One captured forward and backward of the backbone for inputs like ``sample``."""

    def __init__(self, backbone: nn.Module, sample: Tensor):
        self.shape, self.dtype, self.stride = sample.shape, sample.dtype, sample.stride()
        self.device, self.autocast = sample.device, _autocast_state()
        self.busy, self.replays = False, 0
        saved = [buffer.clone() for buffer in backbone.buffers()]
        enabled, dtype = self.autocast
        # the graph's static input is a clone: its own buffer, not the first batch's memory
        with torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=False):
            self.replay: Callable = torch.cuda.make_graphed_callables(
                _ClassForward(backbone), (sample.detach().clone(),), allow_unused_input=True
            )
        with torch.no_grad():  # the warm-up passes moved BatchNorm's running statistics
            for buffer, value in zip(backbone.buffers(), saved):
                buffer.copy_(value)

    def takes(self, x: Tensor) -> bool:
        """Free, and ``x`` is an input this graph was captured for."""
        return (
            not self.busy
            and x.shape == self.shape
            and x.dtype == self.dtype
            and x.stride() == self.stride
            and x.device == self.device
            and _autocast_state() == self.autocast
        )

    def __call__(self, x: Tensor) -> Any:
        out = self.replay(x)
        self.replays += 1
        tensors = [t for t in tree_flatten(out)[0] if isinstance(t, Tensor) and t.requires_grad]
        if tensors:  # busy until the backward reaches this replay's outputs
            self.busy = True
            for tensor in tensors:
                tensor.register_hook(self._release)
        return out

    def _release(self, grad: Tensor) -> None:
        self.busy = False


class CapturedForward:
    """The backbone's instance ``forward``: graph replays for training calls (module docstring),
    the class's forward for everything else. A copy or a pickle starts with no graphs, bound to
    the copied backbone."""

    def __init__(self, owner: nn.Module):
        self.owner = owner
        self.graphs: list[BackboneGraph] = []

    def eager(self, *args: Any, **kwargs: Any) -> Any:
        return type(self.owner).forward(self.owner, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        x = args[0] if len(args) == 1 and not kwargs else None
        if not self._replayable(x):
            return self.eager(*args, **kwargs)
        graph = next((graph for graph in self.graphs if graph.takes(x)), None)
        if graph is None and len(self.graphs) < MAX_GRAPHS:
            graph = BackboneGraph(self.owner, x)
            self.graphs.append(graph)
        return graph(x) if graph is not None else self.eager(x)

    def _replayable(self, x: Optional[Tensor]) -> bool:
        return (
            isinstance(x, Tensor)
            and x.is_cuda
            and not x.requires_grad
            and torch.is_grad_enabled()
            and self.owner.training
            and not torch.cuda.is_current_stream_capturing()
        )

    def __getstate__(self) -> dict:
        return {"owner": self.owner, "graphs": []}

    def __deepcopy__(self, memo: dict) -> "CapturedForward":
        return CapturedForward(copy.deepcopy(self.owner, memo))

    def __repr__(self) -> str:
        return f"<captured forward of {type(self.owner).__name__}: {len(self.graphs)} graphs>"
