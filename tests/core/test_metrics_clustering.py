"""Clustering section of solo_diet.core.metrics against scikit-learn / numpy references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from solo_diet.core.metrics import (
    adjusted_mutual_info,
    adjusted_rand_index,
    chance_nmi,
    clustering_report,
    contingency_table,
    dimensional_collapse_report,
    embedding_spectrum,
    hungarian_accuracy,
    many_to_one_accuracy,
    normalized_mutual_info,
)

skm = pytest.importorskip("sklearn.metrics", reason="scikit-learn is the reference implementation")


def _labelings():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, 300)
    yield "independent", labels, rng.integers(0, 7, 300)
    yield (
        "correlated",
        labels,
        np.where(rng.random(300) < 0.6, 3 * labels + 11, rng.integers(0, 40, 300)),
    )
    yield "renamed", labels, 100 - 7 * labels
    yield "more_codes_than_samples", labels, rng.integers(0, 16384, 300)
    yield "singletons", labels, np.arange(300)
    yield "one_cluster", labels, np.zeros(300, dtype=int)
    yield "both_one_group", np.zeros(50, dtype=int), np.full(50, 4)


@pytest.mark.parametrize("case", list(_labelings()), ids=lambda case: case[0])
def test_scores_match_sklearn(case):
    _, labels, clusters = case
    assert normalized_mutual_info(labels, clusters) == pytest.approx(
        skm.normalized_mutual_info_score(labels, clusters), abs=1e-10
    )
    assert adjusted_mutual_info(labels, clusters) == pytest.approx(
        skm.adjusted_mutual_info_score(labels, clusters), abs=1e-9
    )
    assert adjusted_rand_index(labels, clusters) == pytest.approx(
        skm.adjusted_rand_score(labels, clusters), abs=1e-10
    )
    table = contingency_table(labels, clusters)
    assert np.array_equal(table, skm.cluster.contingency_matrix(labels, clusters))


def test_torch_inputs_and_errors():
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    clusters = torch.tensor([5, 5, 9, 9, 9, 1])
    assert normalized_mutual_info(labels, clusters) == pytest.approx(
        skm.normalized_mutual_info_score(labels.numpy(), clusters.numpy()), abs=1e-12
    )
    with pytest.raises(ValueError, match="equal length"):
        normalized_mutual_info(labels, clusters[:3])
    with pytest.raises(ValueError, match="integers"):
        normalized_mutual_info(labels.float(), clusters)


def _brute_force_matching_accuracy(labels: np.ndarray, clusters: np.ndarray) -> float:
    classes, codes = np.unique(labels), np.unique(clusters)
    padded = list(codes) + [None] * max(len(classes) - len(codes), 0)
    best = 0
    for chosen in itertools.permutations(padded, len(classes)):
        best = max(
            best,
            sum(
                int(np.sum((labels == k) & (clusters == c)))
                for k, c in zip(classes, chosen)
                if c is not None
            ),
        )
    return best / labels.size


@pytest.mark.parametrize("num_codes", [2, 4, 6])
def test_hungarian_accuracy_matches_brute_force(num_codes):
    rng = np.random.default_rng(num_codes)
    labels = rng.integers(0, 4, 60)
    clusters = np.where(rng.random(60) < 0.5, labels % num_codes, rng.integers(0, num_codes, 60))
    assert hungarian_accuracy(labels, clusters) == pytest.approx(
        _brute_force_matching_accuracy(labels, clusters)
    )


def test_accuracies_on_known_assignments():
    labels = np.repeat(np.arange(4), 5)
    assert hungarian_accuracy(labels, labels + 10) == 1.0
    singletons = np.arange(20)
    assert hungarian_accuracy(labels, singletons) == pytest.approx(4 / 20)
    assert many_to_one_accuracy(labels, singletons) == 1.0
    merged = labels // 2  # two classes per cluster
    assert many_to_one_accuracy(labels, merged) == pytest.approx(0.5)


def test_report_on_random_codes_shows_inflated_nmi_but_zero_ami():
    """16384 label-independent codes over 10,000 balanced 10-class labels give
    NMI about 0.35 (its chance level) and AMI about 0."""
    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(10), 1000)
    codes = rng.integers(0, 16384, labels.size)
    report = clustering_report(labels, codes, chance_repeats=2)
    assert report["nmi"] == pytest.approx(0.353, abs=0.01)
    assert report["chance_nmi"] == pytest.approx(report["nmi"], abs=0.01)
    assert abs(report["ami"]) < 0.01
    assert report["codes_used"] == np.unique(codes).size
    assert report["usage_perplexity"] <= report["codes_used"]
    identity = clustering_report(labels, labels)
    assert identity["nmi"] == pytest.approx(1.0) and identity["hungarian_acc"] == 1.0
    assert identity["usage_perplexity"] == pytest.approx(10.0)
    assert chance_nmi(labels, labels, repeats=3) < 0.01


def test_centered_spectrum_matches_numpy_covariance():
    x = np.random.default_rng(2).normal(size=(200, 12)) @ np.diag(np.linspace(0.1, 3.0, 12))
    expected = np.sort(np.linalg.eigvalsh(np.cov(x.T)))[::-1]
    assert np.allclose(embedding_spectrum(x).numpy(), expected, atol=1e-10)


def test_released_spectrum_pads_and_rescales():
    x = torch.randn(100, 6) * 5 + 3
    spectrum = embedding_spectrum(x, mode="released", pad_to=16)
    assert spectrum.shape == (16,)
    assert torch.all(spectrum[6:] == 0)
    scaled = (x.double() - x.min()) / (x.max() - x.min())
    expected = torch.linalg.eigvalsh(scaled.T @ scaled / 100).flip(0)
    assert torch.allclose(spectrum[:6], expected, atol=1e-12)
    with pytest.raises(ValueError, match="mode"):
        embedding_spectrum(x, mode="other")


def test_dimensional_collapse_report():
    rng = np.random.default_rng(3)
    isotropic = rng.normal(size=(4000, 8))
    report = dimensional_collapse_report(isotropic)
    assert report["effective_rank"] == pytest.approx(8.0, rel=0.02)
    assert report["significant_dims"] == 8
    corr = np.corrcoef(isotropic.T)
    assert report["mean_abs_offdiag_corr"] == pytest.approx(
        np.abs(corr[~np.eye(8, dtype=bool)]).mean(), abs=1e-10
    )
    collapsed = rng.normal(size=(500, 2)) @ rng.normal(size=(2, 8))
    report = dimensional_collapse_report(collapsed)
    assert report["significant_dims"] == 2
    assert report["effective_rank"] <= 2.0 + 1e-6
    # one dimension that varies (corrcoef of one variable is a scalar), the rest constant
    line = np.concatenate([rng.normal(size=(50, 1)), np.ones((50, 3))], axis=1)
    report = dimensional_collapse_report(line)
    assert report["significant_dims"] == 1
    assert report["mean_abs_offdiag_corr"] == 0.0
