"""A linear probe that cannot be under-trained: multinomial logistic regression on frozen features,
fitted to convergence by full-batch L-BFGS, its L2 strength chosen on a part of the training set
held out from the fit: CLIP's linear-probe protocol (CLIP paper, Appendix A.3; docs/compare.md,
``logreg_acc1``). The objective equals scikit-learn's ``LogisticRegression(C=1 / (l2 * n))`` on the
same standardised features. Deterministic (no seed enters); torch only, CPU or CUDA, float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

STEPS_PER_DECADE = 4
# the strengths swept, weakest first: 1e-8 to 10, STEPS_PER_DECADE per decade
L2_GRID = tuple(10 ** (k / STEPS_PER_DECADE) for k in range(-8 * STEPS_PER_DECADE, 5))
HELD_OUT_EVERY = 5  # every 5th sample of each class (in its order of the set) is held out
MAX_ITERATIONS = 1000
GRADIENT_TOLERANCE = 1e-9  # on the largest gradient entry, float64
CHANGE_TOLERANCE = 1e-15  # a loss change at float64 rounding: nothing left to gain
HISTORY = 20
# what makes the probe's number: a comparison's evaluation fingerprint holds it
PROTOCOL = {
    "l2_grid": L2_GRID,
    "warm_start": "strong to weak",
    "held_out_every": HELD_OUT_EVERY,
    "max_iterations": MAX_ITERATIONS,
    "gradient_tolerance": GRADIENT_TOLERANCE,
    "change_tolerance": CHANGE_TOLERANCE,
    "history": HISTORY,
}


@dataclass(frozen=True)
class LinearClassifier:
    """``logits = x @ weight + bias`` on raw (not standardised) features."""

    weight: torch.Tensor  # (features, classes)
    bias: torch.Tensor  # (classes,)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.weight) @ self.weight + self.bias


@dataclass(frozen=True)
class Convergence:
    """How one L-BFGS fit ended: its iterations, the largest absolute entry of the objective's
    gradient at the fit (float64, standardised features: what ``GRADIENT_TOLERANCE`` bounds) and
    whether it stopped at ``MAX_ITERATIONS`` (or its evaluation limit) rather than a tolerance."""

    iterations: int
    grad_norm: float
    hit_limit: bool


@dataclass(frozen=True)
class ProbeResult:
    """The probe's val top-1 and class-balanced top-1 (%), the chosen L2 strength, whether it is
    an end of the grid, the held-out top-1 (%) and the convergence of each strength's fit, and
    the convergence of the refit that gives the val scores."""

    acc1: float
    balanced_acc1: float
    l2: float
    edge: bool
    held_out_acc1: dict[float, float]
    sweep: dict[float, Convergence]
    convergence: Convergence


def fit_logistic_regression(
    x: torch.Tensor,
    y: torch.Tensor,
    l2: float,
    classes: int,
    start: Optional[LinearClassifier] = None,
) -> tuple[LinearClassifier, Convergence]:
    """The minimiser of the mean cross-entropy + ``l2 / 2 * ||W||^2`` on ``x`` standardised with
    its own mean and std, by L-BFGS with a strong Wolfe line search from ``start`` (a classifier of
    raw features; zeros without one); returned with the standardisation folded in, so it takes
    raw features."""
    x = x.to(torch.float64)
    mean, std = x.mean(0), x.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))  # a constant feature stays 0
    z = (x - mean) / std
    y = y.to(device=x.device, dtype=torch.long)
    if start is None:
        weight, bias = x.new_zeros(x.shape[1], classes), x.new_zeros(classes)
    else:  # the same logits on the standardised features
        weight, bias = start.weight * std[:, None], start.bias + mean @ start.weight
    weight, bias = weight.clone().requires_grad_(True), bias.clone().requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [weight, bias],
        lr=1.0,
        max_iter=MAX_ITERATIONS,
        max_eval=2 * MAX_ITERATIONS,
        tolerance_grad=GRADIENT_TOLERANCE,
        tolerance_change=CHANGE_TOLERANCE,
        history_size=HISTORY,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(z @ weight + bias, y)
        loss = loss + 0.5 * l2 * weight.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
        closure()  # the gradient at the fit (the line search's last evaluation may lie elsewhere)
    state = optimizer.state[weight]
    iterations = int(state.get("n_iter", 0))
    hit_limit = iterations >= MAX_ITERATIONS or state.get("func_evals", 0) >= 2 * MAX_ITERATIONS
    grad_norm = float(max(weight.grad.abs().max(), bias.grad.abs().max()))
    weight, bias = weight.detach(), bias.detach()
    scaled = weight / std[:, None]
    fitted = LinearClassifier(scaled, bias - mean @ scaled)
    return fitted, Convergence(iterations, grad_norm, hit_limit)


def held_out_mask(y: torch.Tensor) -> torch.Tensor:
    """True for every ``HELD_OUT_EVERY``-th sample of each class, counted in the set's order from
    its first (a class of fewer than two samples keeps all of them in the fit)."""
    y = y.cpu().long()
    held = torch.zeros(len(y), dtype=torch.bool)
    for label in torch.unique(y):
        members = (y == label).nonzero().flatten()
        if len(members) >= 2:
            held[members[::HELD_OUT_EVERY]] = True
    return held


def top1(classifier: LinearClassifier, x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy (%) of ``classifier`` on ``(x, y)``."""
    predicted = classifier.logits(x).argmax(1).cpu()
    return 100.0 * float((predicted == y.cpu()).double().mean())


def balanced_top1(classifier: LinearClassifier, x: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy (%) of each class of ``y``, averaged over them (its mean recall)."""
    labels = y.cpu().long()
    right = (classifier.logits(x).argmax(1).cpu() == labels).double()
    counts = torch.bincount(labels)
    present = counts > 0
    recall = torch.bincount(labels, weights=right)[present] / counts[present]
    return 100.0 * float(recall.mean())


def logistic_regression_probe(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    val_x: torch.Tensor,
    val_y: torch.Tensor,
    l2_grid: tuple[float, ...] = L2_GRID,
) -> ProbeResult:
    """Fit on the training set but its held-out part (:func:`held_out_mask`) at each strength of
    ``l2_grid``, from the strongest to the weakest, each fit started from the previous one's
    solution; keep the strength of the best held-out top-1 (ties: the stronger), refit it on the
    whole training set from its held-out fit and score that on val. The val set plays no part in
    the choice."""
    classes = int(max(train_y.max(), val_y.max())) + 1
    held = held_out_mask(train_y).to(train_x.device)
    if not held.any():
        raise ValueError("logistic_regression_probe needs a class with two training samples.")
    fit_x, fit_y, held_x, held_y = train_x[~held], train_y[~held], train_x[held], train_y[held]
    fits: dict[float, tuple[LinearClassifier, Convergence]] = {}
    previous = None
    for l2 in sorted(l2_grid, reverse=True):
        fits[l2] = fit_logistic_regression(fit_x, fit_y, l2, classes, start=previous)
        previous = fits[l2][0]
    held_out = {l2: top1(fits[l2][0], held_x, held_y) for l2 in l2_grid}
    chosen = max(l2_grid, key=lambda l2: (held_out[l2], l2))
    classifier, convergence = fit_logistic_regression(
        train_x, train_y, chosen, classes, start=fits[chosen][0]
    )
    return ProbeResult(
        acc1=top1(classifier, val_x, val_y),
        balanced_acc1=balanced_top1(classifier, val_x, val_y),
        l2=chosen,
        edge=chosen in (min(l2_grid), max(l2_grid)),
        held_out_acc1=held_out,
        sweep={l2: fits[l2][1] for l2 in l2_grid},
        convergence=convergence,
    )
