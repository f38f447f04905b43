"""Projector heads shared by the plugin methods."""

from __future__ import annotations

from torch import nn


def mlp_projector(
    in_dim: int, hidden_dim: int, out_dim: int, num_layers: int = 3, use_bn: bool = True
) -> nn.Sequential:
    """ReLU MLP ``in -> hidden (x num_layers-1) -> out`` with BatchNorm1d after each hidden Linear.

    ``num_layers=3`` is the s-DIET projector (s-DIET paper, §6: "three-layer ReLU MLP").
    """
    layers: list[nn.Module] = []
    width = in_dim
    for _ in range(num_layers - 1):
        layers.append(nn.Linear(width, hidden_dim))
        if use_bn:
            layers.append(nn.BatchNorm1d(hidden_dim))
        layers.append(nn.ReLU(inplace=True))
        width = hidden_dim
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)
