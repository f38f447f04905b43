"""ForeachLARS: the LARS update (trust ratio, weight decay, momentum, Nesterov, clipping, excluded
biases and norms, zero norms) against a float64 reference written parameter by parameter, and
against solo-learn's own ``LARS`` where solo-learn is installed."""

from __future__ import annotations

import math

import pytest
import torch

from solo_diet.core.lars import ForeachLARS
from tests._helpers import requires_solo

GROUPS = (
    {"weight_decay": 1e-4},
    {"weight_decay": 5e-4, "exclude_bias_n_norm": True, "lr": 0.3},
    {"weight_decay": 0.0, "clip_lr": True},
    {"weight_decay": 1e-3, "nesterov": True, "eta": 0.02},
    {"weight_decay": 1e-4, "momentum": 0.0, "clip_lr": True, "eps": 1e-6},
    {"weight_decay": 2e-4, "dampening": 0.1},
)
LRS = (0.0, 0.5, 1.2, 0.8, 0.05, 0.3)  # a warm-up from 0, then a schedule


def make_groups(dtype: torch.dtype) -> list[dict]:
    """Per group a matrix, a conv kernel, a bias and an all-zero vector (|p| = 0); one matrix of
    the last group never gets a gradient."""
    generator = torch.Generator().manual_seed(0)
    groups = []
    for options in GROUPS:
        shapes = [(6, 5), (4, 3, 3, 3), (7,)]
        params = [torch.randn(*s, generator=generator, dtype=dtype) for s in shapes]
        params.append(torch.zeros(5, dtype=dtype))
        groups.append({"params": params, **options})
    groups[-1]["params"].append(torch.randn(3, 3, generator=generator, dtype=dtype))
    return groups


def set_gradients(groups: list[dict], step: int) -> None:
    """Fresh gradients; the first matrix of group 0 gets a zero gradient (|g| = 0) on step 2."""
    generator = torch.Generator().manual_seed(100 + step)
    for g_index, group in enumerate(groups):
        for p_index, p in enumerate(group["params"]):
            if g_index == len(groups) - 1 and p_index == len(group["params"]) - 1:
                p.grad = None
                continue
            p.grad = torch.randn(p.shape, generator=generator, dtype=p.dtype)
            if (g_index, p_index, step) == (0, 0, 2):
                p.grad.zero_()


def reference_step(groups: list[dict], buffers: dict, defaults: dict) -> None:
    """LARS as the update rule reads, one parameter at a time in float64 Python arithmetic."""
    for group in groups:
        opts = {**defaults, **group}
        for p in group["params"]:
            if p.grad is None:
                continue
            g = p.grad.clone()
            excluded = p.ndim == 1 and opts["exclude_bias_n_norm"]
            p_norm, g_norm = p.norm().item(), g.norm().item()
            if not excluded and p_norm != 0 and g_norm != 0:
                wd = opts["weight_decay"]
                trust = p_norm / (g_norm + p_norm * wd + opts["eps"]) * opts["eta"]
                if opts["clip_lr"]:
                    trust = min(trust / opts["lr"], 1.0) if opts["lr"] > 0 else 1.0
                g = (g + wd * p) * trust
            if opts["momentum"] != 0:
                key = id(p)
                if key not in buffers:
                    buffers[key] = g.clone()
                else:
                    buffers[key] = opts["momentum"] * buffers[key] + (1 - opts["dampening"]) * g
                g = g + opts["momentum"] * buffers[key] if opts["nesterov"] else buffers[key]
            p.sub_(opts["lr"] * g)


DEFAULTS = dict(
    lr=0.0,
    momentum=0.9,
    dampening=0.0,
    weight_decay=0.0,
    nesterov=False,
    eta=1e-3,
    eps=1e-8,
    clip_lr=False,
    exclude_bias_n_norm=False,
)


def run(optimizer_class, dtype: torch.dtype) -> list[torch.Tensor]:
    groups = make_groups(dtype)
    optimizer = optimizer_class([dict(g) for g in groups], lr=1.0, momentum=0.9)
    for step, lr in enumerate(LRS):
        for group, options in zip(optimizer.param_groups, GROUPS):
            group["lr"] = options.get("lr", 1.0) * lr
        set_gradients(groups, step)
        optimizer.step()
    return [p.detach().clone() for g in groups for p in g["params"]]


def run_reference(dtype: torch.dtype) -> list[torch.Tensor]:
    groups, buffers = make_groups(dtype), {}
    for step, lr in enumerate(LRS):
        for group, options in zip(groups, GROUPS):
            group["lr"] = options.get("lr", 1.0) * lr
        set_gradients(groups, step)
        with torch.no_grad():
            reference_step(groups, buffers, DEFAULTS)
    return [p.detach().clone() for g in groups for p in g["params"]]


def test_matches_the_float64_reference_over_six_steps():
    ours, reference = run(ForeachLARS, torch.float64), run_reference(torch.float64)
    start = make_groups(torch.float64)
    for p, q, p0 in zip(ours, reference, (p for g in start for p in g["params"])):
        assert torch.allclose(p, q, rtol=0, atol=1e-13), (p - q).abs().max()
    moved = [not torch.equal(p, p0) for p, p0 in zip(ours, (p for g in start for p in g["params"]))]
    assert sum(moved) >= len(moved) - 2  # all but the gradient-less matrix (and none is stuck)
    assert torch.equal(ours[-1], start[-1]["params"][-1])  # no gradient: untouched


def test_rejects_bad_settings():
    with pytest.raises(ValueError, match="`lr` must be >= 0"):
        ForeachLARS([torch.zeros(2, requires_grad=True)], lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        ForeachLARS([torch.zeros(2, requires_grad=True)], lr=0.1, momentum=0.0, nesterov=True)


@requires_solo()
def test_matches_solo_learns_lars_in_float32():
    from solo.utils.lars import LARS

    ours, theirs = run(ForeachLARS, torch.float32), run(LARS, torch.float32)
    for p, q in zip(ours, theirs):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), (p - q).abs().max()


@requires_solo()
def test_registered_with_solo_learn_as_lars_foreach():
    from solo.methods.base import BaseMethod
    from solo.methods.linear import LinearModel

    import solo_diet

    solo_diet.register()
    assert BaseMethod._OPTIMIZERS["lars_foreach"] is ForeachLARS
    assert LinearModel._OPTIMIZERS["lars_foreach"] is ForeachLARS  # the probe may use it too


@pytest.mark.skipif(not torch.cuda.is_available(), reason="host syncs exist only on CUDA")
def test_a_step_on_cuda_never_waits_for_the_device():
    params = [torch.randn(64, 64, device="cuda", requires_grad=True) for _ in range(4)]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = ForeachLARS(params, lr=0.1, weight_decay=1e-4, clip_lr=True)
    torch.cuda.set_sync_debug_mode("error")
    try:
        optimizer.step()
        optimizer.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


# solo-learn's LARS settings (solo.args.pretrain fills momentum 0.9, eta 1e-3, clip_lr False,
# exclude_bias_n_norm False), one at a time and together
SOLO_LEARN_VARIANTS = {
    "defaults": {},
    "no_weight_decay": {"weight_decay": 0.0},
    "exclude_bias_n_norm": {"exclude_bias_n_norm": True},
    "clip_lr": {"clip_lr": True},
    "eta": {"eta": 0.02},
    "eps": {"eps": 1e-3},
    "nesterov": {"nesterov": True},
    "dampening": {"dampening": 0.1},
    "no_momentum": {"momentum": 0.0},
    "together": {"exclude_bias_n_norm": True, "clip_lr": True, "eta": 0.02, "weight_decay": 5e-4},
}


def fifty_step_start() -> list[torch.Tensor]:
    """Matrices, a conv kernel, biases, an all-zero matrix, and a last matrix left without
    gradient."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(16, 8), (8, 3, 3, 3), (16,), (16,), (10, 16), (4, 4), (3, 3)]
    params = [torch.randn(*s, generator=generator) for s in shapes]
    params[-2].zero_()
    return params


def train_fifty_steps(optimizer_class, options: dict) -> list[torch.Tensor]:
    """50 float32 steps over two parameter groups under a warm-up cosine lr; gradients depend on
    the weights, so a difference would grow; one step gives a matrix a zero gradient."""
    params = fifty_step_start()
    settings = {"momentum": 0.9, "weight_decay": 1e-4, "eta": 1e-3, **options}
    optimizer = optimizer_class(
        [{"params": params[:3]}, {"params": params[3:]}], lr=0.5, **settings
    )
    generator = torch.Generator().manual_seed(1)
    for step in range(50):
        lr = 0.5 * min(1.0, step / 5) * 0.5 * (1 + math.cos(math.pi * step / 50))
        for group in optimizer.param_groups:
            group["lr"] = lr
        for index, p in enumerate(params[:-1]):
            p.grad = 0.1 * p + torch.randn(p.shape, generator=generator)
            if (step, index) == (7, 0):
                p.grad.zero_()
        optimizer.step()
    return params


@requires_solo()
@pytest.mark.parametrize("variant", sorted(SOLO_LEARN_VARIANTS))
def test_equals_solo_learns_lars_over_fifty_float32_steps(variant):
    """Each tensor within 1e-6 of its largest entry (bitwise equal on the CPUs tried)."""
    from solo.utils.lars import LARS

    options = SOLO_LEARN_VARIANTS[variant]
    ours, theirs = train_fifty_steps(ForeachLARS, options), train_fifty_steps(LARS, options)
    for p, q in zip(ours, theirs):
        assert (p - q).abs().max() <= 1e-6 * q.abs().max(), (variant, (p - q).abs().max())
    moved = [not torch.equal(p, p0) for p, p0 in zip(ours, fifty_step_start())]
    assert moved == [True] * 6 + [False]  # all trained but the tensor without gradient


@requires_solo()
def test_a_checkpoint_of_solo_learns_lars_resumes_in_foreach_lars_and_back():
    """The two optimizers' state dicts are interchangeable (same groups, same momentum buffers), so
    turning ``performance.foreach_substitutes`` on or off between a run and its resume is exact."""
    from solo.utils.lars import LARS

    def steps(optimizer, params, first: int, last: int) -> None:
        for step in range(first, last):
            generator = torch.Generator().manual_seed(step)
            for p in params:
                p.grad = 0.1 * p + torch.randn(p.shape, generator=generator)
            optimizer.step()

    settings = {"lr": 0.3, "momentum": 0.9, "weight_decay": 1e-4, "clip_lr": True}
    straight = fifty_step_start()[:5]
    steps(LARS(straight, **settings), straight, 0, 6)
    for first, then in ((LARS, ForeachLARS), (ForeachLARS, LARS)):
        params = fifty_step_start()[:5]
        before = first(params, **settings)
        steps(before, params, 0, 3)
        after = then(params, **settings)
        after.load_state_dict(before.state_dict())
        steps(after, params, 3, 6)
        assert all(torch.equal(p, q) for p, q in zip(params, straight)), (first, then)


class DeviceLR(ForeachLARS):
    """ForeachLARS reading each group's learning rate from a 0-dim tensor (a replayed graph's)."""

    def step(self, closure=None):
        floats = [group["lr"] for group in self.param_groups]
        for group in self.param_groups:
            group["lr"] = torch.tensor(group["lr"], dtype=torch.float32)
        try:
            return super().step(closure)
        finally:
            for group, lr in zip(self.param_groups, floats):
                group["lr"] = lr


def test_a_learning_rate_on_the_device_takes_the_same_steps():
    ours, floats = run(DeviceLR, torch.float32), run(ForeachLARS, torch.float32)
    for p, q in zip(ours, floats):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-7), (p - q).abs().max()
