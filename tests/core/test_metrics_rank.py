"""RankMe and LiDAR (s-DIET paper, Tab. 7) against independent float64 references (numpy/scipy)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from solo_diet.core.metrics import lidar, rankme, singular_values


def planted_matrix(singular: list[float], rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """``U diag(singular) V^T`` with random orthonormal U (rows x r) and V (cols x r)."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((rows, len(singular))))
    v, _ = np.linalg.qr(rng.standard_normal((cols, len(singular))))
    return u @ np.diag(singular) @ v.T


def rankme_reference(z: np.ndarray, eps: float = 1e-7) -> float:
    """numpy's LAPACK SVD; entropy summed in a Python loop."""
    sigma = np.linalg.svd(z, compute_uv=False)
    total = sum(sigma)
    entropy = 0.0
    for value in sigma:
        p = value / total + eps
        entropy -= p * math.log(p)
    return math.exp(entropy)


def lidar_reference(
    z: np.ndarray, labels: np.ndarray, delta: float = 1e-4, eps: float = 1e-8
) -> float:
    """Generalised symmetric eigenproblem ``Sigma_b v = lambda Sigma_w v`` (same spectrum as the
    whitened ``Sigma_w^-1/2 Sigma_b Sigma_w^-1/2``), covariances built class by class."""
    classes = np.unique(labels)
    d = z.shape[1]
    means = np.stack([z[labels == c].mean(0) for c in classes])
    grand = z.mean(0)
    sigma_b = sum(np.outer(m - grand, m - grand) for m in means) / (len(classes) - 1)
    sigma_w = np.zeros((d, d))
    for c, m in zip(classes, means):
        centred = z[labels == c] - m
        sigma_w += centred.T @ centred
    q = len(z) // len(classes)
    sigma_w = sigma_w / (len(classes) * (q - 1)) + delta * np.eye(d)
    eigenvalues = np.clip(scipy.linalg.eigh(sigma_b, sigma_w, eigvals_only=True), 0.0, None)
    p = (eigenvalues + eps) / (eigenvalues + eps).sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def views_of_planted_classes(n: int, q: int, d: int, signal_dims: int, noise: float, seed: int = 0):
    """``q`` noisy views of ``n`` class centres that vary only along the first ``signal_dims``
    axes."""
    rng = np.random.default_rng(seed)
    centres = np.zeros((n, d))
    centres[:, :signal_dims] = rng.standard_normal((n, signal_dims))
    labels = np.repeat(np.arange(n), q)
    views = centres[labels] + noise * rng.standard_normal((n * q, d))
    return views, labels


@pytest.mark.parametrize("singular", [[5.0, 5.0, 5.0, 5.0], [9.0, 4.0, 1.0, 0.5, 0.25, 0.1]])
def test_rankme_planted_spectrum_matches_reference(singular):
    z = planted_matrix(singular, rows=64, cols=24)
    p = np.asarray(singular) / sum(singular) + 1e-7
    zero_singular_values = min(64, 24) - len(singular)
    closed_form = math.exp(-(p * np.log(p)).sum() - zero_singular_values * 1e-7 * math.log(1e-7))
    assert rankme(torch.tensor(z)) == pytest.approx(rankme_reference(z), rel=1e-9)
    assert rankme(z) == pytest.approx(closed_form, rel=1e-5)
    assert torch.allclose(
        singular_values(z)[: len(singular)],
        torch.tensor(sorted(singular, reverse=True), dtype=torch.float64),
    )


def test_rankme_equals_rank_for_a_flat_spectrum_and_ignores_scale():
    z = planted_matrix([1.0] * 7, rows=50, cols=20, seed=3)
    assert rankme(z) == pytest.approx(7.0, rel=1e-4)
    assert rankme(1000.0 * z) == pytest.approx(rankme(z), rel=1e-9)
    assert rankme(torch.tensor(z, dtype=torch.float32)) == pytest.approx(7.0, rel=1e-4)


def test_rankme_rejects_bad_input():
    with pytest.raises(ValueError, match="features"):
        rankme(torch.zeros(3))
    with pytest.raises(ValueError, match="all zero"):
        rankme(torch.zeros(4, 3))


@pytest.mark.parametrize("signal_dims", [1, 3, 6])
def test_lidar_matches_reference_and_counts_planted_dimensions(signal_dims):
    views, labels = views_of_planted_classes(n=200, q=6, d=10, signal_dims=signal_dims, noise=0.05)
    value = lidar(torch.tensor(views, dtype=torch.float64), torch.tensor(labels))
    assert value == pytest.approx(lidar_reference(views, labels), rel=1e-7)
    # the whitened between-class spectrum is ~equal on the planted axes and ~0 elsewhere
    assert signal_dims * 0.85 < value < signal_dims + 0.3


def test_lidar_views_in_any_order_and_invariance_to_linear_maps():
    views, labels = views_of_planted_classes(n=60, q=5, d=6, signal_dims=4, noise=0.3, seed=1)
    order = np.random.default_rng(2).permutation(len(labels))
    assert lidar(views[order], labels[order]) == pytest.approx(lidar(views, labels), rel=1e-9)
    mixing = np.random.default_rng(4).standard_normal((6, 6)) + 3 * np.eye(6)
    assert lidar(views @ mixing, labels, delta=1e-12) == pytest.approx(
        lidar(views, labels, delta=1e-12), rel=1e-6
    )


def test_lidar_rejects_single_views():
    with pytest.raises(ValueError, match=">= 2 views"):
        lidar(torch.randn(8, 3), torch.arange(8))
    with pytest.raises(ValueError, match="entries"):
        lidar(torch.randn(8, 3), torch.arange(4))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_rankme_and_lidar_run_there_and_match_the_references():
    """compare evaluates on the GPU: a 3072-d LiDAR (raw pixels of 32 px) takes milliseconds
    there; the values are the float64 references'."""
    z = planted_matrix([9.0, 4.0, 1.0, 0.5, 0.25, 0.1], rows=2000, cols=3072)
    cuda = torch.tensor(z, device="cuda")
    assert singular_values(cuda).device.type == "cuda"
    assert rankme(cuda) == pytest.approx(rankme_reference(z), rel=1e-9)
    views, labels = views_of_planted_classes(n=300, q=10, d=3072, signal_dims=12, noise=0.1)
    on_gpu = lidar(torch.tensor(views, device="cuda"), torch.tensor(labels))
    assert on_gpu == pytest.approx(lidar(views, labels), rel=1e-9)
