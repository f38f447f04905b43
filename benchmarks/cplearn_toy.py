"""The CPLearn paper's Fig. 3: random Rademacher code dictionaries are quasi-orthogonal.

For ``f = 50`` (the paper's Figs. 3a-3c) and ``f = 100`` (Figs. 3d-3f) and three dictionary sizes
``c``, draws ``W in {-1, +1}^{f x c}`` with the dictionary CPLearn trains with
(``solo_diet.core.nn.rademacher_codes``) and shows ``W^T W / f`` (top row) and the normalised
histogram of its elements (bottom row). The paper's text does not give the ``c`` of each panel; we
take ``c = 10, 100, 1000`` (fewer, about as many and many more codes than ``f``). Prints one row per
panel: the diagonal, and the off-diagonal mean and standard deviation against Eq. 5's ``1/sqrt(f)``.

What the figure shows (the paper's caption): ``W^T W`` has its diagonal at 1 and off-diagonal values
centred on 0; as ``c`` grows at fixed ``f`` their spread stays the same, so quasi-orthogonality
holds for any dictionary size.

    python benchmarks/cplearn_toy.py            # writes docs/toys/cplearn_fig3.png, ~5 s on a CPU
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from solo_diet.core.nn import rademacher_codes

EMBED_DIMS = (50, 100)
NUM_CODES = (10, 100, 1000)
OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "toys" / "cplearn_fig3.png"


def code_cosines(codes: torch.Tensor) -> torch.Tensor:
    """``W^T W / f``: the ``(c, c)`` cosines between the ``c`` codes (columns) of ``W`` (``f x c``),
    all of norm ``sqrt(f)``."""
    return codes.T @ codes / codes.shape[0]


def cosine_statistics(cosines: torch.Tensor) -> dict[str, float]:
    """Diagonal range and off-diagonal mean and standard deviation of a square cosine matrix."""
    diagonal = cosines.diagonal()
    off = cosines[~torch.eye(cosines.shape[0], dtype=torch.bool)]
    return {
        "diagonal_min": diagonal.min().item(),
        "diagonal_max": diagonal.max().item(),
        "off_diagonal_mean": off.mean().item(),
        "off_diagonal_std": off.std().item(),
    }


def panels(seed: int = 0) -> list[dict]:
    """One entry per panel (``f`` major): ``f``, ``c``, the cosine matrix and its statistics."""
    out = []
    for f in EMBED_DIMS:
        for c in NUM_CODES:
            cosines = code_cosines(rademacher_codes(f, c, seed + c))
            out.append({"f": f, "c": c, "cosines": cosines, **cosine_statistics(cosines)})
    return out


def plot(rows: list[dict], path: Path) -> None:
    """Top: ``W^T W / f``; bottom: normalised histogram of its elements; panels a-f."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(rows), figsize=(3 * len(rows), 6), constrained_layout=True)
    for column, (row, letter) in enumerate(zip(rows, "abcdef")):
        cosines = row["cosines"].numpy()
        image = axes[0, column].imshow(
            cosines, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
        )
        axes[0, column].set_title(f"({letter}) f = {row['f']}, c = {row['c']}")
        axes[0, column].set_xticks([])
        axes[0, column].set_yticks([])
        step = 2 / row["f"]  # the elements are multiples of 2/f: one bin per value
        edges = torch.arange(-1 - step / 2, 1 + step, step).numpy()
        axes[1, column].hist(cosines.ravel(), bins=edges, density=True)
        axes[1, column].set_xlabel(r"elements of $W^T W / f$")
    fig.colorbar(image, ax=axes[0, :], shrink=0.8)
    fig.suptitle("CPLearn paper, Fig. 3: Rademacher codes are quasi-orthogonal")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    rows = panels(args.seed)
    print("|   f |    c | diagonal | off-diagonal mean | off-diagonal std | 1/sqrt(f) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['f']:3d} | {row['c']:4d} | {row['diagonal_min']:.0f} to "
            f"{row['diagonal_max']:.0f} | {row['off_diagonal_mean']:+.4f} | "
            f"{row['off_diagonal_std']:.4f} | {row['f'] ** -0.5:.4f} |"
        )
    plot(rows, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
