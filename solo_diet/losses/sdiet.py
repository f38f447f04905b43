"""s-DIET losses: batch cross-entropy over the head rows of the batch (s-DIET paper, §5.1, Eq. 7).

Only the rows ``W_H[I]`` of the samples in the batch are scored, so a sample's class is its
position in the batch (``0..B-1``), not its dataset index. Multi-batch cross-entropy (s-DIET paper,
§5.2) scores against ``m*B`` resident rows instead; a sample's class is the position of its row
among them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


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
    """Multi-batch CE (s-DIET paper, §5.2; our reading): logits over all ``m*B`` resident rows.

    ``logits = normalize(z) @ resident_rows.T / temperature`` (``B x mB``); sample ``j``'s target is
    ``positions[j]``, the position of its own row among the resident rows; PyTorch label smoothing
    spreads ``label_smoothing`` over the ``m*B`` classes, not over N. The logits are
    :func:`sdiet_logits` (float32 whatever the autocast).

    Args:
        z: ``(B, D)`` projector outputs (normalised here, s-DIET paper, §6.2).
        resident_rows: ``(mB, D)`` head rows, unnormalised.
        positions: ``(B,)`` long, row of each sample inside ``resident_rows``.
    """
    logits = sdiet_logits(z, resident_rows, temperature)
    with torch.autocast(device_type=z.device.type, enabled=False):
        return F.cross_entropy(logits, positions, label_smoothing=label_smoothing)


def sdiet_batch_cross_entropy(
    z: torch.Tensor,
    rows: torch.Tensor,
    *,
    label_smoothing: float = 0.8,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Batch CE (s-DIET paper, Eq. 7): ``CE(normalize(z) @ W_H[I].T / temperature, 0..B-1)``.

    ``rows[k]`` is the head row of sample ``k`` (labels ``0..B-1``, as in Listing 1); the case
    ``m = 1`` of :func:`sdiet_multi_batch_cross_entropy`. The head gradient is
    ``(P - Q).T @ normalize(z) / B`` (the s-DIET paper's App. A.4 gradient restricted to the batch
    rows) with ``P`` the row softmax and ``Q`` the smoothed identity target.
    """
    positions = torch.arange(z.shape[0], device=z.device)
    return sdiet_multi_batch_cross_entropy(
        z, rows, positions, label_smoothing=label_smoothing, temperature=temperature
    )
