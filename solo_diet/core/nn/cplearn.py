"""CPLearn projector (CPLearn paper, Eq. 1, §3.3), torch-only: ``Linear -> BatchNorm1d ->
squashing`` gives ``H``; code logits ``H @ W / tau``, ``W`` a frozen Rademacher dictionary (Eq. 5),
``tau = f / (sqrt(n) * ln((1 - eps (c - 1)) / eps))`` (§3, Lemma 1)."""

from __future__ import annotations

import math

import torch
from torch import nn

ACTIVATIONS = ("tanh", "l2")


def logit_range(num_codes: int, eps: float = 1e-8) -> float:
    """``L = ln((1 - eps (c - 1)) / eps)``: the logit gap of Lemma 1's extreme probability."""
    if not 0.0 < eps < 1.0 / num_codes:
        raise ValueError(
            f"eps must lie in (0, 1/num_codes) = (0, {1.0 / num_codes:.3g}), got {eps}"
        )
    return math.log((1.0 - eps * (num_codes - 1)) / eps)


def code_temperature(embed_dim: int, batch_size: int, num_codes: int, eps: float = 1e-8) -> float:
    """``tau = f / (sqrt(n) L)`` (CPLearn paper, §3, Alg. 1), ``n`` the batch, ``f`` W's rows."""
    return embed_dim / (math.sqrt(batch_size) * logit_range(num_codes, eps))


def rademacher_codes(embed_dim: int, num_codes: int, seed: int) -> torch.Tensor:
    """Frozen ``W in {-1, +1}^{f x c}`` (Eq. 5) seeded by ``seed`` alone."""
    generator = torch.Generator().manual_seed(seed)
    bits = torch.randint(0, 2, (embed_dim, num_codes), generator=generator, dtype=torch.int8)
    return bits.float().mul_(2.0).sub_(1.0)


class CPLearnProjector(nn.Module):
    """CPLearn's projector returning ``(H, code logits)`` in float32: ``tanh`` (released code) ``H =
    tanh(BN(Linear(z)))``, or ``l2`` (Eq. 1) ``H = sqrt(f/n) U / ||U||``, ``U = BN(Linear(z))``."""

    def __init__(
        self,
        in_dim: int,
        embed_dim: int,
        num_codes: int,
        *,
        activation: str = "tanh",
        eps: float = 1e-8,
        codes_seed: int = 0,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.embed_dim, self.num_codes = embed_dim, num_codes
        self.activation, self.eps = activation, eps
        logit_range(num_codes, eps)  # validates eps against c before any allocation
        self.linear = nn.Linear(in_dim, embed_dim)
        self.bn = nn.BatchNorm1d(embed_dim)
        self.register_buffer("codes", rademacher_codes(embed_dim, num_codes, codes_seed))

    def embed(self, feats: torch.Tensor) -> torch.Tensor:
        """Embedding H (n x f), autocast off: tanh head (§3.3) or scaled L2 head (Eq. 1)."""
        with torch.autocast(device_type=feats.device.type, enabled=False):
            u = self.bn(self.linear(feats.to(self.linear.weight.dtype)))
            if self.activation == "tanh":
                return torch.tanh(u)
            scale = math.sqrt(self.embed_dim / u.shape[0])
            return scale * nn.functional.normalize(u, dim=1)

    def code_logits(self, h: torch.Tensor) -> torch.Tensor:
        """``H W / tau`` with autocast off, tau from the rows of ``h`` (the local batch)."""
        tau = code_temperature(self.embed_dim, h.shape[0], self.num_codes, self.eps)
        with torch.autocast(device_type=h.device.type, enabled=False):
            return (h.to(self.codes.dtype) @ self.codes) / tau

    def forward(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.embed(feats)
        return h, self.code_logits(h)
