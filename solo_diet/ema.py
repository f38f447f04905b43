"""Exponential moving average of a network's parameters (the momentum encoder of BYOL, MoCo, DINO,
...) with torch's ``_foreach`` ops: a few launches for the whole network instead of three per
parameter.

The update is solo-learn's ``MomentumUpdater.update`` (BYOL paper, Eq. 1:
``xi <- tau * xi + (1 - tau) * theta``) with its rounding: both products are rounded to the
parameter's dtype before the sum, so the result is the same float, element by element (float32,
float64 and bfloat16 tested on the CPU).
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor


@torch.no_grad()
def ema_update_(momentum_params: Iterable[Tensor], online_params: Iterable[Tensor], tau: float):
    """``m <- tau * m + (1 - tau) * o`` in place for each pair, as solo-learn's per-parameter loop
    computes it. Pairs are taken as ``zip`` takes them (the shorter list ends the update). ``tau``
    is a Python float (a device tensor would need no read-back either, but solo-learn's schedule
    gives a float)."""
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
