"""VICReg's and Barlow Twins' decorrelation terms without a mask (solo-learn's floats)."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

BARLOW_BATCH_NORM_EPS = 1e-5
"""``nn.BatchNorm1d``'s default eps, with which the Barlow Twins paper's code standardises z."""


def off_diagonal(matrix: Tensor) -> Tensor:
    """The off-diagonal entries of a square matrix, row by row (a strided view)."""
    n, m = matrix.shape
    if n != m:
        raise ValueError(f"off_diagonal: a square matrix is needed, got {n} x {m}")
    # dropping the last entry, rows of n + 1 start at each diagonal entry: column 0 is the diagonal
    return matrix.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def covariance_term(z: Tensor) -> Tensor:
    """The VICReg paper's covariance term ``c(Z)`` for one branch: the squared off-diagonal entries
    of the covariance of ``z`` (N x D, unbiased), summed and divided by D."""
    n, d = z.shape
    centred = z - z.mean(dim=0)
    covariance = (centred.T @ centred) / (n - 1)
    return off_diagonal(covariance).pow(2).sum() / d


def vicreg_covariance_loss(z1: Tensor, z2: Tensor) -> Tensor:
    """VICReg's covariance regulariser over both branches: ``c(Z1) + c(Z2)``."""
    return covariance_term(z1) + covariance_term(z2)


def barlow_twins_loss(
    z1: Tensor, z2: Tensor, lamb: float = 5e-3, scale_loss: float = 0.025
) -> Tensor:
    """Barlow Twins paper, Eq. 1, scaled by ``scale_loss``: the cross-correlation ``C`` of the
    batch-standardised ``z1`` and ``z2`` (N x D; averaged over the processes of a distributed run),
    ``scale_loss * (sum_i (1 - C_ii)^2 + lamb * sum_{i != j} C_ij^2)``."""
    n, d = z1.shape
    z1 = F.batch_norm(z1, None, None, training=True, eps=BARLOW_BATCH_NORM_EPS)
    z2 = F.batch_norm(z2, None, None, training=True, eps=BARLOW_BATCH_NORM_EPS)
    correlation = torch.einsum("bi, bj -> ij", z1, z2) / n
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(correlation)
        correlation /= dist.get_world_size()
    eye = torch.eye(d, device=correlation.device)
    squared = (correlation - eye).pow(2)
    return scale_loss * torch.where(eye.bool(), squared, squared * lamb).sum()
