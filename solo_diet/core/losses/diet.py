"""DIET losses: the datum index is the class (DIET paper; MSE-DIET from the s-DIET paper)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def diet_loss(
    logits: torch.Tensor, indexes: torch.Tensor, label_smoothing: float = 0.8
) -> torch.Tensor:
    """DIET paper, Eq. 2: ``XEnt(W_H f(x_n), y = n)`` of ``(B, N)`` logits, with label smoothing."""
    return F.cross_entropy(logits.float(), indexes, label_smoothing=label_smoothing)


def mse_diet_loss(logits: torch.Tensor, indexes: torch.Tensor) -> torch.Tensor:
    """MSE-DIET, s-DIET paper, Eq. 5: ``1/2 mean_i sum_k (W_H f(x_i) - e_{n_i})_k^2``."""
    targets = F.one_hot(indexes, num_classes=logits.shape[1]).to(torch.float32)
    return 0.5 * (logits.float() - targets).pow(2).sum(dim=1).mean()
