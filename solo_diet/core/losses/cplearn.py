"""CPLearn loss (CPLearn paper, Eq. 2, Alg. 1, App. N) and diagnostics, in log space."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

PRIORS = ("reverse_kl", "forward_ce")


def _as_float(logits: torch.Tensor) -> torch.Tensor:
    """Upcast half / bfloat16 logits; float64 stays float64 (reference tests)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def log_batch_marginal(log_p: torch.Tensor, gather: bool = False) -> torch.Tensor:
    """``log pbar_j = logsumexp_i log p_ij - log n``, over the global batch when ``gather`` (a
    differentiable all-gather of every rank's rows)."""
    if gather and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        from torch.distributed.nn.functional import all_gather

        log_p = torch.cat(all_gather(log_p), dim=0)
    return torch.logsumexp(log_p, dim=0) - math.log(log_p.shape[0])


def cplearn_loss_terms(
    logits_a: torch.Tensor,
    logits_b: torch.Tensor,
    *,
    beta: float,
    prior: str = "reverse_kl",
    symmetric: bool = True,
    gather_marginal: bool = False,
) -> dict[str, torch.Tensor]:
    """``{"loss", "invariance", "prior"}``, ``loss = prior + beta * invariance`` (Alg. 1): the
    prior matches the batch marginal pbar to uniform, ``reverse_kl`` KL(pbar || u) (App. N,
    released code) or ``forward_ce`` CE(u, pbar) (Eq. 2); the invariance is Eq. 2's first term
    ``mean_i -sum_j p_a,ij log p_b,ij``, no stop-grad; ``symmetric``: both directions averaged
    (released code); ``gather_marginal``: the global pbar."""
    if logits_a.shape != logits_b.shape or logits_a.dim() != 2:
        raise ValueError(
            f"logits_a and logits_b must both be (n, c); got {tuple(logits_a.shape)} "
            f"and {tuple(logits_b.shape)}"
        )
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")

    def prior_term(log_p: torch.Tensor) -> torch.Tensor:
        log_pbar = log_batch_marginal(log_p, gather_marginal)
        if prior == "reverse_kl":
            return (log_pbar.exp() * (log_pbar + math.log(log_pbar.shape[0]))).sum()
        return -log_pbar.mean()

    def invariance_term(log_p_target: torch.Tensor, log_p_pred: torch.Tensor) -> torch.Tensor:
        return -(log_p_target.exp() * log_p_pred).sum(dim=1).mean()

    with torch.autocast(device_type=logits_a.device.type, enabled=False):
        log_p_a = torch.log_softmax(_as_float(logits_a), dim=1)
        log_p_b = torch.log_softmax(_as_float(logits_b), dim=1)
        prior_value, invariance = prior_term(log_p_a), invariance_term(log_p_a, log_p_b)
        if symmetric:
            prior_value = 0.5 * (prior_value + prior_term(log_p_b))
            invariance = 0.5 * (invariance + invariance_term(log_p_b, log_p_a))
    return {"loss": prior_value + beta * invariance, "invariance": invariance, "prior": prior_value}


def cplearn_loss(logits_a: torch.Tensor, logits_b: torch.Tensor, **options: Any) -> torch.Tensor:
    """The scalar CPLearn loss of two views' code logits (:func:`cplearn_loss_terms`)."""
    return cplearn_loss_terms(logits_a, logits_b, **options)["loss"]


@torch.no_grad()
def cplearn_diagnostics(logits_a: torch.Tensor, logits_b: torch.Tensor) -> dict[str, torch.Tensor]:
    """Collapse monitors of one batch (ours; CPLearn paper, App. C): ``entropy``,
    ``marginal_entropy``, ``codes_used``, ``max_prob`` and the views' argmax ``agreement``."""
    names = ("entropy", "marginal_entropy", "codes_used", "max_prob")
    stats = []
    for logits in (logits_a, logits_b):
        log_p = torch.log_softmax(_as_float(logits), dim=1)
        log_pbar = log_batch_marginal(log_p)
        # distinct argmax codes, counted on the device (``unique`` would wait for the GPU)
        hit = log_p.new_zeros(log_p.shape[1]).index_fill_(0, log_p.argmax(dim=1), 1.0)
        entropy = -(log_p.exp() * log_p).sum(dim=1).mean()
        marginal_entropy = -(log_pbar.exp() * log_pbar).sum()
        stats.append((entropy, marginal_entropy, hit.sum(), log_p.max(dim=1).values.exp().mean()))
    out = {name: torch.stack(values).mean() for name, values in zip(names, zip(*stats))}
    out["agreement"] = (logits_a.argmax(dim=1) == logits_b.argmax(dim=1)).float().mean()
    return out
