"""``performance.step_graph``: a method's whole training step (forward, losses, backward, optimizer
step, EMA, online classifier) captured as a CUDA graph, replayed per batch (docs/data-path.md).

After :data:`WARMUP_STEPS` eager steps, ``training_step`` copies the batch into the graph's inputs,
writes the lrs and EMA tau into device tensors, replays, re-logs what the step logged and returns
None; the optimizer step, zero-grad and EMA then do nothing for that batch, while the scheduler and
every hook run as in an eager step. A new batch shape or :data:`EPOCH_KEYS` value captures again.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from solo.methods.deepclusterv2 import DeepClusterV2
from solo.methods.dino import DINO
from solo.methods.swav import SwAV
from solo.methods.wmse import WMSE
from torch import Tensor, nn

from solo_diet.core.errors import ConfigError
from solo_diet.core.momentum import ema_update_
from solo_diet.methods.contract import method_contract
from solo_diet.methods.substitutes import ForeachMomentumUpdater, InstanceSubstitute, StepSubstitute

STEP_GRAPH_KEY = "performance.step_graph"
WARMUP_STEPS = 3  # eager steps before the capture (PyTorch's whole-network recipe warms up 3)
GRAPHED_OPTIMIZERS = ("adamw", "adam", "lars_foreach")  # take a learning rate on the device

UNSUPPORTED: dict[type, str] = {
    DeepClusterV2: "its memory banks are written at rows of the Python batch index",
    WMSE: "it draws its whitening permutations on the host each step",
}
"""solo-learn method -> why its step is not graphed (our methods say so in their contract)."""

EPOCH_KEYS: dict[type, Callable[[nn.Module], tuple]] = {
    DINO: lambda m: (
        m.current_epoch < m.freeze_last_layer,
        float(m.dino_loss_func.teacher_temp_schedule[m.current_epoch]),
    ),
    SwAV: lambda m: (
        m.current_epoch < m.freeze_prototypes_epochs,
        m.current_epoch >= m.epoch_queue_starts,
    ),
}
"""solo-learn method -> what of its step it reads on the host per epoch: a new value captures."""


def method_refusal(model: nn.Module) -> Optional[str]:
    """Why ``model``'s step cannot be graphed (its contract, :data:`UNSUPPORTED`), else None."""
    reason = method_contract(type(model)).step_graph_unsupported
    reason = reason or next((r for cls, r in UNSUPPORTED.items() if isinstance(model, cls)), None)
    if reason is not None:
        return f"method `{type(model).__name__}`: {reason}"
    updater = getattr(model, "momentum_updater", None)
    if updater is not None and not isinstance(updater, ForeachMomentumUpdater):
        return "solo-learn's MomentumUpdater replaces parameter storage (foreach_substitutes=False)"
    return None


def run_refusal(cfg: DictConfig) -> Optional[str]:
    """Why the run that ``cfg`` describes cannot replay graphs (one process on one GPU, bf16 or
    fp32, no accumulation or clipping, an optimizer that takes a device learning rate)."""
    read = lambda key, default=None: OmegaConf.select(cfg, key, default=default)  # noqa: E731
    accelerator = str(read("accelerator", "auto"))
    if accelerator not in ("gpu", "cuda", "auto") or not torch.cuda.is_available():
        return f"no CUDA device (accelerator={accelerator})"
    devices, nodes = read("devices", [0]), read("num_nodes", 1) or 1
    count = len(devices) if isinstance(devices, (list, tuple)) or OmegaConf.is_list(devices) else 1
    if count * nodes > 1:
        return f"{count * nodes} processes (DDP's gradient hooks are not captured)"
    if read("strategy", "auto") != "auto":
        return f"strategy={read('strategy')} wraps the model (strategy=auto trains one GPU bare)"
    if str(read("precision", 32)).startswith("16"):
        return "16-mixed's GradScaler reads its scale back (use bf16-mixed or 32)"
    if (read("accumulate_grad_batches", 1) or 1) > 1 or read("gradient_clip_val"):
        return "accumulate_grad_batches or gradient_clip_val act between the step's parts"
    if read("knn_eval.enabled", False):
        return "knn_eval selects features by a boolean mask (a host sync)"
    return None


def choose_step_graph(cfg: DictConfig, model: nn.Module, setting: str) -> tuple[bool, str]:
    """Whether ``model``'s steps replay under ``setting`` (auto/on/off), and the line saying so."""
    if setting == "off":
        return False, f"solo-diet: training step eager ({STEP_GRAPH_KEY}=off)"
    reason = run_refusal(cfg) or method_refusal(model)
    optimizer = getattr(model, "optimizer", None)
    if reason is None and optimizer not in GRAPHED_OPTIMIZERS:
        reason = f"optimizer `{optimizer}` takes no learning rate on the device"
    if reason is None:
        return True, (
            f"solo-diet: training step replayed as one CUDA graph after {WARMUP_STEPS} eager "
            f"steps ({STEP_GRAPH_KEY}={setting}; off: eager)"
        )
    if setting == "on":
        raise ConfigError(f"`{STEP_GRAPH_KEY}=on` cannot apply: {reason}; set it to auto or off.")
    return False, f"solo-diet: training step eager ({STEP_GRAPH_KEY}=auto: {reason})"


LOGS = ("log", "log_dict")


def _tensors(tree: Any) -> list[Tensor]:
    if isinstance(tree, Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    return []


def _clone(tree: Any) -> Any:
    """``tree`` with its tensors cloned (a batch's static copy, a value logged after a replay)."""
    if isinstance(tree, Tensor):
        return tree.clone()
    if isinstance(tree, dict):
        return {k: _clone(v) for k, v in tree.items()}
    return type(tree)(_clone(t) for t in tree) if isinstance(tree, (list, tuple)) else tree


def _optimizer_step(driver: "StepGraph", closure: Optional[Callable] = None) -> Any:
    """The closure (training step, zero-grad, backward), then the update unless replayed."""
    with torch.enable_grad():
        loss = closure() if closure is not None else None
    if not driver.replayed:
        driver.eager_optimizer_step()
    return loss


def _zero_grad(driver: "StepGraph", *args: Any) -> None:
    if not driver.replayed:
        driver.eager_zero_grad(*args)


def _ema_update(driver: "StepGraph", online: nn.Module, momentum: nn.Module) -> None:
    if not driver.replayed:
        ForeachMomentumUpdater.update(driver.updater, online, momentum)


class StepGraph:
    """The graph driver of one model instance; installs itself on it. ``capture=False``: the step
    runs plainly; ``device_scalars`` (default ``capture``): lr/tau on the device as in the graph."""

    def __init__(
        self, model: nn.Module, capture: bool = True, device_scalars: Optional[bool] = None
    ):
        self.model, self.capture = model, capture
        self.device_scalars = capture if device_scalars is None else device_scalars
        self.eager_step, self.eager_zero_grad = model.training_step, model.optimizer_zero_grad
        self.optimizer, self.graph, self.key, self.steps, self.replayed = None, None, None, 0, False
        self.epoch_key = next((k for c, k in EPOCH_KEYS.items() if isinstance(model, c)), None)
        self.state_names = tuple(getattr(model, "step_graph_state", ()))
        model.training_step = StepSubstitute(_driven_step, model)
        model.optimizer_zero_grad = InstanceSubstitute(_zero_grad, self)
        self.updater = getattr(model, "momentum_updater", None)
        if self.updater is not None:
            self.updater.update = InstanceSubstitute(_ema_update, self)
        model.step_graph = self
        warnings.filterwarnings("ignore", message="`training_step` returned `None`")

    def __getstate__(self) -> dict:  # a copy of the model keeps the driver, not its graph
        dropped = ("graph", "key", "optimizer", "eager_optimizer_step", "logs", "side")
        return {**self.__dict__, **dict.fromkeys(dropped)}

    def adopt(self, optimizer: torch.optim.Optimizer) -> None:
        """The run's optimizer, adopted at the first step: capturable, its step substituted."""
        self.optimizer, self.eager_optimizer_step = optimizer, optimizer.step
        for group in optimizer.param_groups:
            if "capturable" in group and self.device_scalars:
                group["capturable"] = True
                for p in group["params"]:
                    step = optimizer.state.get(p, {}).get("step")
                    if isinstance(step, Tensor):
                        optimizer.state[p]["step"] = step.to(p.device, torch.float32)
        optimizer.step = InstanceSubstitute(_optimizer_step, self)
        optimizer.step._wrapped_by_lr_sched = True  # it calls the scheduler's counting wrapper
        device = next(self.model.parameters()).device
        self.lrs = [torch.zeros((), device=device) for _ in optimizer.param_groups]
        self.tau, self.complement = torch.zeros((), device=device), torch.zeros((), device=device)
        self.side = torch.cuda.Stream(device) if self.capture else None

    def replayed_loss(self) -> Optional[Tensor]:
        """The loss of the last step if it was replayed (a copy), else None."""
        return self.loss.clone() if self.replayed else None

    def step(self, batch: Any, batch_idx: int) -> Any:
        """One batch: eager while warming up, else (captured if new) replayed."""
        model, self.replayed = self.model, False
        if self.optimizer is None:
            self.adopt(model.trainer.optimizers[0])
        self.steps += 1
        if self.steps <= WARMUP_STEPS:
            return self.eager(batch, batch_idx)
        key = tuple((t.shape, t.dtype) for t in _tensors(batch))
        key += self.epoch_key(model) if self.epoch_key is not None else ()
        if key != self.key and not self.record(batch, batch_idx, key):
            return self.eager(batch, batch_idx)
        for to, value in zip(_tensors(self.static), _tensors(batch)):
            to.copy_(value, non_blocking=True)
        for lr, group in zip(self.lrs, self.optimizer.param_groups):
            lr.fill_(group["lr"])
        if self.updater is not None:
            self.tau.fill_(self.updater._tau)
            self.complement.fill_(1.0 - self.updater._tau)
        if self.capture:
            self.graph.replay()
            for name, value in self.saved_state.items():
                setattr(model, name, copy.copy(value))
        else:
            self.body(batch_idx)
        for log, args, kwargs in self.logs:
            log(*[_clone(a) for a in args], **kwargs)
        self.replayed = True
        return None

    def eager(self, batch: Any, batch_idx: int) -> Any:
        """An eager step on the capture's side stream, as PyTorch's recipe warms up."""
        if not self.capture:
            return self.eager_step(batch, batch_idx)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = self.eager_step(batch, batch_idx)
        torch.cuda.current_stream().wait_stream(self.side)
        return out

    def body(self, batch_idx: int) -> None:
        """The whole step on the static inputs (what the graph holds)."""
        model, self.logs = self.model, []
        own = {name: model.__dict__.pop(name) for name in LOGS if name in model.__dict__}
        log, log_dict = model.log, model.log_dict
        model.log = lambda *a, **k: self.logs.append((log, a, k))
        model.log_dict = lambda *a, **k: self.logs.append((log_dict, a, k))
        groups = self.optimizer.param_groups
        floats = [group["lr"] for group in groups]
        buffers = dict(model.named_buffers())
        if not self.capture:  # a captured backward writes the gradients it found unset
            self.optimizer.zero_grad(set_to_none=True)
        try:
            # the forward under Lightning's autocast, its cast cache emptied before and after as
            # eager's autocast enters and exits: a weight cast once per step, as eager casts it
            # (the grads of its uses summed in bf16 before the cast back, not each cast in fp32)
            torch.clear_autocast_cache()
            out = self.eager_step(self.static, batch_idx)
            torch.clear_autocast_cache()
            loss = out["loss"] if isinstance(out, dict) else out
            self.loss = loss.detach()
            with torch.autocast(self.lrs[0].device.type, enabled=False):  # eager's backward
                loss.backward()
                model.on_after_backward()  # Lightning's hook after backward (DINO's, SwAV's)
                if self.device_scalars:
                    for group, lr in zip(groups, self.lrs):
                        group["lr"] = lr
                type(self.optimizer).step(self.optimizer)
                updater = self.updater
                if updater is not None:
                    tau, rest = (
                        (self.tau, self.complement) if self.device_scalars else (updater._tau, None)
                    )
                    for online, momentum in model.momentum_pairs:
                        ema_update_(momentum.parameters(), online.parameters(), tau, rest)
            _keep_buffers(model, buffers)
        finally:
            del model.log, model.log_dict
            model.__dict__.update(own)
            for group, value in zip(groups, floats):
                group["lr"] = value

    def record(self, batch: Any, batch_idx: int, key: tuple) -> bool:
        """Capture the step for ``batch``'s shapes; False (nothing kept) where the capture would
        create optimizer state (a parameter's first gradient): that batch runs eagerly."""
        model, optimizer = self.model, self.optimizer
        self.graph, self.static = None, _clone(batch)
        before = {name: copy.copy(getattr(model, name)) for name in self.state_names}
        states = {id(p): len(s) for p, s in optimizer.state.items()}
        optimizer.zero_grad(set_to_none=True)
        if self.capture:
            # PyTorch's capture recipe: it synchronizes and empties the device and pinned-host
            # caches first, so no event of an earlier step is queried during the capture
            graph, side = torch.cuda.CUDAGraph(), self.side
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                self.body(batch_idx)
            torch.cuda.current_stream().wait_stream(side)
        self.saved_state = {name: copy.copy(getattr(model, name)) for name in self.state_names}
        for name, value in before.items():
            setattr(model, name, value)
        if {id(p): len(s) for p, s in optimizer.state.items()} != states:
            for p in [p for p in optimizer.state if id(p) not in states]:
                del optimizer.state[p]
            optimizer.zero_grad(set_to_none=True)
            self.key = None
            return False
        self.graph, self.key = (graph if self.capture else None), key
        return True


def _keep_buffers(model: nn.Module, before: dict[str, Tensor]) -> None:
    """Copy each buffer the step replaced (DINO's center) back into the one the graph reads."""
    for name, buffer in list(model.named_buffers()):
        old = before.get(name)
        if old is not None and buffer is not old:
            old.copy_(buffer)
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner)._buffers[leaf] = old


def _driven_step(model: nn.Module, batch: Any, batch_idx: int) -> Any:
    return model.step_graph.step(batch, batch_idx)
