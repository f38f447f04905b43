"""Row-wise AdamW / SGDW for the s-DIET head and their zero-gradient closed forms (s-DIET paper,
App. D.2), with its Listing 1's minus sign: Eq. 18 and Eq. 20 print a plus (docs/references.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Union

from torch import Tensor

Steps = Union[float, Tensor]
RowState = tuple[Tensor, ...]  # a row optimiser's state tensors, each shaped like the rows
RowUpdate = tuple[Tensor, RowState]  # the rows and their state after a step
_EQUAL_RATES = 1e-12


def _steps_like(steps: Steps, like: Tensor) -> Steps:
    """``steps`` as a float checked ``>= 0``, or a per-row tensor shaped to ``like``."""
    if not isinstance(steps, Tensor):
        if steps < 0:
            raise ValueError(f"zero-gradient step counts must be >= 0, got {steps}")
        return float(steps)
    steps = steps.to(dtype=like.dtype, device=like.device)
    if steps.dim() == 1 and like.dim() > 1:
        steps = steps.reshape(-1, *([1] * (like.dim() - 1)))
    return steps


def _decay_and_drift(a: float, mu: float, lr: float, steps: Steps) -> tuple[Steps, Steps]:
    """``(a^T, c_T)``, ``c_T = lr*mu*(a^T - mu^T)/(a - mu)`` (``lr * T * mu^T`` for ``a == mu``)."""
    a_t, mu_t = a**steps, mu**steps
    if abs(a - mu) < _EQUAL_RATES:
        return a_t, lr * steps * mu_t
    return a_t, lr * mu * (a_t - mu_t) / (a - mu)


def adamw_zero_grad_steps(
    theta: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    steps: Steps,
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """State after ``steps`` zero-gradient AdamW steps (psi = 1): s-DIET paper, Eq. 18, sign
    corrected: ``theta_T = a^T theta_0 - lr*mu*(a^T - mu^T)/(a - mu) * m_0/(sqrt(v_0) + eps)``,
    ``a = 1 - lr*wd``, ``mu = b1/sqrt(b2)``, ``m_T = b1^T m_0``, ``v_T = b2^T v_0``."""
    beta1, beta2 = betas
    steps = _steps_like(steps, theta)
    a_t, drift = _decay_and_drift(1.0 - lr * weight_decay, beta1 / math.sqrt(beta2), lr, steps)
    direction = exp_avg / (exp_avg_sq.sqrt() + eps)
    return (a_t * theta - drift * direction, beta1**steps * exp_avg, beta2**steps * exp_avg_sq)


def sgdw_zero_grad_steps(
    theta: Tensor,
    momentum_buffer: Tensor,
    steps: Steps,
    *,
    lr: float,
    weight_decay: float,
    momentum: float,
) -> tuple[Tensor, Tensor]:
    """State after ``steps`` zero-gradient SGDW steps: s-DIET paper, Eq. 20, sign corrected:
    ``theta_T = a^T theta_0 - lr*mu*(a^T - mu^T)/(a - mu) * m_0``, ``m_T = mu^T m_0``."""
    steps = _steps_like(steps, theta)
    a_t, drift = _decay_and_drift(1.0 - lr * weight_decay, momentum, lr, steps)
    return a_t * theta - drift * momentum_buffer, momentum**steps * momentum_buffer


def adamw_row_step(
    theta: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    grad: Tensor,
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """One AdamW step, no bias correction (psi = 1): s-DIET paper, App. D.2, Listing 1 l.34-37."""
    beta1, beta2 = betas
    exp_avg = beta1 * exp_avg + (1.0 - beta1) * grad
    exp_avg_sq = beta2 * exp_avg_sq + (1.0 - beta2) * grad * grad
    theta = (1.0 - lr * weight_decay) * theta - lr * exp_avg / (exp_avg_sq.sqrt() + eps)
    return theta, exp_avg, exp_avg_sq


def sgdw_row_step(
    theta: Tensor,
    momentum_buffer: Tensor,
    grad: Tensor,
    *,
    lr: float,
    weight_decay: float,
    momentum: float,
) -> tuple[Tensor, Tensor]:
    """One SGDW step, s-DIET paper, Eq. 19 with its gradient factor tau = 1: ``m <- mu m + g``,
    ``theta <- (1 - lr*wd) theta - lr m`` (decoupled decay, unlike ``torch.optim.SGD``)."""
    momentum_buffer = momentum * momentum_buffer + grad
    return (1.0 - lr * weight_decay) * theta - lr * momentum_buffer, momentum_buffer


class RowOptimizer:
    """A row-wise optimiser: ``step`` and ``zero_grad_steps`` return the new ``(rows, state)``."""

    state_names: tuple[str, ...]
    step_rule: Callable[..., tuple[Tensor, ...]]
    zero_grad_rule: Callable[..., tuple[Tensor, ...]]

    def _apply(
        self, rule: Callable, rows: Tensor, state: RowState, arg: Any, lr: float
    ) -> RowUpdate:
        hyper = {k: getattr(self, k) for k in self.__dataclass_fields__}
        rows, *new_state = rule(rows, *state, arg, lr=lr, **hyper)
        return rows, tuple(new_state)

    def step(self, rows: Tensor, state: RowState, grad: Tensor, lr: float) -> RowUpdate:
        """``(rows, state)`` after one step with ``grad``."""
        return self._apply(self.step_rule, rows, state, grad, lr)

    def zero_grad_steps(self, rows: Tensor, state: RowState, steps: Steps, lr: float) -> RowUpdate:
        """``(rows, state)`` after ``steps`` zero-gradient steps (closed form)."""
        return self._apply(self.zero_grad_rule, rows, state, steps, lr)


@dataclass(frozen=True)
class RowAdamW(RowOptimizer):
    """AdamW (psi = 1) on head rows; state ``(exp_avg, exp_avg_sq)``."""

    weight_decay: float
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    state_names = ("exp_avg", "exp_avg_sq")
    step_rule = staticmethod(adamw_row_step)
    zero_grad_rule = staticmethod(adamw_zero_grad_steps)


@dataclass(frozen=True)
class RowSGDW(RowOptimizer):
    """SGDW (s-DIET paper, Eq. 19) on head rows; state ``(momentum_buffer,)``."""

    weight_decay: float
    momentum: float = 0.9
    state_names = ("momentum_buffer",)
    step_rule = staticmethod(sgdw_row_step)
    zero_grad_rule = staticmethod(sgdw_zero_grad_steps)
