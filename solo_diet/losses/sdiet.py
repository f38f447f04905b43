"""s-DIET losses: batch cross-entropy over the head rows of the batch (seed 000 §5, Eq. 7).

Only the rows ``W_H[I]`` of the samples in the batch are scored, so a sample's class is its position
in the batch (``0..B-1``), not its dataset index. Multi-batch cross-entropy (seed 000 §5.2) scores
against ``m*B`` resident rows instead; a sample's class is the position of its row among them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sdiet_multi_batch_cross_entropy(
    z: torch.Tensor,
    resident_rows: torch.Tensor,
    positions: torch.Tensor,
    *,
    label_smoothing: float = 0.8,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Multi-batch CE (seed 000 §5.2, spec §3.8 / A29): logits over all ``m*B`` resident rows.

    ``logits = normalize(z) @ resident_rows.T / temperature`` (``B x mB``); sample ``j``'s target is
    ``positions[j]``, the position of its own row among the resident rows; PyTorch label smoothing
    spreads ``label_smoothing`` over the ``m*B`` classes (spec A9).

    Args:
        z: ``(B, D)`` projector outputs (normalised here, seed 000 §6.2).
        resident_rows: ``(mB, D)`` head rows, unnormalised.
        positions: ``(B,)`` long, row of each sample inside ``resident_rows``.
    """
    dtype = torch.promote_types(torch.promote_types(z.dtype, resident_rows.dtype), torch.float32)
    logits = F.normalize(z.to(dtype), dim=-1) @ resident_rows.to(dtype).T
    return F.cross_entropy(logits / temperature, positions, label_smoothing=label_smoothing)


def sdiet_batch_cross_entropy(
    z: torch.Tensor,
    rows: torch.Tensor,
    *,
    label_smoothing: float = 0.8,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Batch CE (seed 000 Eq. 7, Listing 1): ``CE(normalize(z) @ W_H[I].T / temperature, 0..B-1)``.

    ``rows[k]`` is the head row of sample ``k``; the case ``m = 1`` of
    :func:`sdiet_multi_batch_cross_entropy`. The head gradient is ``(P - Q).T @ normalize(z) / B``
    (spec §3.1) with ``P`` the row softmax and ``Q`` the smoothed identity target.
    """
    positions = torch.arange(z.shape[0], device=z.device)
    return sdiet_multi_batch_cross_entropy(
        z, rows, positions, label_smoothing=label_smoothing, temperature=temperature
    )
