"""What the converged probe's L2 sweep costs: the default grid (4 strengths a decade, 1e-8 to 10)
against one strength a decade from 1e-6 to 1, on Gaussian-blob features, on the CPU or a GPU.

    python benchmarks/logreg_sweep.py [--samples 2000] [--dim 512] [--device cpu]

Prints one table: grid, strengths, seconds, L-BFGS iterations over the sweep, val top-1, the
chosen strength (docs/benchmarks.md, "The converged probe's sweep")."""

from __future__ import annotations

import argparse
import time

import torch

from solo_diet.core.metrics.logreg import L2_GRID, logistic_regression_probe

ONE_A_DECADE = tuple(10.0**k for k in range(-6, 1))


def blobs(samples: int, dim: int, classes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``samples`` points around ``classes`` random centres, overlapping (unit noise)."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=generator) * 0.2
    labels = torch.arange(samples) % classes
    return centres[labels] + torch.randn(samples, dim, generator=generator), labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000, help="training images")
    parser.add_argument("--dim", type=int, default=512, help="feature dimension")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    x, y = blobs(args.samples + args.samples // 2, args.dim, args.classes)
    x, y = x.to(args.device), y.to(args.device)
    train, val = slice(0, args.samples), slice(args.samples, None)
    print("| grid | strengths | seconds | sweep iterations | val top-1 | chosen l2 |")
    print("|---|---:|---:|---:|---:|---:|")
    grids = {"4 a decade, 1e-8 to 10": L2_GRID, "1 a decade, 1e-6 to 1": ONE_A_DECADE}
    for name, grid in grids.items():
        start = time.perf_counter()
        probe = logistic_regression_probe(x[train], y[train], x[val], y[val], grid)
        seconds = time.perf_counter() - start
        iterations = sum(fit.iterations for fit in probe.sweep.values())
        print(
            f"| {name} | {len(grid)} | {seconds:.1f} | {iterations} | {probe.acc1:.2f} "
            f"| {probe.l2:.2g} |"
        )


if __name__ == "__main__":
    main()
