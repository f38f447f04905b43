"""Simplicial Embeddings (Lavoie et al., ICLR 2023): embedder, Eq. 1 and §3.1's statistics."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ContextManager

import torch
import torch.nn.functional as F
from torch import nn


def check_temperature(tau: float, key: str, allow_zero: bool) -> float:
    """Return ``float(tau)`` or raise a ValueError naming ``key`` (tau = 0 means one-hot argmax)."""
    tau = float(tau)
    lowest_ok = tau >= 0 if allow_zero else tau > 0
    if not (lowest_ok and math.isfinite(tau)):
        bound = ">= 0 (0 means one-hot argmax)" if allow_zero else "> 0 (gradients scale as 1/tau)"
        raise ValueError(f"{key} must be a finite temperature {bound}, got {tau}")
    return tau


def simplex_softmax(logits: torch.Tensor, simplex_dim: int, tau: float) -> torch.Tensor:
    """SEM paper, Eq. 1: ``softmax(Z_i / tau)`` over each run of ``simplex_dim`` coordinates of
    ``(B, L*V)`` ``logits``, in float32 with autocast off; ``tau = 0`` gives the one-hot argmax."""
    tau = check_temperature(tau, "SEM tau", allow_zero=True)
    batch, width = logits.shape
    if width % simplex_dim:
        raise ValueError(
            f"SEM input width {width} is not a multiple of the simplex size {simplex_dim}"
        )
    with torch.autocast(device_type=logits.device.type, enabled=False):
        simplices = logits.float().reshape(batch, width // simplex_dim, simplex_dim)
        if tau == 0:
            probs = F.one_hot(simplices.argmax(dim=-1), simplex_dim).float()
        else:
            probs = torch.softmax(simplices / tau, dim=-1)
    return probs.reshape(batch, width)


@torch.no_grad()
def simplex_statistics(probs: torch.Tensor, simplex_dim: int) -> dict[str, torch.Tensor]:
    """Sparsity of a ``(B, L*V)`` SEM representation in nats (SEM paper, §3.1, Fig. 2b): per-simplex
    ``entropy`` and ``max_prob``, and ``marginal_entropy`` of the batch average, all averaged."""
    simplices = probs.float().reshape(probs.shape[0], -1, simplex_dim)
    per_simplex = -torch.special.xlogy(simplices, simplices).sum(-1)
    marginal = simplices.mean(0)
    return {
        "entropy": per_simplex.mean(),
        "max_prob": simplices.amax(-1).mean(),
        "marginal_entropy": -torch.special.xlogy(marginal, marginal).sum(-1).mean(),
    }


class SimplicialEmbedding(nn.Module):
    """Embedder ``z = BN(W e)``; ``forward(x, tau=None)``: the SEM representation (Eq. 1)."""

    def __init__(self, in_dim: int, num_simplices: int, simplex_dim: int, tau: float = 1.0):
        super().__init__()
        for key, value in {"in_dim": in_dim, "num_simplices": num_simplices}.items():
            if int(value) < 1:
                raise ValueError(f"SimplicialEmbedding {key} must be >= 1, got {value}")
        if int(simplex_dim) < 2:
            raise ValueError(f"SimplicialEmbedding simplex_dim (V) must be >= 2, got {simplex_dim}")
        self.num_simplices, self.simplex_dim = int(num_simplices), int(simplex_dim)
        self.tau = check_temperature(tau, "SimplicialEmbedding tau", allow_zero=True)
        self.out_dim = self.num_simplices * self.simplex_dim
        self.linear = nn.Linear(in_dim, self.out_dim, bias=False)
        self.bn = nn.BatchNorm1d(self.out_dim)

    def forward(self, x: torch.Tensor, tau: float | None = None) -> torch.Tensor:
        return simplex_softmax(
            self.bn(self.linear(x)), self.simplex_dim, self.tau if tau is None else tau
        )

    @torch.no_grad()
    def frozen_forward(self, x: torch.Tensor, tau: float | None = None) -> torch.Tensor:
        """The SEM paper's probe input (§4): BN with running stats, no gradient, fp32."""
        bn = self.bn  # float32, also for a half-precision ("16-true") module
        tensors = (self.linear.weight, bn.running_mean, bn.running_var, bn.weight, bn.bias)
        weight, mean, var, gamma, beta = (t.float() for t in tensors)
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.batch_norm(
                F.linear(x.float(), weight), mean, var, gamma, beta, training=False, eps=bn.eps
            )
        return simplex_softmax(logits, self.simplex_dim, self.tau if tau is None else tau)

    def extra_repr(self) -> str:
        return f"L={self.num_simplices}, V={self.simplex_dim}, tau={self.tau}"


class SEMFeatureExtractor(nn.Module):
    """Frozen ``backbone -> embedder -> softmax(z / tau_d)``, a probe backbone (§4)."""

    def __init__(self, backbone: nn.Module, embedder: SimplicialEmbedding, tau: float):
        super().__init__()
        self.backbone, self.embedder = backbone, embedder
        self.tau = check_temperature(tau, "probe tau", allow_zero=True)
        self.num_features = embedder.out_dim

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.embedder.frozen_forward(self.backbone(X), self.tau)


class SEMProbe(nn.Linear):
    """A twin's online classifier with ``probe: sem``: a Linear over the frozen SEM representation
    at ``tau`` (SEM paper, §4); ``embedder`` is the twin's, not a submodule."""

    def __init__(self, embedder: SimplicialEmbedding, tau: float, num_classes: int):
        super().__init__(embedder.out_dim, num_classes)
        self.embedders = (embedder,)
        self.tau = check_temperature(tau, "probe tau", allow_zero=True)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return super().forward(self.embedders[0].frozen_forward(feats, self.tau))


class SEMThenHead(nn.Module):
    """``head(SEM(feats))`` at temperature ``tau``, recording its SEM outputs."""

    def __init__(self, embedder: SimplicialEmbedding, head: nn.Module):
        super().__init__()
        self.embedder, self.head, self.tau = embedder, head, embedder.tau
        self.recorded: list[torch.Tensor] | None = None

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        sem = self.embedder(feats, self.tau)
        if self.recorded is not None:
            self.recorded.append(sem)
        # SEM is float32; the head runs in the backbone's dtype
        return self.head(sem.to(feats.dtype))

    def __getitem__(self, index: int) -> nn.Module:
        """``projector[-1]`` reaches the wrapped head, as for an nn.Sequential."""
        return self.head[index]

    @contextmanager
    def _set(self, name: str, value: Any) -> Iterator[Any]:
        """In the block, attribute ``name`` is ``value`` (yielded)."""
        previous = getattr(self, name)
        setattr(self, name, value)
        try:
            yield value
        finally:
            setattr(self, name, previous)

    def temperature(self, tau: float) -> ContextManager[float]:
        return self._set("tau", tau)

    def recording(self) -> ContextManager[list[torch.Tensor]]:
        return self._set("recorded", [])
