"""Closed-form-head and graph-VICReg losses against independent float64 (numpy) references."""

import numpy as np
import pytest
import torch

from solo_diet.core.losses import (
    closed_form_head_loss,
    graph_vicreg_loss,
    label_graph,
    label_onehot,
)


def numpy_vicreg(z1, z2, sim=25.0, var=25.0, cov=1.0):
    """VICReg (Bardes et al.) written out in numpy: MSE + std hinge + off-diagonal covariance / D,
    per view."""
    z1, z2 = np.asarray(z1, dtype=np.float64), np.asarray(z2, dtype=np.float64)
    dim = z1.shape[1]
    invariance = np.mean((z1 - z2) ** 2)
    variance = sum(
        np.mean(np.maximum(0.0, 1.0 - np.sqrt(z.var(axis=0, ddof=1) + 1e-4))) for z in (z1, z2)
    )
    covariance = 0.0
    for z in (z1, z2):
        c = np.cov(z, rowvar=False)
        covariance += (np.sum(c**2) - np.sum(np.diag(c) ** 2)) / dim
    return sim * invariance + var * variance + cov * covariance


def random_views(batch, dim, seed, num_views=2):
    generator = torch.Generator().manual_seed(seed)
    return [
        0.7 * torch.randn(batch, dim, generator=generator, dtype=torch.float64)
        for _ in range(num_views)
    ]


@pytest.mark.parametrize("label_norm_power", [0.0, 0.5, 1.0])
def test_index_graph_of_two_views_is_standard_vicreg(label_norm_power):
    z1, z2 = random_views(9, 6, seed=0)
    graph = label_graph(torch.arange(9).repeat(2), label_norm_power)
    ours = graph_vicreg_loss(
        [z1, z2], graph, sim_loss_weight=3.0, var_loss_weight=5.0, cov_loss_weight=2.0
    )
    assert float(ours) == pytest.approx(numpy_vicreg(z1, z2, 3.0, 5.0, 2.0), rel=1e-12)


def test_class_graph_weights_pairs_and_spread_by_class_size():
    """Imbalanced classes, one view: p = 0 weights a sample by n_c (pairs and variance), p = 1
    uniformly."""
    labels = np.array([0, 0, 0, 0, 0, 1, 1, 2, 2, 2])
    (z,) = random_views(10, 3, seed=1, num_views=1)
    zn = z.numpy()
    sizes = np.bincount(labels)[labels].astype(float)
    for power in (0.0, 1.0):
        pair_weights = (labels[:, None] == labels[None, :]) / sizes[:, None] ** power
        np.fill_diagonal(pair_weights, 0.0)
        squared = ((zn[:, None, :] - zn[None, :, :]) ** 2).sum(axis=2)
        invariance = (pair_weights * squared).sum() / (3 * pair_weights.sum())
        cov = np.cov(zn, rowvar=False, aweights=sizes ** (1 - power))
        variance = np.mean(np.maximum(0.0, 1.0 - np.sqrt(np.diag(cov) + 1e-4)))
        covariance = (np.sum(cov**2) - np.sum(np.diag(cov) ** 2)) / 3
        ours = graph_vicreg_loss([z], label_graph(torch.from_numpy(labels), power))
        assert float(ours) == pytest.approx(25 * invariance + 25 * variance + covariance, rel=1e-12)


def test_unlabelled_rows_leave_the_regularisers():
    (z,) = random_views(8, 4, seed=2, num_views=1)
    labels = torch.tensor([0, 0, 1, 1, -1, -1, -1, -1])
    with_unlabelled = graph_vicreg_loss([z], label_graph(labels))
    labelled_only = graph_vicreg_loss([z[:4]], label_graph(labels[:4]))
    assert float(with_unlabelled) == pytest.approx(float(labelled_only), rel=1e-12)


def test_no_positive_pair_gives_zero_invariance():
    (z,) = random_views(6, 3, seed=3, num_views=1)
    without = graph_vicreg_loss(
        [z],
        label_graph(torch.arange(6)),
        sim_loss_weight=1.0,
        var_loss_weight=0.0,
        cov_loss_weight=0.0,
    )
    assert float(without) == 0.0


def test_graph_shape_is_checked():
    z1, z2 = random_views(4, 3, seed=4)
    with pytest.raises(ValueError, match=r"\(8, 8\)"):
        graph_vicreg_loss([z1, z2], torch.eye(4))


def test_closed_form_loss_float32_matches_float64():
    z1, z2 = random_views(32, 16, seed=5)
    ids = torch.arange(32).repeat(2)
    z = torch.cat([z1, z2])
    exact = closed_form_head_loss(z, ids, 0.1)
    single = closed_form_head_loss(z.float(), ids, 0.1)
    assert single.dtype == torch.float32
    assert float(single) == pytest.approx(float(exact), rel=1e-4)


def test_closed_form_loss_rewards_invariance_with_index_labels():
    """Two views of an index: equal views fit the index labels better than independent views."""
    z1, z2 = random_views(16, 8, seed=6)
    ids = torch.arange(16).repeat(2)
    invariant = closed_form_head_loss(torch.cat([z1, z1]), ids, 0.01)
    independent = closed_form_head_loss(torch.cat([z1, z2]), ids, 0.01)
    assert float(invariant) < float(independent)


def test_label_onehot_normalisation_and_unlabelled_rows():
    y = label_onehot(torch.tensor([4, 4, 9, -1, 4]), label_norm_power=1.0)
    expected = np.array([[1, 0], [1, 0], [0, 1], [0, 0], [1, 0]]) / np.sqrt([3.0, 1.0])
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-15)


@pytest.mark.parametrize(
    "kwargs, match", [({"lam": -1.0}, "lambda"), ({"lam": 0.1, "side": "rows"}, "side")]
)
def test_closed_form_loss_refuses_bad_arguments(kwargs, match):
    z1, _ = random_views(4, 3, seed=7)
    with pytest.raises(ValueError, match=match):
        closed_form_head_loss(z1, torch.arange(4), **kwargs)


@pytest.mark.parametrize("power", [0.0, 1.0, 0.5])
@pytest.mark.parametrize("side", ["features", "samples"])
def test_sync_free_targets_give_the_one_hot_loss_and_graph(power, side):
    """``label_targets`` (N x N, no ``unique``) and ``label_onehot`` (N x M) have the same
    ``Y Y^T``, so Lemma 1's loss and the label graph are the one-hot ones, for repeated, single
    and unlabelled (-1) ids."""
    from solo_diet.core.losses import label_targets
    from solo_diet.core.losses.birth import closed_form_head_loss_from_targets

    ids = torch.tensor([7, 3, 7, -1, 3, 3, 9, 7, -1, 2])
    onehot, targets = label_onehot(ids, power), label_targets(ids, power)
    assert targets.shape == (10, 10)
    assert torch.allclose(targets @ targets.T, onehot @ onehot.T, rtol=0, atol=1e-15)
    assert torch.allclose(label_graph(ids, power), onehot @ onehot.T, rtol=0, atol=1e-15)
    z = torch.randn(10, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for lam in (0.0, 0.3):
        theirs = closed_form_head_loss_from_targets(z, onehot, lam, side=side)
        ours = closed_form_head_loss(z, ids, lam, side=side, label_norm_power=power)
        assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12), (lam, ours, theirs)
