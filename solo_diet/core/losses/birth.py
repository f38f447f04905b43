"""Losses of the Birth-of-SSL paper (Balestriero & LeCun), with its numbering: ``z`` is ``(N, K)``,
labels ``y`` ``(N, C)``, the label graph ``G = y y^T``; errata applied (docs/references.md)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

SOLVE_SIDES = ("auto", "features", "samples")


def label_onehot(ids: torch.Tensor, label_norm_power: float = 0.0) -> torch.Tensor:
    """``(N, M)`` one-hot labels over the distinct ids ``>= 0`` (-1: a zero row), column ``c`` over
    ``n_c^(p/2)``, so ``Y Y^T = G~``, ``G~_ij = 1[c_i = c_j] / n_c^p``."""
    labelled = ids >= 0
    _, inverse, counts = torch.unique(ids[labelled], return_inverse=True, return_counts=True)
    onehot = ids.new_zeros((ids.shape[0], counts.shape[0]), dtype=torch.float64)
    onehot[labelled] = F.one_hot(inverse, counts.shape[0]).to(torch.float64)
    return onehot / counts.to(torch.float64).pow(label_norm_power / 2.0)


def _same_label(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(same, n)``: ``same_ij = 1[id_i = id_j >= 0]`` (float64) and ``n_i``, the count of row
    ``i``'s id (1 for id -1), without reading the ids back."""
    labelled = ids >= 0
    same = (ids.unsqueeze(1) == ids.unsqueeze(0)) & labelled.unsqueeze(1) & labelled.unsqueeze(0)
    same = same.to(torch.float64)
    return same, same.sum(dim=1).clamp_min(1.0)


def label_graph(ids: torch.Tensor, label_norm_power: float = 0.0) -> torch.Tensor:
    """``(N, N)`` graph ``G~_ij = 1[id_i = id_j >= 0] / n_c^p`` (self-loops included; id -1: no
    edge), ``label_onehot(ids, p) @ label_onehot(ids, p).T`` without its ``unique``."""
    same, counts = _same_label(ids)
    return same / counts.pow(label_norm_power).unsqueeze(1)


def label_targets(ids: torch.Tensor, label_norm_power: float = 0.0) -> torch.Tensor:
    """``(N, N)`` targets ``Y`` with ``Y Y^T = label_graph(ids, p)`` without reading the ids back
    (Lemma 1's loss sees targets only through ``Y Y^T``)."""
    same, counts = _same_label(ids)
    return same / counts.pow((label_norm_power + 1.0) / 2.0).unsqueeze(0)


def closed_form_head_loss_from_targets(
    z: torch.Tensor, y: torch.Tensor, lam: float, *, center: bool = True, side: str = "auto"
) -> torch.Tensor:
    """Lemma 1 (Eq. 2): ``min_{W,b} (1/N)||z W^T + 1 b^T - y||_F^2 + lam ||W||_F^2`` in closed form,
    ``(1/N)[ ||H y||^2 - Tr(P^T (Z_c^T Z_c + lam N I_K)^{-1} P) ]``, ``Z_c = H z``, ``P = Z_c^T y``,
    by the ``features`` or ``samples`` side solve (``auto``: smaller); ``center=False``: no bias."""
    if lam < 0:
        raise ValueError(f"the ridge lambda must be >= 0, got {lam}.")
    if side not in SOLVE_SIDES:
        raise ValueError(f"`side` must be one of {list(SOLVE_SIDES)}, got {side!r}.")
    dtype = torch.promote_types(z.dtype, torch.float32)
    with torch.autocast(device_type=z.device.type, enabled=False):
        z, y = z.to(dtype), y.to(dtype)
        if center:
            z = z - z.mean(dim=0, keepdim=True)
            y = y - y.mean(dim=0, keepdim=True)
        num_rows, dim = z.shape
        if lam == 0:
            projected = z @ (torch.linalg.pinv(z) @ y)
            fit = (y * projected).sum()
        elif side == "features" or (side == "auto" and dim <= num_rows):
            cross = z.T @ y
            ridge = z.T @ z + lam * num_rows * torch.eye(dim, dtype=dtype, device=z.device)
            # positive definite for lam > 0: solve_ex, without torch.linalg.solve's read-back
            fit = (cross * torch.linalg.solve_ex(ridge, cross)[0]).sum()
        else:
            gram = z @ z.T
            ridge = gram + lam * num_rows * torch.eye(num_rows, dtype=dtype, device=z.device)
            fit = (y * torch.linalg.solve_ex(ridge, gram @ y)[0]).sum()
        return (y.pow(2).sum() - fit) / num_rows


def closed_form_head_loss(
    z: torch.Tensor,
    ids: torch.Tensor,
    lam: float,
    *,
    center: bool = True,
    label_norm_power: float = 0.0,
    side: str = "auto",
) -> torch.Tensor:
    """Lemma 1 (Eq. 2) with integer labels (:func:`label_targets`): with the datum index as id and
    ``V >= 2`` views, a VICReg/W-MSE-like SSL loss (Theorem 1, Proposition 1)."""
    return closed_form_head_loss_from_targets(
        z, label_targets(ids, label_norm_power).to(z.device), lam, center=center, side=side
    )


def _weighted_covariance(z: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Unbiased covariance with reliability weights, ``sum w (z - mu)(z - mu)^T / (V1 - V2/V1)``."""
    total = weights.sum()
    mean = (weights.unsqueeze(1) * z).sum(dim=0) / total
    centered = z - mean
    return (weights.unsqueeze(1) * centered).T @ centered / (total - weights.pow(2).sum() / total)


def graph_vicreg_loss(
    views: Sequence[torch.Tensor],
    graph: torch.Tensor,
    *,
    sim_loss_weight: float = 25.0,
    var_loss_weight: float = 25.0,
    cov_loss_weight: float = 1.0,
) -> torch.Tensor:
    """VICReg over any label graph (Corollary 1's exact form, docs/references.md): the invariance
    ``sum_ij G_ij ||z_i - z_j||^2 / (K sum_{i != j} G_ij)``, VICReg's std hinge and covariance per
    view, degree-weighted; two views of one image give solo-learn's ``vicreg_loss_func``."""
    with torch.autocast(device_type=views[0].device.type, enabled=False):
        z = torch.cat(list(views)).to(torch.promote_types(views[0].dtype, torch.float32))
        graph = graph.to(z.dtype)
        num_rows, dim = z.shape
        if graph.shape != (num_rows, num_rows):
            raise ValueError(
                f"graph must be ({num_rows}, {num_rows}) for {len(views)} views of "
                f"{views[0].shape[0]} rows, got {tuple(graph.shape)}."
            )

        degrees = graph.sum(dim=1)
        centered = z - z.mean(dim=0, keepdim=True)
        pair_sum = 2.0 * (
            (degrees * centered.pow(2).sum(dim=1)).sum() - (graph * (centered @ centered.T)).sum()
        )
        num_pairs = degrees.sum() - graph.diagonal().sum()
        has_pairs = num_pairs > 0
        invariance = torch.where(
            has_pairs, pair_sum / (dim * torch.where(has_pairs, num_pairs, 1.0)), 0.0
        )

        variance = z.new_zeros(())
        covariance = z.new_zeros(())
        # a 0/1 mask multiplied in: indexing with a boolean mask would wait for the GPU
        off_diagonal = 1.0 - torch.eye(dim, dtype=z.dtype, device=z.device)
        for view_weights, view in zip(degrees.chunk(len(views)), z.chunk(len(views))):
            cov = _weighted_covariance(view, view_weights)
            variance = variance + F.relu(1.0 - torch.sqrt(cov.diagonal() + 1e-4)).mean()
            covariance = covariance + (cov.pow(2) * off_diagonal).sum() / dim
        return (
            sim_loss_weight * invariance + var_loss_weight * variance + cov_loss_weight * covariance
        )
