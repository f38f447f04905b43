"""SimplicialEmbedding against an independent float64 reference (SEM paper, Eq. 1), limits, AMP."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from solo_diet.core.nn import SimplicialEmbedding, simplex_softmax, simplex_statistics

L, V, D, B = 6, 5, 12, 8


def reference_sem(layer: SimplicialEmbedding, x: torch.Tensor, tau: float) -> np.ndarray:
    """float64 numpy: z = BN_train(W x); per simplex i, exp((Z_i - max)/tau) / sum, concatenated."""
    weight = layer.linear.weight.detach().double().numpy()
    gamma = layer.bn.weight.detach().double().numpy()
    beta = layer.bn.bias.detach().double().numpy()
    z = x.double().numpy() @ weight.T
    z = (z - z.mean(0)) / np.sqrt(z.var(0) + layer.bn.eps) * gamma + beta
    out = np.empty_like(z)
    for i in range(L):
        block = z[:, i * V : (i + 1) * V] / tau
        expo = np.exp(block - block.max(1, keepdims=True))
        out[:, i * V : (i + 1) * V] = expo / expo.sum(1, keepdims=True)
    return out


@pytest.fixture
def layer() -> SimplicialEmbedding:
    torch.manual_seed(0)
    module = SimplicialEmbedding(D, L, V, tau=0.7)
    with torch.no_grad():  # non-trivial affine BN so the reference checks gamma/beta placement
        module.bn.weight.uniform_(0.5, 2.0)
        module.bn.bias.uniform_(-1.0, 1.0)
    return module


@pytest.mark.parametrize("tau", [0.05, 0.7, 3.0])
def test_layer_matches_float64_reference(layer, tau):
    x = torch.randn(B, D)
    out = layer(x, tau=tau)
    assert out.shape == (B, L * V) and out.dtype == torch.float32
    np.testing.assert_allclose(
        out.detach().double().numpy(), reference_sem(layer, x, tau), atol=2e-5
    )


def test_default_tau_is_the_module_tau(layer):
    x = torch.randn(B, D)
    np.testing.assert_allclose(layer(x).detach().numpy(), reference_sem(layer, x, 0.7), atol=2e-5)


def test_each_simplex_is_a_probability_vector(layer):
    out = layer(torch.randn(B, D) * 10).detach().reshape(B, L, V)
    assert torch.all(out >= 0) and torch.all(out <= 1)
    torch.testing.assert_close(out.sum(-1), torch.ones(B, L))
    assert math.isclose(out.sum().item() / B, L, rel_tol=1e-5)  # ||z_hat||_1 = L


def test_small_tau_tends_to_one_hot_and_tau_zero_is_argmax():
    torch.manual_seed(1)
    logits = torch.randn(B, L * V)
    one_hot = torch.nn.functional.one_hot(logits.reshape(B, L, V).argmax(-1), V).reshape(B, L * V)
    distances = [
        (simplex_softmax(logits, V, tau) - one_hot).abs().max().item()
        for tau in (1.0, 0.1, 1e-2, 1e-4)
    ]
    assert distances == sorted(distances, reverse=True) and distances[-1] < 1e-6
    assert torch.equal(simplex_softmax(logits, V, 0.0), one_hot.float())


def test_large_tau_tends_to_uniform():
    logits = torch.randn(B, L * V)
    torch.testing.assert_close(
        simplex_softmax(logits, V, 1e6), torch.full((B, L * V), 1 / V), atol=1e-5, rtol=0
    )


def _cpu_autocast_dtypes() -> list[torch.dtype]:
    supported = []
    for dtype in (torch.bfloat16, torch.float16):
        try:
            with torch.autocast("cpu", dtype=dtype):
                torch.nn.functional.linear(torch.randn(2, 3), torch.randn(4, 3))
            supported.append(dtype)
        except (RuntimeError, AssertionError):
            continue
    return supported


@pytest.mark.parametrize("dtype", _cpu_autocast_dtypes(), ids=str)
@pytest.mark.parametrize("tau", [1.0, 1e-2, 1e-4])
def test_finite_under_cpu_autocast(layer, dtype, tau):
    x = (torch.randn(B, D) * 30).requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        out = layer(x, tau=tau)
        loss = (out * torch.randn_like(out)).sum()
    loss.backward()
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters())
    torch.testing.assert_close(out.reshape(B, L, V).sum(-1), torch.ones(B, L))


def test_frozen_forward_uses_running_stats_without_touching_them(layer):
    for _ in range(3):
        layer(torch.randn(B, D) + 2.0)
    mean_before, var_before = layer.bn.running_mean.clone(), layer.bn.running_var.clone()
    x = torch.randn(B, D)
    frozen = layer.frozen_forward(x, tau=0.1)
    assert layer.training and not frozen.requires_grad
    assert torch.equal(layer.bn.running_mean, mean_before) and torch.equal(
        layer.bn.running_var, var_before
    )
    layer.eval()
    torch.testing.assert_close(frozen, layer(x, tau=0.1))


def test_simplex_statistics_against_float64():
    torch.manual_seed(2)
    probs = simplex_softmax(torch.randn(B, L * V) * 3, V, 1.0)
    p = probs.double().numpy().reshape(B, L, V)
    stats = simplex_statistics(probs, V)
    assert math.isclose(
        stats["entropy"].item(), float((-(p * np.log(p)).sum(-1)).mean()), rel_tol=1e-5
    )
    assert math.isclose(stats["max_prob"].item(), float(p.max(-1).mean()), rel_tol=1e-6)
    marginal = p.mean(0)
    marginal_entropy = float((-(marginal * np.log(marginal)).sum(-1)).mean())
    assert math.isclose(stats["marginal_entropy"].item(), marginal_entropy, rel_tol=1e-5)
    one_hot_stats = simplex_statistics(simplex_softmax(torch.randn(B, L * V), V, 0.0), V)
    assert one_hot_stats["entropy"].item() == 0.0 and one_hot_stats["max_prob"].item() == 1.0
    uniform = simplex_statistics(torch.full((B, L * V), 1 / V), V)
    assert math.isclose(uniform["entropy"].item(), math.log(V), rel_tol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"in_dim": D, "num_simplices": L, "simplex_dim": V, "tau": -1.0}, "tau"),
        ({"in_dim": D, "num_simplices": L, "simplex_dim": V, "tau": float("inf")}, "tau"),
        ({"in_dim": D, "num_simplices": L, "simplex_dim": 1}, "simplex_dim"),
        ({"in_dim": D, "num_simplices": 0, "simplex_dim": V}, "num_simplices"),
    ],
)
def test_invalid_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SimplicialEmbedding(**kwargs)


def test_width_must_be_a_multiple_of_simplex_size():
    with pytest.raises(ValueError, match="multiple"):
        simplex_softmax(torch.randn(2, 7), 3, 1.0)


def test_frozen_forward_is_float32_for_a_bfloat16_module(layer):
    x = torch.randn(B, D)
    reference = layer.eval().frozen_forward(x, tau=0.5)
    out = layer.to(torch.bfloat16).frozen_forward(x.to(torch.bfloat16), tau=0.5)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference, atol=0.05, rtol=0)
