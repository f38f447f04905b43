"""The momentum methods' device-side helpers: the momentum encoder's EMA (BYOL paper, Eq. 1) with
``_foreach`` ops, rounded as solo-learn's ``MomentumUpdater.update`` (the same floats), and a FIFO
write into the feature queues of MoCo, NNCLR, ReSSL, ... whose pointer stays on the device."""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union

import torch
from torch import Tensor


@torch.no_grad()
def ema_update_(
    momentum_params: Iterable[Tensor],
    online_params: Iterable[Tensor],
    tau: Union[float, Tensor],
    complement: Optional[Tensor] = None,
):
    """``m <- tau * m + (1 - tau) * o`` in place per pair (a tensor tau: with ``complement``)."""
    if not isinstance(tau, Tensor) and not 0.0 <= tau <= 1.0:
        raise ValueError(f"EMA: tau must be in [0, 1], got {tau}")
    pairs = list(zip(momentum_params, online_params))
    if not pairs:
        return
    momentum = [m for m, _ in pairs]
    online = [o.detach() for _, o in pairs]
    # out-of-place products: an in-place foreach multiply rounds bfloat16 unlike ``tau * m``
    updated = torch._foreach_mul(momentum, tau)
    torch._foreach_add_(
        updated, torch._foreach_mul(online, 1.0 - tau if complement is None else complement)
    )
    torch._foreach_copy_(momentum, updated)


@torch.no_grad()
def enqueue_(pointer: Tensor, size: int, writes: Sequence[tuple[Tensor, int, Tensor]]) -> None:
    """Write each queue's ``values`` at ``pointer`` along ``dim``; advance the device pointer."""
    if not writes:
        return
    _, first_dim, first_values = writes[0]
    batch = first_values.shape[first_dim]
    if size % batch:
        raise ValueError(f"queue: its size {size} must be a multiple of the batch size {batch}")
    positions = (pointer + torch.arange(batch, device=pointer.device)) % size
    for queue, dim, values in writes:
        queue.index_copy_(dim, positions, values.to(queue.dtype))
    pointer.add_(batch).remainder_(size)
