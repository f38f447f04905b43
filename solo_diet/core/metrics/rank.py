"""RankMe and LiDAR, as the s-DIET paper reports for DIET (§7.1, Tab. 7), in float64 on the
features' own device (on a GPU a 3072-d LiDAR takes milliseconds, not the CPU's seconds)."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np
import torch

ArrayLike = Union[np.ndarray, torch.Tensor, list]


def exp_entropy(p: torch.Tensor) -> float:
    """exp(-sum p log p), with 0 log 0 = 0."""
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def _float64_matrix(features: ArrayLike, name: str) -> torch.Tensor:
    x = torch.as_tensor(features).detach().to(torch.float64)
    if x.dim() != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(
            f"{name} must be a non-empty (num_samples, dim) matrix, got shape {tuple(x.shape)}"
        )
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf values")
    return x


def singular_values(features: ArrayLike) -> torch.Tensor:
    """Singular values (descending, float64) of the uncentred embedding matrix ``Z`` (K x d)."""
    return torch.linalg.svdvals(_float64_matrix(features, "features"))


def rankme(features: ArrayLike, eps: float = 1e-7, sigma: Optional[torch.Tensor] = None) -> float:
    """RankMe = exp(-sum_k p_k log p_k), ``p_k = sigma_k / ||sigma||_1 + eps``, ``sigma`` the
    singular values of the raw embeddings (Garrido et al.), given or computed; in [1, min(K, d)]."""
    sigma = singular_values(features) if sigma is None else sigma
    if sigma.sum() <= 0:
        raise ValueError("features are all zero: RankMe is undefined")
    return exp_entropy(sigma / sigma.sum() + eps)


def lidar(
    features: ArrayLike, labels_of_views: ArrayLike, delta: float = 1e-4, eps: float = 1e-8
) -> float:
    """LiDAR (Thilak et al.) = exp(-sum_i p_i log p_i), eigenvalues of ``Sigma_w^-1/2 Sigma_b
    Sigma_w^-1/2`` of (n*q, d) ``features`` grouped by ``labels_of_views`` (``Sigma_b`` over class
    means, ``Sigma_w`` pooled + ``delta I``); in [1, min(d, n - 1)]."""
    z = _float64_matrix(features, "features")
    labels = torch.as_tensor(labels_of_views).reshape(-1).to(z.device)
    if labels.numel() != z.shape[0]:
        raise ValueError(
            f"labels_of_views has {labels.numel()} entries for {z.shape[0]} feature rows"
        )
    _, class_of_row, views_per_class = torch.unique(labels, return_inverse=True, return_counts=True)
    num_classes = views_per_class.numel()
    if num_classes < 2 or int(views_per_class.min()) < 2:
        raise ValueError(
            f"LiDAR needs >= 2 surrogate classes with >= 2 views each, got {num_classes} classes "
            f"with {int(views_per_class.min())} to {int(views_per_class.max())} views"
        )
    class_means = z.new_zeros(num_classes, z.shape[1]).index_add_(0, class_of_row, z)
    class_means /= views_per_class.unsqueeze(1).to(torch.float64)
    between = class_means - class_means.mean(0)
    sigma_b = between.T @ between / (num_classes - 1)
    within = z - class_means[class_of_row]
    sigma_w = within.T @ within / float((views_per_class - 1).sum())
    sigma_w += delta * torch.eye(z.shape[1], dtype=torch.float64, device=z.device)
    w_eigenvalues, w_eigenvectors = torch.linalg.eigh(sigma_w)
    inverse_sqrt = w_eigenvectors @ torch.diag(w_eigenvalues.rsqrt()) @ w_eigenvectors.T
    eigenvalues = torch.linalg.eigvalsh(inverse_sqrt @ sigma_b @ inverse_sqrt).clamp_min(0.0)
    return exp_entropy((eigenvalues + eps) / (eigenvalues + eps).sum())
