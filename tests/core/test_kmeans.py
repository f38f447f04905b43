"""k-means section of solo_diet.core.metrics against scikit-learn's KMeans and a float64 numpy
reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from solo_diet.core.metrics import adjusted_rand_index, kmeans

sk_cluster = pytest.importorskip(
    "sklearn.cluster", reason="scikit-learn is the reference implementation"
)


def _blobs(
    seed: int, k: int = 6, per_cluster: int = 50, dim: int = 8, spread: float = 0.6
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 3.0, (k, dim))
    labels = np.repeat(np.arange(k), per_cluster)
    return centres[labels] + rng.normal(0.0, spread, (labels.size, dim)), labels


def _numpy_inertia(x: np.ndarray, assignments: np.ndarray) -> float:
    """Sum of squared distances to the mean of each cluster, written loop-wise."""
    total = 0.0
    for cluster in np.unique(assignments):
        members = x[assignments == cluster]
        total += float(((members - members.mean(0)) ** 2).sum())
    return total


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_separated_blobs_are_recovered_like_sklearn(seed):
    x, labels = _blobs(seed)
    ours = kmeans(torch.from_numpy(x), 6, seed=seed)
    reference = sk_cluster.KMeans(6, n_init=10, random_state=seed).fit(x)

    assert adjusted_rand_index(labels, ours.assignments) == pytest.approx(1.0)
    assert ours.inertia == pytest.approx(reference.inertia_, rel=1e-9)
    assert ours.inertia == pytest.approx(_numpy_inertia(x, ours.assignments.numpy()), rel=1e-9)


@pytest.mark.parametrize("seed", [0, 1])
def test_overlapping_data_inertia_close_to_sklearn(seed):
    """Unstructured Gaussian data has many local optima: ours (5 starts) is within 3 % of sklearn's
    10."""
    x = np.random.default_rng(seed).normal(size=(400, 16))
    ours = kmeans(x, 10, seed=seed)
    reference = sk_cluster.KMeans(10, n_init=10, random_state=seed).fit(x)

    assert ours.inertia <= 1.03 * reference.inertia_
    assert ours.inertia == pytest.approx(_numpy_inertia(x, ours.assignments.numpy()), rel=1e-9)
    assert torch.allclose(
        ours.centroids[ours.assignments[0]],
        torch.from_numpy(x[ours.assignments.numpy() == int(ours.assignments[0])].mean(0)),
        atol=1e-5,
    )


def test_seeded_runs_repeat_and_every_cluster_is_used():
    x = np.random.default_rng(3).normal(size=(60, 4))
    x[:30] = x[
        0
    ]  # many duplicates: k-means++ must still find k distinct starts or refill empty clusters
    first, second = kmeans(x, 8, seed=7), kmeans(x, 8, seed=7)

    assert torch.equal(first.assignments, second.assignments) and first.inertia == second.inertia
    assert torch.unique(first.assignments).numel() == 8


@pytest.mark.parametrize("k, shape", [(0, (5, 2)), (6, (5, 2)), (2, (5,))])
def test_bad_arguments_are_refused(k, shape):
    with pytest.raises(ValueError, match="k-means needs"):
        kmeans(torch.zeros(shape), k)
