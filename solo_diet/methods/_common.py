"""Small helpers shared by the plugin's solo-learn adapters."""

from __future__ import annotations

import torch

SOLO_LEARN_SEED = 5
"""solo-learn's default ``seed`` (``solo.args.pretrain.parse_cfg``), where a cfg has none."""


def online_probe_loss(targets: torch.Tensor, class_loss: torch.Tensor) -> torch.Tensor:
    """solo-learn's online-probe loss, or 0 (chosen on the device) when no sample is labelled."""
    return torch.where((targets != -1).any(), class_loss, class_loss.new_zeros(()))
