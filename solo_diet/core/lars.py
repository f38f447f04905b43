"""LARS (You et al., 2017, Eq. 6) as solo-learn's (``optimizer.name: lars_foreach``): its
per-parameter decisions taken on the device and applied by ``_foreach`` ops, no host syncs."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch
from torch import Tensor


class ForeachLARS(torch.optim.Optimizer):
    """solo-learn's LARS, the same update without per-parameter host syncs."""

    def __init__(
        self,
        params: Iterable,
        lr: float,
        momentum: float = 0.9,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        eta: float = 1e-3,
        eps: float = 1e-8,
        clip_lr: bool = False,
        exclude_bias_n_norm: bool = False,
    ) -> None:
        for name, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if value < 0:
                raise ValueError(f"LARS: `{name}` must be >= 0, got {value}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("LARS: Nesterov momentum needs momentum > 0 and dampening 0")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            eta=eta,
            eps=eps,
            clip_lr=clip_lr,
            exclude_bias_n_norm=exclude_bias_n_norm,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params)
        return loss

    def _directions(self, group: dict, params: list[Tensor]) -> list[Tensor]:
        """``d`` of every parameter (module docstring)."""
        wd, eta, eps = group["weight_decay"], group["eta"], group["eps"]
        exclude = group["exclude_bias_n_norm"]
        scaled = [i for i, p in enumerate(params) if p.ndim != 1 or not exclude]
        directions = [p.grad for p in params]
        if not scaled:
            return directions
        weights = [params[i] for i in scaled]
        grads = [directions[i] for i in scaled]
        p_norms = torch.stack(torch._foreach_norm(weights))
        g_norms = torch.stack(torch._foreach_norm(grads))
        trust = p_norms / (g_norms + p_norms * wd + eps) * eta
        if group["clip_lr"]:
            lr = group["lr"]  # on the device: times its reciprocal, as CUDA divides by a float
            ratio = trust * lr.reciprocal() if isinstance(lr, Tensor) else trust / lr
            trust = torch.clamp(ratio, max=1.0)
        active = (p_norms != 0) & (g_norms != 0)
        scale = torch.where(active, trust, torch.ones_like(trust)).unbind(0)
        decay = (active.to(trust.dtype) * wd).unbind(0)
        decayed = torch._foreach_add(grads, torch._foreach_mul(weights, decay))
        for i, direction in zip(scaled, torch._foreach_mul(decayed, scale)):
            directions[i] = direction
        return directions

    def _update_group(self, group: dict, params: list[Tensor]) -> None:
        directions = self._directions(group, params)
        momentum = group["momentum"]
        if momentum != 0:
            buffers, running, running_d = [], [], []
            for p, d in zip(params, directions):
                buffer = self.state[p].get("momentum_buffer")
                if buffer is None:  # the first step: buf = d
                    buffer = self.state[p]["momentum_buffer"] = d.clone()
                else:
                    running.append(buffer)
                    running_d.append(d)
                buffers.append(buffer)
            if running:
                torch._foreach_mul_(running, momentum)
                torch._foreach_add_(running, running_d, alpha=1 - group["dampening"])
            if group["nesterov"]:
                directions = torch._foreach_add(directions, buffers, alpha=momentum)
            else:
                directions = buffers
        lr = group["lr"]
        if isinstance(lr, Tensor):  # a learning rate on the device (a replayed CUDA graph's)
            torch._foreach_add_(params, torch._foreach_mul(directions, -lr))
        else:
            torch._foreach_add_(params, directions, alpha=-lr)
