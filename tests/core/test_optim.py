"""Closed-form zero-gradient AdamW / SGDW (s-DIET paper, Eq. 18/20, minus sign) vs float64
simulation."""

import math

import pytest
import torch

from solo_diet.core.sdiet.optim import (
    RowAdamW,
    RowSGDW,
    adamw_row_step,
    adamw_zero_grad_steps,
    sgdw_row_step,
    sgdw_zero_grad_steps,
)

LR, WD, BETAS, EPS, MOMENTUM = 1e-3, 0.05, (0.9, 0.999), 1e-8, 0.9
ADAM = dict(lr=LR, weight_decay=WD, betas=BETAS, eps=EPS)
SGD = dict(lr=LR, weight_decay=WD, momentum=MOMENTUM)


def adam_state(seed=0, rows=6, dim=5):
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    m = 1e-3 * torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    v = 1e-7 + 1e-6 * torch.rand(rows, dim, generator=gen, dtype=torch.float64)
    return theta, m, v


def simulate_adamw(theta, m, v, steps):
    """Plain per-element loop: AdamW with g = 0, decoupled decay, psi = 1."""
    theta, m, v = theta.tolist(), m.tolist(), v.tolist()
    b1, b2 = BETAS
    for _ in range(steps):
        for r in range(len(theta)):
            for c in range(len(theta[r])):
                m[r][c] = b1 * m[r][c]
                v[r][c] = b2 * v[r][c]
                theta[r][c] = (1 - LR * WD) * theta[r][c] - LR * m[r][c] / (
                    math.sqrt(v[r][c]) + EPS
                )
    return tuple(torch.tensor(x, dtype=torch.float64) for x in (theta, m, v))


def simulate_sgdw(theta, buf, steps, lr=LR, wd=WD, mu=MOMENTUM):
    theta, buf = theta.clone(), buf.clone()
    for _ in range(steps):
        buf = mu * buf
        theta = (1 - lr * wd) * theta - lr * buf
    return theta, buf


@pytest.mark.parametrize("steps", [0, 1, 5, 194])
def test_adamw_closed_form_matches_simulation(steps):
    theta, m, v = adam_state()
    expected = simulate_adamw(theta, m, v, steps)
    got = adamw_zero_grad_steps(theta, m, v, steps, **ADAM)
    for e, g in zip(expected, got):
        assert (e - g).abs().max().item() <= 1e-8


@pytest.mark.parametrize("steps", [1, 5, 194])
def test_printed_plus_sign_of_eq18_is_wrong(steps):
    theta, m, v = adam_state()
    expected, _, _ = simulate_adamw(theta, m, v, steps)
    a, mu = 1 - LR * WD, BETAS[0] / math.sqrt(BETAS[1])
    printed = a**steps * theta + (a**steps * LR * mu - LR * mu ** (steps + 1)) / (a - mu) * m / (
        v.sqrt() + EPS
    )
    assert (printed - expected).abs().max().item() > 1e-3


def test_listing1_exponent_convention_is_eq18_at_t_minus_1():
    """Listing 1 with t evaluates the closed form at T = t - 1 (App. D.2 prescribes T = N/B - 1)."""
    theta, m, v = adam_state(1)
    t = 196.3
    mu, a = BETAS[0] / math.sqrt(BETAS[1]), 1 - LR * WD
    alpha1 = a ** (t - 1)
    alpha2 = (alpha1 * LR * mu - LR * mu**t) / (a - mu)
    listing = alpha1 * theta - alpha2 * m / (v.sqrt() + EPS)
    got, got_m, _ = adamw_zero_grad_steps(theta, m, v, t - 1, **ADAM)
    assert torch.allclose(got, listing, rtol=0, atol=1e-14)
    assert torch.allclose(got_m, BETAS[0] ** (t - 1) * m, rtol=1e-13, atol=0)


def test_fractional_steps_are_continuous_and_zero_is_identity():
    theta, m, v = adam_state(2)
    same = adamw_zero_grad_steps(theta, m, v, 0.0, **ADAM)
    for x, y in zip(same, (theta, m, v)):
        assert torch.equal(x, y)
    lo = adamw_zero_grad_steps(theta, m, v, 3.0, **ADAM)[0]
    mid = adamw_zero_grad_steps(theta, m, v, 3.5, **ADAM)[0]
    hi = adamw_zero_grad_steps(theta, m, v, 4.0, **ADAM)[0]
    near = adamw_zero_grad_steps(theta, m, v, 3.0 + 1e-9, **ADAM)[0]
    assert (near - lo).abs().max() < 1e-9
    between = ((mid - lo) * (hi - mid) >= -1e-30) | ((mid - lo).abs() < 1e-15)
    assert bool(between.all())


def test_per_row_step_counts_equal_scalar_calls():
    theta, m, v = adam_state(3, rows=3)
    steps = torch.tensor([0.0, 2.0, 7.5], dtype=torch.float64)
    got = adamw_zero_grad_steps(theta, m, v, steps, **ADAM)
    for r, t in enumerate(steps.tolist()):
        row = adamw_zero_grad_steps(theta[r : r + 1], m[r : r + 1], v[r : r + 1], t, **ADAM)
        for x, y in zip(got, row):
            assert torch.allclose(x[r : r + 1], y, rtol=0, atol=1e-15)


def test_negative_steps_are_rejected():
    theta, m, v = adam_state()
    with pytest.raises(ValueError, match=">= 0"):
        adamw_zero_grad_steps(theta, m, v, -1.0, **ADAM)


def test_equal_rates_guard_matches_simulation():
    """a == mu: lr*wd chosen so that 1 - lr*wd equals the momentum."""
    lr, mu = 0.5, 0.8
    wd = (1 - mu) / lr
    gen = torch.Generator().manual_seed(4)
    theta, buf = (
        torch.randn(4, 3, generator=gen, dtype=torch.float64),
        torch.randn(4, 3, generator=gen, dtype=torch.float64),
    )
    for steps in (1, 6):
        expected = simulate_sgdw(theta, buf, steps, lr=lr, wd=wd, mu=mu)
        got = sgdw_zero_grad_steps(theta, buf, steps, lr=lr, weight_decay=wd, momentum=mu)
        for e, g in zip(expected, got):
            assert (e - g).abs().max().item() <= 1e-12


@pytest.mark.parametrize("steps", [0, 1, 5, 194])
def test_sgdw_closed_form_matches_simulation(steps):
    gen = torch.Generator().manual_seed(5)
    theta, buf = (
        torch.randn(6, 5, generator=gen, dtype=torch.float64),
        torch.randn(6, 5, generator=gen, dtype=torch.float64),
    )
    expected = simulate_sgdw(theta, buf, steps)
    got = sgdw_zero_grad_steps(theta, buf, steps, **SGD)
    for e, g in zip(expected, got):
        assert (e - g).abs().max().item() <= 1e-12
    if steps:
        a = 1 - LR * WD
        printed = (
            a**steps * theta
            + (a**steps * LR * MOMENTUM - LR * MOMENTUM ** (steps + 1)) / (a - MOMENTUM) * buf
        )
        assert (printed - expected[0]).abs().max().item() > 1e-6


def test_inputs_are_not_mutated():
    theta, m, v = adam_state()
    grad = torch.randn_like(theta)
    copies = [x.clone() for x in (theta, m, v, grad)]
    adamw_zero_grad_steps(theta, m, v, 3, **ADAM)
    adamw_row_step(theta, m, v, grad, **ADAM)
    sgdw_zero_grad_steps(theta, m, 3, **SGD)
    sgdw_row_step(theta, m, grad, **SGD)
    for x, y in zip((theta, m, v, grad), copies):
        assert torch.equal(x, y)


def test_real_steps_match_hand_written_update_and_torch_adamw_without_bias_correction():
    theta, m, v = adam_state(6)
    grad = torch.randn_like(theta)
    b1, b2 = BETAS
    m1 = b1 * m + (1 - b1) * grad
    v1 = b2 * v + (1 - b2) * grad**2
    theta1 = theta * (1 - LR * WD) - LR * m1 / (v1.sqrt() + EPS)
    got = adamw_row_step(theta, m, v, grad, **ADAM)
    for e, g in zip((theta1, m1, v1), got):
        assert torch.allclose(e, g, rtol=0, atol=1e-15)
    # first step from zero state equals torch AdamW up to its bias correction psi_1
    param = torch.nn.Parameter(theta.clone())
    opt = torch.optim.AdamW([param], lr=LR, weight_decay=WD, betas=BETAS, eps=EPS)
    param.grad = grad.clone()
    opt.step()
    zero = torch.zeros_like(theta)
    ours = adamw_row_step(theta, zero, zero, grad, **ADAM)[0]
    psi = math.sqrt(1 - b2) / (1 - b1)
    step_torch = param.detach() - theta * (1 - LR * WD)
    step_ours = ours - theta * (1 - LR * WD)
    assert torch.allclose(
        step_torch, psi * step_ours, rtol=1e-3, atol=1e-12
    )  # eps sits differently


def test_sgdw_row_step():
    gen = torch.Generator().manual_seed(7)
    theta, buf, grad = (torch.randn(3, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    new_theta, new_buf = sgdw_row_step(theta, buf, grad, **SGD)
    assert torch.allclose(new_buf, MOMENTUM * buf + grad)
    assert torch.allclose(new_theta, (1 - LR * WD) * theta - LR * (MOMENTUM * buf + grad))


def test_row_optimizer_objects_delegate():
    theta, m, v = adam_state(8)
    grad = torch.randn_like(theta)
    adam = RowAdamW(weight_decay=WD, betas=BETAS, eps=EPS)
    rows, state = adam.step(theta, (m, v), grad, LR)
    assert torch.equal(rows, adamw_row_step(theta, m, v, grad, **ADAM)[0])
    rows, state = adam.zero_grad_steps(rows, state, 4.0, LR)
    assert len(state) == 2 and adam.state_names == ("exp_avg", "exp_avg_sq")
    sgd = RowSGDW(weight_decay=WD, momentum=MOMENTUM)
    rows, (buf,) = sgd.zero_grad_steps(theta, (m,), 2, LR)
    assert torch.equal(buf, sgdw_zero_grad_steps(theta, m, 2, **SGD)[1])
