"""Representation metrics (torch / numpy): here clustering scores of codes, collapse diagnostics
and k-means (Lloyd with k-means++) of frozen features; RankMe and LiDAR in ``rank``, the linear
probe in ``logreg``. The CPLearn paper reports NMI only; AMI, ARI, accuracies, code usage and chance
NMI are ours; the scores and the contingency table are scikit-learn's."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from solo_diet.core.metrics.rank import ArrayLike, exp_entropy, lidar, rankme, singular_values


def _checked(labels: ArrayLike, clusters: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Both as flat integer arrays of one non-empty length."""
    labels, clusters = (
        np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v).reshape(-1)
        for v in (labels, clusters)
    )
    for values in (labels, clusters):
        if values.dtype.kind not in "iub":
            raise ValueError(f"cluster and class ids must be integers, got dtype {values.dtype}")
    if labels.shape != clusters.shape or labels.size == 0:
        raise ValueError(
            f"labels and clusters must be non-empty and of equal length, got {labels.size} and "
            f"{clusters.size}"
        )
    return labels, clusters


def contingency_table(labels: ArrayLike, clusters: ArrayLike) -> np.ndarray:
    """Counts ``n_kc`` of samples with class k (rows) and cluster c (columns)."""
    from sklearn.metrics.cluster import contingency_matrix

    return contingency_matrix(*_checked(labels, clusters))


def normalized_mutual_info(labels: ArrayLike, clusters: ArrayLike) -> float:
    """NMI = MI / ((H(Y) + H(C)) / 2), scikit-learn's arithmetic form (CPLearn's released code)."""
    from sklearn.metrics import normalized_mutual_info_score

    return float(normalized_mutual_info_score(*_checked(labels, clusters)))


def adjusted_mutual_info(labels: ArrayLike, clusters: ArrayLike) -> float:
    """AMI = (MI - E[MI]) / (mean(H(Y), H(C)) - E[MI]), scikit-learn's (Vinh et al., 2010)."""
    from sklearn.metrics import adjusted_mutual_info_score

    return float(adjusted_mutual_info_score(*_checked(labels, clusters)))


def adjusted_rand_index(labels: ArrayLike, clusters: ArrayLike) -> float:
    """ARI (Hubert and Arabie, 1985), scikit-learn's from pair counts."""
    from sklearn.metrics import adjusted_rand_score

    return float(adjusted_rand_score(*_checked(labels, clusters)))


def hungarian_accuracy(labels: ArrayLike, clusters: ArrayLike) -> float:
    """Best one-to-one class/cluster matching accuracy; unmatched clusters count as errors."""
    from scipy.optimize import linear_sum_assignment

    table = contingency_table(labels, clusters)
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / table.sum())


def many_to_one_accuracy(labels: ArrayLike, clusters: ArrayLike) -> float:
    """Purity: each cluster votes for its majority class; tends to 1 with singleton clusters."""
    table = contingency_table(labels, clusters)
    return float(table.max(0).sum() / table.sum())


def chance_nmi(labels: ArrayLike, clusters: ArrayLike, repeats: int = 5, seed: int = 0) -> float:
    """Permutation-chance NMI: mean NMI of the same assignment against shuffled labels."""
    labels, clusters = _checked(labels, clusters)
    rng = np.random.default_rng(seed)
    scores = [normalized_mutual_info(rng.permutation(labels), clusters) for _ in range(repeats)]
    return float(np.mean(scores))


def clustering_report(
    labels: ArrayLike, clusters: ArrayLike, chance_repeats: int = 5, seed: int = 0
) -> dict[str, float]:
    """Every clustering score we report: NMI, AMI, ARI, accuracies, codes used, chance NMI."""
    from scipy.stats import entropy

    usage = contingency_table(labels, clusters).sum(0)
    return {
        "nmi": normalized_mutual_info(labels, clusters),
        "ami": adjusted_mutual_info(labels, clusters),
        "ari": adjusted_rand_index(labels, clusters),
        "hungarian_acc": hungarian_accuracy(labels, clusters),
        "many_to_one_acc": many_to_one_accuracy(labels, clusters),
        "codes_used": float(usage.size),
        "usage_perplexity": math.exp(entropy(usage)),
        "chance_nmi": chance_nmi(labels, clusters, chance_repeats, seed),
    }


def embedding_spectrum(
    embeddings: ArrayLike, mode: str = "centered", pad_to: int = 2048
) -> torch.Tensor:
    """Descending float64 eigenvalues of the embedding covariance (Jing et al.): ``centered``, or
    ``released`` (the official script's min-max, zero-padding to ``pad_to``, uncentred)."""
    x = torch.as_tensor(embeddings).detach().to("cpu", torch.float64)
    if x.dim() != 2 or x.shape[0] < 2:
        raise ValueError(f"embeddings must be (N >= 2, d), got shape {tuple(x.shape)}")
    if mode == "centered":
        x = x - x.mean(0)
        moment = x.T @ x / (x.shape[0] - 1)
    elif mode == "released":
        x = (x - x.min()) / (x.max() - x.min()).clamp_min(torch.finfo(torch.float64).tiny)
        x = torch.nn.functional.pad(x, (0, max(pad_to - x.shape[1], 0)))
        moment = x.T @ x / x.shape[0]
    else:
        raise ValueError(f"mode must be 'centered' or 'released', got {mode!r}")
    return torch.linalg.eigvalsh(moment).flip(0).clamp_min(0.0)


def dimensional_collapse_report(
    embeddings: ArrayLike, rel_threshold: float = 1e-3
) -> dict[str, float]:
    """Scalars of the centred spectrum: effective rank exp(H(lambda / sum lambda)), count of
    eigenvalues above ``rel_threshold * lambda_max``, and mean |off-diagonal correlation|."""
    eigenvalues = embedding_spectrum(embeddings, mode="centered")
    total = eigenvalues.sum()
    if total <= 0:
        return {"effective_rank": 1.0, "significant_dims": 0.0, "mean_abs_offdiag_corr": math.nan}
    p = eigenvalues / total
    x = torch.as_tensor(embeddings).detach().to("cpu", torch.float64)
    x = x - x.mean(0)
    corr = torch.atleast_2d(torch.corrcoef(x[:, x.norm(dim=0) > 0].T))  # varying dims (1x1 for one)
    d = corr.shape[0]
    offdiag = (corr.abs().sum() - corr.diagonal().abs().sum()) / max(d * (d - 1), 1)
    return {
        "effective_rank": exp_entropy(p),
        "significant_dims": float((eigenvalues > rel_threshold * eigenvalues[0]).sum()),
        "mean_abs_offdiag_corr": float(offdiag),
    }


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
        nearest, assignments = _squared_distances(x, centroids).min(1)
        sums = torch.zeros_like(centroids).index_add_(0, assignments, x)
        counts = torch.bincount(assignments, minlength=centroids.shape[0]).unsqueeze(1).to(x.dtype)
        updated = torch.where(counts > 0, sums / counts.clamp_min(1.0), centroids)
        # an emptied cluster takes the point farthest from its centroid
        empty = (counts.squeeze(1) == 0).nonzero().flatten()
        updated[empty] = x[nearest.topk(empty.numel()).indices]
        shift = ((updated - centroids) ** 2).sum()
        centroids = updated
        if shift <= tol:
            break
    inertia, assignments = _squared_distances(x, centroids).min(1)
    return KMeansResult(assignments, centroids, float(inertia.sum()))


def kmeans(
    features: ArrayLike,
    k: int,
    n_init: int = 5,
    max_iter: int = 100,
    tol: float = 1e-6,
    seed: int = 0,
) -> KMeansResult:
    """Seeded k-means: ``n_init`` k-means++ starts refined by Lloyd; the least inertia wins."""
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
