"""k-means with k-means++ seeding, torch only."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from solo_diet.metrics._arrays import ArrayLike

# ==================================================================================================
# k-means (Lloyd, 1982) with k-means++ seeding (Arthur and Vassilvitskii, 2007), torch only:
# clusters of frozen features for the clustering scores above (``solo-diet compare``).
# ==================================================================================================


class KMeansResult(NamedTuple):
    assignments: torch.Tensor  # (N,) int64 cluster ids
    centroids: torch.Tensor  # (k, d)
    inertia: float  # sum of squared distances of the points to their centroid


def _squared_distances(x: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    return (
        (x * x).sum(1, keepdim=True) - 2 * x @ centroids.T + (centroids * centroids).sum(1)
    ).clamp_min(0.0)


def _kmeans_plus_plus(x: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """Greedy k-means++: each next centroid is the best (least potential) of 2 + ln k candidates
    drawn with probability proportional to D(x)^2, the squared distance to the nearest centroid."""
    trials = 2 + int(math.log(k))
    chosen = [int(torch.randint(x.shape[0], (1,), generator=generator))]
    nearest = _squared_distances(x, x[chosen]).squeeze(1)
    for _ in range(1, k):
        weights = nearest if nearest.sum() > 0 else torch.ones_like(nearest)
        candidates = torch.multinomial(weights, trials, replacement=True, generator=generator)
        potentials = torch.minimum(nearest.unsqueeze(1), _squared_distances(x, x[candidates]))
        best = int(potentials.sum(0).argmin())
        chosen.append(int(candidates[best]))
        nearest = potentials[:, best]
    return x[chosen].clone()


def _lloyd(x: torch.Tensor, centroids: torch.Tensor, max_iter: int, tol: float) -> KMeansResult:
    for _ in range(max_iter):
        distances = _squared_distances(x, centroids)
        assignments = distances.argmin(1)
        sums = torch.zeros_like(centroids).index_add_(0, assignments, x)
        counts = torch.bincount(assignments, minlength=centroids.shape[0]).unsqueeze(1).to(x.dtype)
        # an emptied cluster takes the point farthest from its centroid
        empty = (counts.squeeze(1) == 0).nonzero().flatten()
        updated = torch.where(counts > 0, sums / counts.clamp_min(1.0), centroids)
        if empty.numel():
            farthest = (
                distances.gather(1, assignments.unsqueeze(1)).squeeze(1).topk(empty.numel()).indices
            )
            updated[empty] = x[farthest]
        shift = ((updated - centroids) ** 2).sum()
        centroids = updated
        if shift <= tol:
            break
    distances = _squared_distances(x, centroids)
    inertia, assignments = distances.min(1)
    return KMeansResult(assignments, centroids, float(inertia.sum()))


def kmeans(
    features: ArrayLike,
    k: int,
    n_init: int = 5,
    max_iter: int = 100,
    tol: float = 1e-6,
    seed: int = 0,
) -> KMeansResult:
    """Seeded k-means: ``n_init`` k-means++ starts refined by Lloyd's iterations (stopping when the
    centroids move less than ``tol`` in total squared distance); the run of least inertia wins."""
    x = torch.as_tensor(features).detach().to("cpu", torch.float64)
    if x.dim() != 2 or not 1 <= k <= x.shape[0]:
        raise ValueError(
            f"k-means needs (N, d) features with 1 <= k <= N, got shape {tuple(x.shape)} and k={k}"
        )
    if n_init < 1 or max_iter < 1:
        raise ValueError(f"n_init and max_iter must be >= 1, got {n_init} and {max_iter}")
    generator = torch.Generator().manual_seed(seed)
    runs = [_lloyd(x, _kmeans_plus_plus(x, k, generator), max_iter, tol) for _ in range(n_init)]
    return min(runs, key=lambda run: run.inertia)
