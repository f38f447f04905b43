"""The s-DIET paper's content/style toy (its §4.2 and App. D.4): Fig. 4 (left, middle) and Fig. 5.

App. D.4's setup: ``C = 4`` concepts, input ``d = 16``, embedding ``m = 4``, ``n = 32`` data,
``sigma_1 = 0.01`` (content), ``sigma_2 = 0.1`` (style), ``phi = 0.004``, Gaussian noise, one fresh
augmentation per datum and step, trainable random head, 5 000 Adam steps at lr 0.1 with a cosine
schedule and Adam's state reset after the first step. The models are in
``solo_diet.toys.content_style`` (losses from ``solo_diet.losses``); this script trains them and
draws the figure:

* Fig. 4, left and middle: ``||W u_1||`` (clean, content) and ``||W v_1||`` (noisy, style) against
  the step, for DIET and normalised DIET (the MSE losses of the paper's Thm. 3). The paper: "DIET
  only learns the clean feature but normalized DIET learns both features almost equally".
  Thm. 3 predicts ``||W v_c|| / ||W u_c|| = sigma_u^2 / sigma_v^2 = 0.01`` without normalisation
  and a ratio of order 1 with it. Fig. 4's right panel (CIFAR-100 spectra) needs data and a GPU:
  not here.
* Fig. 5: the Procrustes distance between the embeddings of SCL (Eq. 4) and of the MSE-DIET model
  turned column-orthogonal by Lemma 1, which "vanishes".

Prints the final alignments of every concept, their ratios, the losses and the distance.

    python benchmarks/sdiet_toy.py         # writes docs/toys/sdiet_fig4_fig5.png

The toy's matrices are 16 x 4: one thread is fastest (``--threads``, default 1); more threads only
contend, for cores they share with each other (34 s at one thread against 106 s to 4 min 44 s at
torch's default on a loaded 2-core machine).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from solo_diet.toys.content_style import ToySetup, train_toy

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "toys" / "sdiet_fig4_fig5.png"


def plot(result: dict, path: Path) -> None:
    """Fig. 4 left (DIET) and middle (normalised DIET), concept 1; Fig. 5."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result["steps"].numpy()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), constrained_layout=True)
    for model, title in enumerate(("Fig. 4 (left): DIET", "Fig. 4 (middle): normalized DIET")):
        axes[model].plot(
            steps, result["content"][:, model, 0].numpy(), label=r"$\|W u_1\|$ (clean)"
        )
        axes[model].plot(steps, result["style"][:, model, 0].numpy(), label=r"$\|W v_1\|$ (noisy)")
        axes[model].set_title(title)
        axes[model].set_xlabel("step")
        axes[model].set_ylabel("alignment")
        axes[model].legend()
    axes[2].semilogy(steps, result["procrustes"].numpy())
    axes[2].set_title("Fig. 5: Procrustes distance, MSE-DIET vs SCL")
    axes[2].set_xlabel("step")
    axes[2].set_ylabel("relative Procrustes distance")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=ToySetup.steps)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = train_toy(ToySetup(steps=args.steps), seed=args.seed)
    content, style = result["content"][-1], result["style"][-1]
    print("| model | concept | ||W u_c|| | ||W v_c|| | ratio | final loss |")
    print("| --- | --- | --- | --- | --- | --- |")
    for model, name in enumerate(("DIET (MSE)", "normalized DIET (MSE)")):
        for c in range(content.shape[1]):
            print(
                f"| {name} | {c + 1} | {content[model, c]:.4f} | {style[model, c]:.4f} | "
                f"{style[model, c] / content[model, c]:.4f} | {result['losses'][model]:.4f} |"
            )
    distance = result["procrustes"]
    print(
        f"Procrustes distance: {distance[0]:.3f} after step 1, {distance[-1]:.4f} after step "
        f"{args.steps}; SCL loss {result['losses'][2]:.5f}"
    )
    plot(result, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
