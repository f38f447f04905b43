"""The momentum encoder's EMA (BYOL paper, Eq. 1: ``xi <- tau * xi + (1 - tau) * theta``) with
``_foreach`` ops, rounded as solo-learn's ``MomentumUpdater.update`` (both products in the
parameter's dtype before the sum): the same floats.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor


@torch.no_grad()
def ema_update_(momentum_params: Iterable[Tensor], online_params: Iterable[Tensor], tau: float):
    """``m <- tau * m + (1 - tau) * o`` in place for each pair (as ``zip`` pairs them)."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"EMA: tau must be in [0, 1], got {tau}")
    pairs = list(zip(momentum_params, online_params))
    if not pairs:
        return
    momentum = [m for m, _ in pairs]
    online = [o.detach() for _, o in pairs]
    # out-of-place products: an in-place foreach multiply rounds bfloat16 unlike ``tau * m``
    updated = torch._foreach_mul(momentum, tau)
    torch._foreach_add_(updated, torch._foreach_mul(online, 1.0 - tau))
    torch._foreach_copy_(momentum, updated)
