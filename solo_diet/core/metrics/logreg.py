"""CLIP's linear probe (CLIP paper, Appendix A.3; docs/compare.md, ``logreg_acc1``): logistic
regression on frozen features by full-batch L-BFGS (scikit-learn's ``C = 1 / (l2 * n)``), every L2
strength fitted at once in lockstep, chosen on a held-out part of the training set; float64."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

STEPS_PER_DECADE = 4
# the strengths swept, weakest first: 1e-8 to 10, STEPS_PER_DECADE per decade
L2_GRID = tuple(10 ** (k / STEPS_PER_DECADE) for k in range(-8 * STEPS_PER_DECADE, 5))
HELD_OUT_EVERY = 5  # every 5th sample of each class (in its order of the set) is held out
MAX_ITERATIONS = 1000
GRADIENT_TOLERANCE = 1e-9  # on the largest gradient entry, float64
CHANGE_TOLERANCE = 1e-15  # a step of no parameter above it: nothing left to gain
HISTORY = 20
ARMIJO = 1e-4  # sufficient decrease of the backtracking line search
BACKTRACKS = 50  # halvings of the step before a fit counts as stopped at float64 precision
# logits held at once (strengths x samples x classes): fits are batched under it
BATCH_ELEMENTS = 2**25
# what makes the probe's number: a comparison's evaluation fingerprint holds it
PROTOCOL = {
    "l2_grid": L2_GRID,
    "start": "zeros, every strength at once",
    "line_search": "backtracking (Armijo 1e-4)",
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
    """How a fit ended: iterations, largest gradient entry, stopped by a limit (not a tolerance)."""

    iterations: int
    grad_norm: float
    hit_limit: bool


@dataclass(frozen=True)
class ProbeResult:
    """Val top-1 and balanced top-1 (%), the chosen L2 (``edge``: an end of the grid), the sweep."""

    acc1: float
    balanced_acc1: float
    l2: float
    edge: bool
    held_out_acc1: dict[float, float]
    sweep: dict[float, Convergence]
    convergence: Convergence


class _Objective:
    """Mean CE + ``l2 / 2 ||W||^2`` of parameter rows (weights, then biases) on features ``z``."""

    def __init__(self, z: torch.Tensor, y: torch.Tensor, classes: int):
        self.z, self.classes = z, classes
        self.onehot = torch.nn.functional.one_hot(y, classes).to(z)

    def __call__(self, theta: torch.Tensor, l2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The objective ``(k,)`` and its gradient ``(k, parameters)`` at each row of ``theta``."""
        features, k = self.z.shape[1], len(theta)
        weight = theta[:, : features * self.classes].view(k, features, self.classes)
        logits = torch.matmul(self.z, weight) + theta[:, None, features * self.classes :]
        log_p = torch.log_softmax(logits, 2)
        loss = -(log_p * self.onehot).sum(2).mean(1) + 0.5 * l2 * weight.square().sum((1, 2))
        residual = (log_p.exp() - self.onehot) / len(self.z)
        grad_w = torch.matmul(self.z.T, residual) + l2[:, None, None] * weight
        return loss, torch.cat([grad_w.flatten(1), residual.sum(1)], 1)


class _History:
    """Each row's last ``HISTORY`` pairs ``(s, y)`` in a ring (zeros: none), with s.y and y.y."""

    def __init__(self, rows: int, parameters: int, like: torch.Tensor):
        self.s = like.new_zeros(rows, HISTORY, parameters)
        self.y = torch.zeros_like(self.s)
        self.sy = like.new_zeros(rows, HISTORY, HISTORY)  # [i, j]: s_i . y_j
        self.yy = torch.zeros_like(self.sy)
        self.added = 0
        # row r: the slots from r on, wrapping round; at (added % HISTORY), oldest first
        ring = torch.arange(HISTORY, device=like.device)
        self.rotations = (ring[None] + ring[:, None]) % HISTORY

    def keep(self, rows: torch.Tensor) -> None:
        self.s, self.y, self.sy, self.yy = (t[rows] for t in (self.s, self.y, self.sy, self.yy))

    def add(self, s: torch.Tensor, y: torch.Tensor) -> None:
        slot = self.added % HISTORY
        self.s[:, slot], self.y[:, slot] = s, y
        products = torch.bmm(self.y, torch.stack([s, y], 2))  # y_i . s and y_i . y
        self.sy[:, slot] = products[..., 0]
        self.sy[:, :, slot] = torch.bmm(self.s, y[:, :, None])[..., 0]
        self.yy[:, slot] = self.yy[:, :, slot] = products[..., 1]
        self.added += 1

    def direction(self, grad: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """``-H grad``, H from ``scale * I`` and the pairs (compact L-BFGS paper, Theorem 2.2)."""
        gamma = scale[:, None, None]
        if self.added == 0:
            return -gamma[..., 0] * grad
        order = self.rotations[self.added % HISTORY]  # oldest first (unwritten slots: zeros)
        back = self.rotations[(HISTORY - self.added % HISTORY) % HISTORY]  # order's inverse
        g = grad[:, :, None]
        a, b = torch.bmm(self.s, g)[:, order], torch.bmm(self.y, g)[:, order]
        sy, yy = self.sy[:, order][:, :, order], self.yy[:, order][:, :, order]
        curvature = sy.diagonal(dim1=1, dim2=2)
        # a zero pair, with 1 on R's diagonal, is decoupled from the others and adds nothing
        r = sy.triu(1) + torch.diag_embed(torch.where(curvature != 0, curvature, 1))
        r_a = torch.linalg.solve_triangular(r, a, upper=True)
        inner = curvature[..., None] * r_a + gamma * (torch.bmm(yy, r_a) - b)
        top = torch.linalg.solve_triangular(r.transpose(1, 2), inner, upper=False)
        step = gamma * g + torch.bmm(self.s.transpose(1, 2), top[:, back])
        step -= gamma * torch.bmm(self.y.transpose(1, 2), r_a[:, back])
        return -step[..., 0]


def _lbfgs(objective: _Objective, theta: torch.Tensor, l2: torch.Tensor) -> list[Convergence]:
    """L-BFGS from each row of ``theta`` (in place), rows in lockstep until each one's own stop."""
    count = len(theta)
    results: list[Optional[Convergence]] = [None] * count
    rows = torch.arange(count, device=theta.device)  # the rows of theta still being fitted
    x, l2 = theta.clone(), l2.clone()
    loss, grad = objective(x, l2)
    history = _History(count, theta.shape[1], theta)
    stalled = torch.zeros(count, dtype=torch.bool, device=theta.device)
    scale = torch.ones_like(loss)  # the initial inverse Hessian's scale, per row
    iteration = 0
    while True:
        largest = grad.abs().amax(1)
        converged = (largest <= GRADIENT_TOLERANCE) | stalled
        limit = iteration == MAX_ITERATIONS
        done = converged | limit
        finished = done.nonzero().flatten()
        if len(finished):
            theta[rows[finished]] = x[finished]
            ended = (rows[finished], largest[finished], converged[finished])
            for row, grad_norm, by_tolerance in zip(*(t.tolist() for t in ended)):
                results[row] = Convergence(iteration, grad_norm, limit and not by_tolerance)
        if len(finished) == len(rows):
            return results  # type: ignore[return-value]
        if len(finished):
            keep = (~done).nonzero().flatten()
            rows, x, l2, loss, grad, scale = (t[keep] for t in (rows, x, l2, loss, grad, scale))
            history.keep(keep)
        # the initial inverse Hessian's scale; before any pair, that of a short gradient step
        initial = scale if history.added else 1 / grad.abs().sum(1).clamp(min=1)
        direction = history.direction(grad, initial)
        slope = (grad * direction).sum(1)
        uphill = slope >= 0  # rounding: fall back to the gradient
        direction = torch.where(uphill[:, None], -grad, direction)
        slope = torch.where(uphill, -grad.square().sum(1), slope)
        step, new_loss, new_grad = _backtrack(objective, x, l2, loss, direction, slope)
        moved = step[:, None] * direction
        change = new_grad - grad
        curvature = (change * moved).sum(1)
        # positive curvature, beyond rounding (relative: small late steps still count)
        useful = curvature > 1e-10 * moved.norm(dim=1) * change.norm(dim=1)
        history.add(moved * useful[:, None], change * useful[:, None])
        scale = torch.where(useful, curvature / change.square().sum(1).clamp(min=1e-300), scale)
        stalled = (step == 0) | (moved.abs().amax(1) <= CHANGE_TOLERANCE)
        accepted = step > 0
        x = torch.where(accepted[:, None], x + moved, x)
        loss = torch.where(accepted, new_loss, loss)
        grad = torch.where(accepted[:, None], new_grad, grad)
        iteration += 1


def _backtrack(objective, x, l2, loss, direction, slope):
    """Per row, the first step 1, 1/2, ... of sufficient decrease (0: none), with loss and grad."""
    step = torch.ones_like(loss)
    new_loss, new_grad = objective(x + direction, l2)
    for _ in range(BACKTRACKS):
        short = ~(new_loss <= loss + ARMIJO * step * slope)  # NaN counts as no decrease
        if not short.any():
            return step, new_loss, new_grad
        step = torch.where(short, step / 2, step)
        pending = short.nonzero().flatten()
        trial = x[pending] + step[pending, None] * direction[pending]
        new_loss[pending], new_grad[pending] = objective(trial, l2[pending])
    short = ~(new_loss <= loss + ARMIJO * step * slope)
    return torch.where(short, 0, step), new_loss, new_grad


def fit_logistic_regressions(
    x: torch.Tensor,
    y: torch.Tensor,
    l2s: Sequence[float],
    classes: int,
    start: Optional[LinearClassifier] = None,
) -> list[tuple[LinearClassifier, Convergence]]:
    """A fit on standardised ``x`` per ``l2`` of ``l2s``, all at once from ``start`` (else zeros),
    returned as classifiers of raw features."""
    x = x.to(torch.float64)
    mean, std = x.mean(0), x.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))  # a constant feature stays 0
    objective = _Objective((x - mean) / std, y.to(device=x.device, dtype=torch.long), classes)
    features = x.shape[1]
    theta = x.new_zeros(len(l2s), (features + 1) * classes)
    if start is not None:  # the same logits on the standardised features
        weight = start.weight.to(x) * std[:, None]
        theta[:] = torch.cat([weight.flatten(), start.bias.to(x) + mean @ start.weight.to(x)])
    strengths = torch.tensor(list(l2s), dtype=torch.float64, device=x.device)
    group = max(1, BATCH_ELEMENTS // (len(x) * classes))
    runs = []
    for first in range(0, len(l2s), group):
        part = slice(first, first + group)
        runs += _lbfgs(objective, theta[part], strengths[part])  # writes its fits into theta
    fitted = []
    for row, convergence in zip(theta, runs):
        weight = row[: features * classes].view(features, classes) / std[:, None]
        bias = row[features * classes :] - mean @ weight
        fitted.append((LinearClassifier(weight, bias), convergence))
    return fitted


def held_out_mask(y: torch.Tensor) -> torch.Tensor:
    """Every ``HELD_OUT_EVERY``-th sample of each class of two or more, from its first."""
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
    """Choose the L2 of the best held-out top-1 (ties: the stronger), refit it on all of train from
    its held-out fit and score it on val (which plays no part in the choice)."""
    classes = int(max(train_y.max(), val_y.max())) + 1
    held = held_out_mask(train_y).to(train_x.device)
    if not held.any():
        raise ValueError("logistic_regression_probe needs a class with two training samples.")
    fit_x, fit_y, held_x, held_y = train_x[~held], train_y[~held], train_x[held], train_y[held]
    fits = dict(zip(l2_grid, fit_logistic_regressions(fit_x, fit_y, l2_grid, classes)))
    held_out = {l2: top1(fits[l2][0], held_x, held_y) for l2 in l2_grid}
    chosen = max(l2_grid, key=lambda l2: (held_out[l2], l2))
    classifier, convergence = fit_logistic_regressions(
        train_x, train_y, [chosen], classes, start=fits[chosen][0]
    )[0]
    return ProbeResult(
        acc1=top1(classifier, val_x, val_y),
        balanced_acc1=balanced_top1(classifier, val_x, val_y),
        l2=chosen,
        edge=chosen in (min(l2_grid), max(l2_grid)),
        held_out_acc1=held_out,
        sweep={l2: fits[l2][1] for l2 in l2_grid},
        convergence=convergence,
    )
