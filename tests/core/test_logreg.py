"""The converged logistic-regression probe: it reaches scikit-learn's optimum of the same objective,
its gradient vanishes there in float64, no seed changes it, and its L2 strength is chosen on the
training set's held-out part only."""

import numpy as np
import pytest
import torch

from solo_diet.metrics.logreg import (
    fit_logistic_regression,
    held_out_mask,
    logistic_regression_probe,
)

sk_linear = pytest.importorskip(
    "sklearn.linear_model", reason="scikit-learn is the reference implementation"
)

CLASSES = 4
GRID = (1e-4, 1e-2, 1.0)  # a shorter sweep than the probe's own: the weakest fits are the slow ones


def _blobs(n: int, spread: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``CLASSES`` Gaussian blobs in 12 dimensions, offset and scaled unevenly (standardisation
    matters), float32 like extracted features."""
    generator = torch.Generator().manual_seed(seed)
    centers = 3 * torch.randn(CLASSES, 12, generator=generator, dtype=torch.float64)
    labels = torch.arange(n) % CLASSES
    x = centers[labels] + spread * torch.randn(n, 12, generator=generator, dtype=torch.float64)
    scale = torch.logspace(-1, 1, 12, dtype=torch.float64)
    return (x * scale + 5).float(), labels


def _standardised(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return (x - x.mean(0)) / x.std(0, unbiased=False)


def _objective(z, y, weight, bias, l2) -> torch.Tensor:
    """Mean cross-entropy + l2 / 2 ||W||^2, written here again as the test's reference."""
    log_p = torch.log_softmax(z @ weight + bias, dim=1)
    return -log_p[torch.arange(len(y)), y].mean() + 0.5 * l2 * (weight**2).sum()


def _on_standardised(x: torch.Tensor, fitted) -> tuple[torch.Tensor, torch.Tensor]:
    """The fitted weights of the standardised features (the probe folds standardisation in)."""
    x = x.double()
    mean, std = x.mean(0), x.std(0, unbiased=False)
    return fitted.weight * std[:, None], fitted.bias + mean @ fitted.weight


@pytest.mark.parametrize("spread, l2", [(0.5, 1e-3), (4.0, 1e-2), (4.0, 1e-4)])
def test_fit_reaches_the_optimum_of_sklearn_and_its_gradient_vanishes(spread, l2):
    """Separable (spread 0.5) and overlapping blobs: the same objective as scikit-learn's
    LogisticRegression(C = 1 / (l2 n)) on the standardised features, no higher than its optimum,
    the same predictions, and a float64 gradient of the objective at the fit near zero."""
    x, y = _blobs(240, spread)
    fitted = fit_logistic_regression(x, y, l2, CLASSES)
    z = _standardised(x)
    weight, bias = (t.clone().requires_grad_(True) for t in _on_standardised(x, fitted))
    objective = _objective(z, y, weight, bias, l2)
    objective.backward()
    ours = objective.detach()
    gradient = torch.cat([weight.grad.flatten(), bias.grad])
    assert float(gradient.abs().max()) < 1e-7

    reference = sk_linear.LogisticRegression(C=1 / (l2 * len(y)), tol=1e-12, max_iter=100_000)
    reference.fit(z.numpy(), y.numpy())
    theirs = _objective(
        z, y, torch.from_numpy(reference.coef_.T), torch.from_numpy(reference.intercept_), l2
    )
    assert float(ours) <= float(theirs) + 1e-12
    assert float(ours) == pytest.approx(float(theirs), rel=1e-8)
    predicted = fitted.logits(x).argmax(1).numpy()
    np.testing.assert_array_equal(predicted, reference.predict(z.numpy()))
    probabilities = torch.softmax(fitted.logits(x), 1).numpy()
    np.testing.assert_allclose(probabilities, reference.predict_proba(z.numpy()), atol=1e-6)
    if spread < 1:
        assert (predicted == y.numpy()).all()  # separable: every training point right


def test_the_probe_is_the_same_whatever_the_seed():
    x, y = _blobs(300, 4.0)
    runs = []
    for seed in (0, 123):
        torch.manual_seed(seed)
        runs.append(logistic_regression_probe(x[:200], y[:200], x[200:], y[200:], GRID))
    assert runs[0] == runs[1]
    torch.manual_seed(7)
    first = fit_logistic_regression(x, y, 1e-3, CLASSES)
    torch.manual_seed(8)
    second = fit_logistic_regression(x, y, 1e-3, CLASSES)
    assert torch.equal(first.weight, second.weight) and torch.equal(first.bias, second.bias)


def test_held_out_part_is_every_fifth_sample_of_each_class():
    y = torch.tensor([0] * 10 + [1] * 6 + [2] * 1 + [0] * 2)
    held = held_out_mask(y)
    # class 0's members 0, 5, 10 (index 17), class 1's 0, 5; class 2's one sample stays in the fit
    assert held.nonzero().flatten().tolist() == [0, 5, 10, 15, 17]


def test_l2_is_chosen_on_the_training_sets_held_out_part_only():
    """Val plays no part in the choice (other val data, the same strength and held-out scores);
    the held-out training images do (relabelled, the scores change); the choice is the best
    held-out score, and the result is the refit on the whole training set scored on val."""
    x, y = _blobs(300, 5.0)
    train_x, train_y, val_x, val_y = x[:200], y[:200], x[200:], y[200:]
    probe = logistic_regression_probe(train_x, train_y, val_x, val_y, GRID)
    assert set(probe.held_out_acc1) == set(GRID)
    best = max(probe.held_out_acc1.values())
    assert probe.l2 == max(l2 for l2, acc in probe.held_out_acc1.items() if acc == best)

    other_val = logistic_regression_probe(train_x, train_y, -val_x, (val_y + 1) % CLASSES, GRID)
    assert (other_val.l2, other_val.held_out_acc1) == (probe.l2, probe.held_out_acc1)

    relabelled = train_y.clone()
    held = held_out_mask(train_y)
    relabelled[held] = (relabelled[held] + 1) % CLASSES
    changed = logistic_regression_probe(train_x, relabelled, val_x, val_y, GRID)
    assert changed.held_out_acc1 != probe.held_out_acc1

    refit = fit_logistic_regression(train_x, train_y, probe.l2, CLASSES)
    val_top1 = 100.0 * float((refit.logits(val_x).argmax(1) == val_y).double().mean())
    assert probe.acc1 == val_top1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_and_cpu_fits_agree():
    x, y = _blobs(300, 4.0)
    split = (x[:200], y[:200], x[200:], y[200:])
    cpu = logistic_regression_probe(*split)
    cuda = logistic_regression_probe(*(t.cuda() for t in split))
    assert cuda.held_out_acc1 == cpu.held_out_acc1
    assert (cuda.l2, cuda.acc1) == (cpu.l2, cpu.acc1)
