"""A first-in first-out write into the feature queues of MoCo, NNCLR, ReSSL, ... whose pointer
stays on the device, so the write never waits for the GPU (reading the pointer as a Python number
would)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def enqueue_(pointer: Tensor, size: int, writes: Sequence[tuple[Tensor, int, Tensor]]) -> None:
    """Write each ``(queue, dim, values)``'s ``values`` (cast) at positions ``pointer ... pointer
    + B - 1`` along ``dim``, then advance ``pointer`` (a long tensor on the device) by B modulo
    ``size``, a multiple of B (a write never wraps)."""
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
