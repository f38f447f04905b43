"""The exact identities of the Birth-of-SSL paper on random float64 inputs (checks T1-T14).

Lemma, theorem and equation numbers are that paper's. Rows are samples. References are written
independently of ``solo_diet.core.losses.birth``: explicit ridge regressions, SVDs, pair sums,
eigen-decompositions.
"""

import itertools

import pytest
import torch
import torch.nn.functional as F

from solo_diet.core.losses import (
    closed_form_head_loss,
    closed_form_head_loss_from_targets,
    label_graph,
)

RTOL = 1e-10


@pytest.fixture(autouse=True)
def float64_by_default():
    """Every tensor of these tests is float64; the default is restored for the other test
    modules."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def close(a, b, rtol=RTOL):
    a, b = float(a), float(b)
    return abs(a - b) <= rtol * max(1.0, abs(b))


def centering(n):
    return torch.eye(n) - torch.full((n, n), 1.0 / n)


def random_labels(n, c, generator):
    labels = torch.randint(0, c, (n,), generator=generator)
    labels[:c] = torch.arange(c)  # every class present
    return labels


def direct_ridge(z, y, lam, bias=True):
    """``min_{W,b} (1/N)||z W^T + 1 b^T - y||^2 + lam ||W||^2`` by the normal equations (or lstsq at
    0)."""
    n, k = z.shape
    design = torch.cat([z, torch.ones(n, 1)], dim=1) if bias else z
    if lam == 0:
        theta = torch.linalg.lstsq(design, y, driver="gelsd").solution
    else:
        penalty = torch.diag(torch.tensor([lam] * k + ([0.0] if bias else [])))
        theta = torch.linalg.solve(design.T @ design / n + penalty, design.T @ y / n)
    weights = theta[:k]
    return (design @ theta - y).pow(2).sum() / n + lam * weights.pow(2).sum()


def svd_form(z, y, lam):
    """Eq. 2: ``(1/N)||Hy||^2 - (1/N) Tr(V^T G V D)``, ``Z_c = U S V^T`` (centered),
    ``D = s^2/(s^2 + lam N)``."""
    n = z.shape[0]
    h = centering(n)
    _, s, vh = torch.linalg.svd((h @ z).T, full_matrices=False)  # (K, N) = U S V^T, V^T = vh
    keep = s > 1e-9 * s.max()
    v, s = vh[keep].T, s[keep]
    d = torch.ones_like(s) if lam == 0 else s**2 / (s**2 + lam * n)
    g = y @ y.T
    return (h @ y).pow(2).sum() / n - torch.trace(v.T @ g @ v @ torch.diag(d)) / n


# --- T1-T3: Lemma 1 ---------------------------------------------------------------------------


@pytest.mark.parametrize("n, k", list(itertools.product([8, 32, 100], [3, 16, 64])))
def test_t1_lemma1_equals_direct_ridge_regression_with_bias(n, k):
    generator = torch.Generator().manual_seed(n * 100 + k)
    for lam, c in itertools.product([0.0, 1e-3, 0.1, 1.0], [2, 5]):
        z = torch.randn(n, k, generator=generator)
        y = F.one_hot(random_labels(n, c, generator), c).double()
        direct = direct_ridge(z, y, lam)
        assert close(svd_form(z, y, lam), direct, 1e-9), (lam, c)
        assert close(closed_form_head_loss_from_targets(z, y, lam), direct, 1e-9), (lam, c)


@pytest.mark.parametrize("n, k", [(20, 5), (12, 30), (16, 16)])
def test_t2_svd_free_forms_agree_with_svd_form(n, k):
    generator = torch.Generator().manual_seed(k)
    z = torch.randn(n, k, generator=generator)
    ids = random_labels(n, 4, generator)
    y = F.one_hot(ids, 4).double()
    reference = svd_form(z, y, 0.05)
    for side in ("features", "samples", "auto"):
        assert close(closed_form_head_loss_from_targets(z, y, 0.05, side=side), reference)
        assert close(closed_form_head_loss(z, ids, 0.05, side=side), reference)


@pytest.mark.parametrize("n, k", [(20, 5), (10, 25)])
def test_t3_no_bias_variant(n, k):
    generator = torch.Generator().manual_seed(3)
    z = torch.randn(n, k, generator=generator) + 2.0  # off-center: the bias matters
    y = F.one_hot(random_labels(n, 3, generator), 3).double()
    for lam in (1e-3, 0.5):
        no_bias = direct_ridge(z, y, lam, bias=False)
        assert close(closed_form_head_loss_from_targets(z, y, lam, center=False), no_bias)
        with_bias = closed_form_head_loss_from_targets(z, y, lam, center=True)
        assert abs(float(with_bias - no_bias)) > 1e-2 * float(no_bias)


# --- T4: Theorem 2 ----------------------------------------------------------------------------


def centered_orthonormal(n, r, generator):
    """``(n, r)`` orthonormal columns orthogonal to the all-ones vector."""
    basis = centering(n) @ torch.randn(n, r, generator=generator)
    return torch.linalg.qr(basis).Q


def test_t4_theorem2_singular_value_gradient():
    n, k, lam = 24, 4, 0.3
    generator = torch.Generator().manual_seed(4)
    v = centered_orthonormal(n, k, generator)
    u = torch.linalg.qr(torch.randn(k, k, generator=generator)).Q
    ids = random_labels(n, 3, generator)
    y = F.one_hot(ids, 3).double()
    sigma = torch.tensor([0.5, 1.0, 2.0, 4.0], requires_grad=True)

    loss = closed_form_head_loss(
        v @ torch.diag(sigma) @ u.T, ids, lam
    )  # Z_c = V S U^T, rows = samples
    (grad,) = torch.autograd.grad(loss, sigma)
    alignment = torch.diagonal(v.T @ (y @ y.T) @ v)
    expected = -alignment * 2 * sigma.detach() * lam / (sigma.detach() ** 2 + lam * n) ** 2
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-12)

    step = 1e-6
    for i in range(k):
        bump = torch.zeros(k)
        bump[i] = step
        plus = closed_form_head_loss(v @ torch.diag(sigma.detach() + bump) @ u.T, ids, lam)
        minus = closed_form_head_loss(v @ torch.diag(sigma.detach() - bump) @ u.T, ids, lam)
        assert abs(float((plus - minus) / (2 * step)) - float(expected[i])) < 1e-8


def test_t4_gradient_magnitude_peaks_at_lambda_n_over_three():
    lam, n = 0.2, 30
    sigma = torch.linspace(1e-3, 10.0, 200001)
    magnitude = 2 * sigma * lam / (sigma**2 + lam * n) ** 2
    peak = sigma[magnitude.argmax()]
    assert abs(float(peak**2) - lam * n / 3) < 1e-3
    assert magnitude[-1] < magnitude.max()  # non-monotone: rises, then decays like 2 lam / sigma^3


# --- T5-T7: Corollary 1, the identity (★) and imbalance ---------------------------------------


def star_sides(z, g):
    """LHS ``-(1/N) Tr(HGH Z Z^T)`` and RHS
    ``(1/2N) sum G_ij ||z_i - z_j||^2 - (1/N) sum d_i ||z_i - zbar||^2``."""
    n = z.shape[0]
    h = centering(n)
    lhs = -torch.trace(h @ g @ h @ z @ z.T) / n
    pair = sum(g[i, j] * (z[i] - z[j]).pow(2).sum() for i in range(n) for j in range(n))
    spread = (g.sum(dim=1) * (z - z.mean(dim=0)).pow(2).sum(dim=1)).sum()
    return lhs, pair / (2 * n) - spread / n


@pytest.mark.parametrize("graph_kind", ["regular", "imbalanced", "random_symmetric"])
def test_t5_star_identity(graph_kind):
    generator = torch.Generator().manual_seed(5)
    n, k = 18, 4
    z = torch.randn(n, k, generator=generator)
    if graph_kind == "regular":
        g = label_graph(torch.arange(n) // 3)
    elif graph_kind == "imbalanced":
        g = label_graph(torch.tensor([0] * 10 + [1] * 5 + [2] * 3))
    else:
        a = torch.rand(n, n, generator=generator)
        g = a + a.T
    lhs, rhs = star_sides(z, g)
    assert close(lhs, rhs)


def test_t6_two_view_solo_convention():
    generator = torch.Generator().manual_seed(6)
    b, k = 7, 5
    z1, z2 = torch.randn(b, k, generator=generator), torch.randn(b, k, generator=generator)
    z = torch.cat([z1, z2])
    g = label_graph(torch.arange(b).repeat(2))
    h = centering(2 * b)
    lhs = -torch.trace(h @ g @ h @ z @ z.T) / (2 * b)
    rhs = (k / 2) * F.mse_loss(z1, z2) - 2 * z.var(dim=0, unbiased=False).sum()
    assert close(lhs, rhs)


def test_t7_imbalance_weights_between_class_scatter():
    generator = torch.Generator().manual_seed(7)
    labels = torch.tensor([0] * 9 + [1] * 4 + [2] * 2)
    n = labels.shape[0]
    z = torch.randn(n, 3, generator=generator)
    h = centering(n)
    zbar = z.mean(dim=0)
    sizes = torch.bincount(labels).double()
    scatter = [(z[labels == c].mean(dim=0) - zbar).pow(2).sum() for c in range(3)]

    raw = torch.trace(h @ label_graph(labels) @ h @ z @ z.T)
    assert close(raw, sum(sizes[c] ** 2 * scatter[c] for c in range(3)))

    normalised = label_graph(labels, label_norm_power=1.0)
    torch.testing.assert_close(normalised.sum(dim=1), torch.ones(n), rtol=0, atol=1e-12)
    lda = torch.trace(h @ normalised @ h @ z @ z.T)
    assert close(lda, sum(sizes[c] * scatter[c] for c in range(3)))


# --- T8: W-MSE is affine in the lambda -> 0 closed-form loss ----------------------------------


def views_batch(images, views, k, seed):
    """``images * views`` random rows (view-major) and their datum-index ids."""
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(images * views, k, generator=generator),
        torch.arange(images).repeat(views),
        generator,
    )


def test_t8_wmse_is_affine_in_the_lambda0_loss():
    images, views, k = 10, 3, 4
    n = images * views
    z, ids, _ = views_batch(images, views, k, seed=8)
    centered = z - z.mean(dim=0)
    eigenvalues, eigenvectors = torch.linalg.eigh(centered.T @ centered / n)
    whitened = (
        centered @ eigenvectors @ torch.diag(eigenvalues.rsqrt()) @ eigenvectors.T
    )  # ZCA, pooled
    torch.testing.assert_close(whitened.T @ whitened / n, torch.eye(k))

    g = label_graph(ids)
    pair = ((whitened[:, None, :] - whitened[None, :, :]).pow(2).sum(dim=2) * g).sum() / n
    h = centering(n)
    expected = (
        2 * views * k - 2 * torch.trace(h @ g @ h) + 2 * n * closed_form_head_loss(z, ids, 0.0)
    )
    assert close(pair, expected)


# --- T9-T10: label smoothing, linearity ---------------------------------------------------------


def test_t9_label_smoothing_scales_the_loss():
    generator = torch.Generator().manual_seed(9)
    n, c, eps = 20, 4, 0.3
    z = torch.randn(n, 6, generator=generator)
    y = F.one_hot(random_labels(n, c, generator), c).double()
    smoothed = (1 - eps) * y + eps / c
    assert close(
        closed_form_head_loss_from_targets(z, smoothed, 0.1),
        (1 - eps) ** 2 * closed_form_head_loss_from_targets(z, y, 0.1),
    )


def test_t10_stacked_labels_add_losses():
    generator = torch.Generator().manual_seed(10)
    n, beta = 24, 0.7
    z = torch.randn(n, 5, generator=generator)
    y_index = F.one_hot(torch.arange(n) // 2, n // 2).double()
    y_class = F.one_hot(random_labels(n, 3, generator), 3).double()
    stacked = torch.cat([y_index, beta**0.5 * y_class], dim=1)
    total = closed_form_head_loss_from_targets(z, stacked, 0.05)
    parts = closed_form_head_loss_from_targets(
        z, y_index, 0.05
    ) + beta * closed_form_head_loss_from_targets(z, y_class, 0.05)
    assert close(total, parts)


# --- T11-T12: Appendix B, orthogonal (Procrustes) head ------------------------------------------


def procrustes(z, y):
    """``min_{W W^T = I_K} (1/P)||z W - y||^2`` attained by ``W* = U V^T`` (``z^T y = U S V^T``),
    and the paper's nuclear-norm and matrix-square-root forms."""
    p = z.shape[0]
    u, s, vh = torch.linalg.svd(z.T @ y, full_matrices=False)
    attained = (z @ (u @ vh) - y).pow(2).sum() / p
    g = y @ y.T
    nuclear = (z.pow(2).sum() + torch.trace(g) - 2 * s.sum()) / p
    eigenvalues = torch.linalg.eigvalsh(z.T @ g @ z).clamp_min(0)
    sqrtm = (z.pow(2).sum() + torch.trace(g) - 2 * eigenvalues.sqrt().sum()) / p
    return attained, nuclear, sqrtm


def test_t11_procrustes_head_valid_when_k_le_c():
    generator = torch.Generator().manual_seed(11)
    z = torch.randn(30, 4, generator=generator)
    y = F.one_hot(random_labels(30, 6, generator), 6).double()
    attained, nuclear, sqrtm = procrustes(z, y)
    assert close(attained, nuclear) and close(attained, sqrtm)
    for _ in range(50):  # no feasible head does better
        w = torch.linalg.qr(torch.randn(6, 4, generator=generator)).Q.T  # (K, C), W W^T = I
        assert (z @ w - y).pow(2).sum() / 30 >= attained - 1e-12


def test_t11_procrustes_formula_fails_when_k_gt_c():
    generator = torch.Generator().manual_seed(11)
    z = torch.randn(30, 6, generator=generator)
    y = F.one_hot(random_labels(30, 4, generator), 4).double()
    attained, nuclear, _ = procrustes(z, y)
    assert not close(attained, nuclear, 1e-3)


def test_t12_procrustes_with_the_ssl_graph():
    images, views, k = 9, 3, 4
    p = images * views
    z, ids, generator = views_batch(images, views, k, seed=12)
    y = F.one_hot(ids, images).double()
    attained, _, _ = procrustes(z, y)
    means = torch.stack([z[ids == n].mean(dim=0) for n in range(images)])
    invariance = (z - means[ids]).pow(2).sum()
    whitening = views * (torch.linalg.svdvals(means) - 1).pow(2).sum()
    assert close(p * attained, invariance + whitening + views * (images - k))

    single = torch.randn(images, k, generator=generator)  # one view per index: G = I
    attained, _, _ = procrustes(single, torch.eye(images))
    assert close(images * attained, (torch.linalg.svdvals(single) - 1).pow(2).sum() + images - k)


# --- T13: Proposition 1 -------------------------------------------------------------------------


def test_t13_index_labels_give_the_view_graph():
    images, views = 5, 3
    rows = torch.arange(images * views)
    y = (
        rows[:, None] // views == torch.arange(images)[None, :]
    ).double()  # Y_{n,j} = 1{floor(n/V) = j}
    block = torch.block_diag(*[torch.ones(views, views)] * images)
    torch.testing.assert_close(y @ y.T, block)
    torch.testing.assert_close(label_graph(rows // views), block)


def test_t13_one_view_per_index_is_spectrum_only():
    generator = torch.Generator().manual_seed(13)
    n, k, lam = 16, 5, 0.2
    ids = torch.arange(n)
    s = torch.tensor([3.0, 2.0, 1.0, 0.5, 0.1])
    u = torch.linalg.qr(torch.randn(k, k, generator=generator)).Q
    losses = []
    for _ in range(3):  # same singular values, different singular vectors
        v = centered_orthonormal(n, k, generator)
        losses.append(closed_form_head_loss(v @ torch.diag(s) @ u.T, ids, lam))
    expected = (n - 1) / n - (s**2 / (s**2 + lam * n)).sum() / n
    for loss in losses:
        assert close(loss, expected)


# --- T14: autograd through the closed form == autograd through the inner ridge solve -----------


@pytest.mark.parametrize("n, k", [(20, 6), (10, 24)])
def test_t14_gradient_matches_explicit_inner_solve(n, k):
    generator = torch.Generator().manual_seed(14)
    lam = 0.05
    ids = random_labels(n, 4, generator)
    y = F.one_hot(ids, 4).double()
    z = torch.randn(n, k, generator=generator, requires_grad=True)
    (closed,) = torch.autograd.grad(closed_form_head_loss(z, ids, lam), z)

    def supervised_loss(detach_head):
        centered_z = z - z.mean(dim=0)
        centered_y = y - y.mean(dim=0)
        weights = torch.linalg.solve(
            centered_z.T @ centered_z + lam * n * torch.eye(k), centered_z.T @ centered_y
        )
        bias = (y - z @ weights).mean(dim=0)
        if detach_head:
            weights, bias = weights.detach(), bias.detach()
        return (z @ weights + bias - y).pow(2).sum() / n + lam * weights.pow(2).sum()

    (through_solve,) = torch.autograd.grad(supervised_loss(False), z)
    (envelope,) = torch.autograd.grad(
        supervised_loss(True), z
    )  # Danskin: the head's own gradient is 0
    torch.testing.assert_close(closed, through_solve, rtol=1e-6, atol=1e-10)
    torch.testing.assert_close(closed, envelope, rtol=1e-6, atol=1e-10)
