"""DIET losses, the datum index as the class (DIET paper; MSE-DIET from the s-DIET paper), and
s-DIET's CE over the batch's head rows (s-DIET paper, §5.1, Eq. 7) or a super-batch's (§5.2)."""

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


def sdiet_logits(z: torch.Tensor, rows: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``normalize(z) @ rows.T / temperature`` in at least float32 with autocast off: the s-DIET
    paper trains in 32-bit precision (its App. D.3), and bf16 would round the logits."""
    dtype = torch.promote_types(torch.promote_types(z.dtype, rows.dtype), torch.float32)
    with torch.autocast(device_type=z.device.type, enabled=False):
        return F.normalize(z.to(dtype), dim=-1) @ rows.to(dtype).T / temperature


def sdiet_multi_batch_cross_entropy(
    z: torch.Tensor,
    resident_rows: torch.Tensor,
    positions: torch.Tensor,
    *,
    label_smoothing: float = 0.8,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Multi-batch CE (s-DIET paper, §5.2; our reading): ``z`` over the ``(mB, D)`` resident rows,
    sample ``j``'s target ``positions[j]``, smoothing over the ``m*B`` classes."""
    logits = sdiet_logits(z, resident_rows, temperature)
    with torch.autocast(device_type=z.device.type, enabled=False):
        return F.cross_entropy(logits, positions, label_smoothing=label_smoothing)


def sdiet_batch_cross_entropy(
    z: torch.Tensor, rows: torch.Tensor, **options: float
) -> torch.Tensor:
    """Batch CE (s-DIET paper, Eq. 7): ``CE(normalize(z) @ W_H[I].T / temperature, 0..B-1)``, the
    case ``m = 1`` of :func:`sdiet_multi_batch_cross_entropy`."""
    positions = torch.arange(z.shape[0], device=z.device)
    return sdiet_multi_batch_cross_entropy(z, rows, positions, **options)
