"""Layers shared by the plugin methods: the MLP projector and the W-MSE paper's whitening."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def mlp_projector(
    in_dim: int, hidden_dim: int, out_dim: int, num_layers: int = 3, use_bn: bool = True
) -> nn.Sequential:
    """ReLU MLP with BatchNorm1d after each hidden Linear (3 layers: s-DIET paper, §6)."""
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


class CholeskyWhitening(nn.Module):
    """Whitens a slice ``x`` (N x D) by ``L^-1``, ``L L^T = (1 - eps) cov + eps I``, in float32; a
    covariance not positive definite fails a device assert ending with ``fix``."""

    def __init__(
        self, output_dim: int, eps: float = 0.0, fix: str = "raise argument `eps` or the slice size"
    ):
        super().__init__()
        self.output_dim, self.eps = output_dim, eps
        # CUDA's asynchronous assert takes messages under 255 characters
        not_positive_definite = "a slice's covariance is not positive definite (Cholesky failed); "
        self.not_positive_definite = f"W-MSE whitening: {not_positive_definite}{fix}"[:254]

    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(self, x: Tensor) -> Tensor:
        centred = x - x.mean(dim=0)
        rows = centred.T.contiguous()
        covariance = (rows @ rows.T) / (x.shape[0] - 1)
        eye = torch.eye(self.output_dim, dtype=covariance.dtype, device=covariance.device)
        shrunk = (1 - self.eps) * covariance + self.eps * eye
        factor, status = torch.linalg.cholesky_ex(shrunk)
        torch._assert_async(status == 0, self.not_positive_definite)
        inverse = torch.linalg.solve_triangular(factor, eye, upper=False)
        return centred @ inverse.T
