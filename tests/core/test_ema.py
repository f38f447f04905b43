"""``ema_update_``: the momentum encoder's EMA (BYOL paper, Eq. 1) with ``_foreach`` ops, equal
float for float to a per-parameter loop written as solo-learn's ``MomentumUpdater`` reads, and to
solo-learn's own where it is installed."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from solo_diet.core.momentum import ema_update_
from tests._helpers import requires_solo


def networks(dtype: torch.dtype = torch.float32) -> tuple[nn.Module, nn.Module]:
    """An online network (conv, batch norm, linear) and a momentum copy that starts elsewhere."""
    torch.manual_seed(0)

    def build() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 5)
        ).to(dtype)

    online, momentum = build(), build()
    for p in momentum.parameters():
        p.requires_grad = False
    return online, momentum


def taus(steps: int) -> list[float]:
    """solo-learn's cosine schedule from 0.99 to 1.0 (``MomentumUpdater.update_tau``)."""
    return [1.0 - 0.01 * (math.cos(math.pi * k / steps) + 1) / 2 for k in range(steps)]


def perturb(online: nn.Module, step: int) -> None:
    """A stand-in optimizer step on the online network."""
    generator = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for p in online.parameters():
            p.add_(torch.randn(p.shape, generator=generator).to(p.dtype), alpha=0.1)


def loop_reference(online: nn.Module, momentum: nn.Module, tau: float) -> None:
    """One parameter at a time: ``m = tau * m + (1 - tau) * o``."""
    with torch.no_grad():
        for o, m in zip(online.parameters(), momentum.parameters()):
            m.data = tau * m.data + (1 - tau) * o.data


def run(update, steps: int = 50, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    online, momentum = networks(dtype)
    for step, tau in enumerate(taus(steps)):
        perturb(online, step)
        update(online, momentum, tau)
    return [p.clone() for p in momentum.parameters()]


def foreach(online: nn.Module, momentum: nn.Module, tau: float) -> None:
    ema_update_(momentum.parameters(), online.parameters(), tau)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_equals_the_per_parameter_loop_bitwise_over_fifty_steps(dtype):
    ours, reference = run(foreach, dtype=dtype), run(loop_reference, dtype=dtype)
    start = [p.clone() for p in networks(dtype)[1].parameters()]
    for p, q, p0 in zip(ours, reference, start):
        assert p.dtype == dtype and torch.equal(p, q)
        assert not torch.equal(p, p0)  # the momentum network moved


def test_against_float64_arithmetic():
    """The float32 update stays within float32 rounding of the same recursion in float64."""
    ours = run(foreach, steps=20)
    exact = run(loop_reference, steps=20, dtype=torch.float64)
    for p, q in zip(ours, exact):
        assert torch.allclose(p.double(), q, rtol=1e-5, atol=1e-6)


def test_tau_one_keeps_and_tau_zero_copies():
    online, momentum = networks()
    before = [p.clone() for p in momentum.parameters()]
    ema_update_(momentum.parameters(), online.parameters(), 1.0)
    assert all(torch.equal(p, q) for p, q in zip(momentum.parameters(), before))
    ema_update_(momentum.parameters(), online.parameters(), 0.0)
    assert all(torch.equal(p, q) for p, q in zip(momentum.parameters(), online.parameters()))


def test_rejects_tau_outside_zero_one():
    online, momentum = networks()
    with pytest.raises(ValueError, match="tau must be in"):
        ema_update_(momentum.parameters(), online.parameters(), 1.5)


@requires_solo()
def test_equals_solo_learns_momentum_updater_bitwise():
    from solo.utils.momentum import MomentumUpdater

    updater = MomentumUpdater(0.99, 1.0)

    def theirs(online, momentum, tau):
        updater.cur_tau = tau
        updater.update(online, momentum)

    for p, q in zip(run(foreach), run(theirs)):
        assert torch.equal(p, q)


def test_a_tau_on_the_device_with_its_host_complement_is_the_float_update():
    online, momentum = networks()
    _, twin = networks()
    for step, tau in enumerate(taus(5)):
        perturb(online, step)
        ema_update_(momentum.parameters(), online.parameters(), tau)
        ema_update_(
            twin.parameters(), online.parameters(), torch.tensor(tau), torch.tensor(1.0 - tau)
        )
    for p, q in zip(momentum.parameters(), twin.parameters()):
        assert torch.equal(p, q)
