"""The s-DIET paper's content/style toy (its §4.2 and App. D.4): Fig. 4 (left, middle) and Fig. 5.

App. D.4's setup: ``C = 4`` concepts, input ``d = 16``, embedding ``m = 4``, ``n = 32`` data,
``sigma_1 = 0.01`` (content), ``sigma_2 = 0.1`` (style), ``phi = 0.004``, Gaussian noise, one fresh
augmentation per datum and step, trainable random head, 5 000 Adam steps at lr 0.1 with a cosine
schedule and Adam's state reset after the first step. Each of ``C`` latent concepts has a content
feature ``u_c`` and a style feature ``v_c``, all ``2C`` orthonormal in ``R^d``. A view of datum
``i`` of concept ``c`` is ``x = (1 + eps_u) u_c + (1 + eps_v) v_c + xi`` (s-DIET paper, §4.2) with,
as in App. D.4, Gaussian ``eps_u ~ N(0, sigma_u^2)``, ``eps_v ~ N(0, sigma_v^2)``; augmentation
redraws all the noise. The background ``xi`` is "Gaussian scaled by phi": we read it as ``N(0,
(phi^2 / d) I)``, the covariance of the proof of Thm. 3 (App. A.3). The ``n`` data are balanced over
the concepts (App. A.1.4, assumption 1). Models are linear, ``z = W x`` with ``W in R^{m x d}`` (the
parametric feature model of §4.1), losses from ``solo_diet.core.losses``; this script trains them
(``tests/core/test_paper_toys.py`` checks the figures' properties on them) and draws the figure:

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
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from solo_diet.core.losses import mse_diet_loss

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "toys" / "sdiet_fig4_fig5.png"


@dataclass(frozen=True)
class ToySetup:
    """App. D.4's constants: ``C, d, m, n, sigma_1, sigma_2, phi``, 5 000 Adam steps at lr 0.1."""

    concepts: int = 4
    input_dim: int = 16
    embed_dim: int = 4
    num_data: int = 32
    sigma_content: float = 0.01
    sigma_style: float = 0.1
    background: float = 0.004
    steps: int = 5000
    lr: float = 0.1


class ContentStyleData:
    """The toy's features and a sampler of one fresh augmentation of every datum."""

    def __init__(self, setup: ToySetup, generator: torch.Generator):
        if 2 * setup.concepts > setup.input_dim or setup.num_data % setup.concepts:
            raise ValueError("need 2 * concepts <= input_dim and num_data divisible by concepts")
        self.setup = setup
        self.generator = generator
        basis, _ = torch.linalg.qr(
            torch.randn(setup.input_dim, 2 * setup.concepts, generator=generator)
        )
        self.content = basis[:, : setup.concepts].T.contiguous()  # (C, d): u_c
        self.style = basis[:, setup.concepts :].T.contiguous()  # (C, d): v_c
        per_concept = setup.num_data // setup.concepts
        self.concept_of = torch.arange(setup.concepts).repeat_interleave(per_concept)  # (n,)

    def views(self, repeats: int = 1) -> torch.Tensor:
        """``(repeats * n, d)``: ``repeats`` fresh augmentations of every datum, datum-major within
        each repeat."""
        s, g = self.setup, self.generator
        concept = self.concept_of.repeat(repeats)
        size = (concept.numel(), 1)
        eps_u = s.sigma_content * torch.randn(size, generator=g)
        eps_v = s.sigma_style * torch.randn(size, generator=g)
        xi = (s.background / s.input_dim**0.5) * torch.randn(
            concept.numel(), s.input_dim, generator=g
        )
        return (1 + eps_u) * self.content[concept] + (1 + eps_v) * self.style[concept] + xi


def spectral_contrastive_loss(z_a: torch.Tensor, z_b: torch.Tensor) -> torch.Tensor:
    """SCL, s-DIET paper, Eq. 4, with pairs drawn independently from the data:
    ``-(1/n^2) sum_i z_a,i . z_b,i + (1/2)(1/n^2) sum_ij (z_a,i . z_b,j)^2`` (row ``i`` of both
    views is datum ``i``, so ``delta_{y1,y2}`` holds on the diagonal only)."""
    kernel = z_a @ z_b.T
    pairs = kernel.numel()
    return -kernel.diagonal().sum() / pairs + 0.5 * kernel.pow(2).sum() / pairs


def isometric_embedding(head: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """Lemma 1 of the s-DIET paper: with ``W_H = U_1 Sigma_1 V^T`` (thin SVD), the model with the
    column-orthogonal head ``U_1`` and embedding ``Sigma_1 V^T z`` has the same outputs."""
    _, singular, v_t = torch.linalg.svd(head, full_matrices=False)
    return z @ (singular[:, None] * v_t).T


def procrustes_distance(reference: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """``min_R ||reference - other R||_F / ||reference||_F`` over orthogonal ``R`` (no centring or
    scaling); ``R = U V^T`` from the SVD of ``other^T reference``."""
    u, _, v_t = torch.linalg.svd(other.T @ reference)
    return torch.linalg.norm(reference - other @ (u @ v_t)) / torch.linalg.norm(reference)


def _random_heads(setup: ToySetup, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` heads ``W_H``, trainable from random init (App. D.4): ``nn.Linear``'s
    ``U(-1/sqrt(m), 1/sqrt(m))``."""
    bound = setup.embed_dim**-0.5
    uniform = torch.rand(count, setup.num_data, setup.embed_dim, generator=generator)
    return ((2 * uniform - 1) * bound).requires_grad_()


def train_toy(
    setup: ToySetup, seed: int = 0, record_every: int = 25, eval_views: int = 64
) -> dict[str, torch.Tensor]:
    """Trains the models of Figs. 4 and 5 side by side, on the same views, each on its own loss.

    * MSE-DIET (s-DIET paper, Eq. 5) and normalised MSE-DIET (the same on ``normalize(W x)``), both
      from ``W = 0`` (App. A.1.4, assumption 4) with a random trainable head: Fig. 4 (left,
      middle). Thm. 3, which Fig. 4 illustrates, is about these MSE losses.
    * SCL (Eq. 4), two views per datum: Fig. 5 compares it with the MSE-DIET model above. ``W = 0``
      is a stationary point of SCL, so its ``W`` starts at ``0.01 N(0, 1)`` (ours).

    One Adam (lr 0.1, cosine to 0, state reset after the first step as in App. D.4); Adam is
    elementwise and the losses share no parameter, so this equals one optimizer per model.

    Returns ``steps`` (after which step each record was taken), ``content`` and ``style``
    (``(records, 2, C)``: ``||W u_c||`` and ``||W v_c||`` of [DIET, normalised DIET]),
    ``procrustes`` (``(records,)``: relative distance between SCL's embeddings and the
    isometric-head DIET model's (Lemma 1) on one fixed set of ``eval_views`` views per datum) and
    the final ``losses`` ``[DIET, normalised DIET, SCL]``.
    """
    generator = torch.Generator().manual_seed(seed)
    data = ContentStyleData(setup, generator)
    n, m, d = setup.num_data, setup.embed_dim, setup.input_dim
    w = torch.zeros(2, m, d, requires_grad=True)  # [DIET, normalised DIET]
    heads = _random_heads(setup, 2, generator)
    w_scl = (0.01 * torch.randn(m, d, generator=generator)).requires_grad_()
    optimizer = torch.optim.Adam([w, heads, w_scl], lr=setup.lr, foreach=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=setup.steps)
    targets = torch.arange(n)
    fixed_views = data.views(eval_views)
    records: dict[str, list[torch.Tensor]] = {
        "steps": [],
        "content": [],
        "style": [],
        "procrustes": [],
    }
    for step in range(setup.steps):
        x, x_other = data.views(2).split(n)
        z = x @ w.transpose(1, 2)
        z = torch.stack([z[0], F.normalize(z[1], dim=1)])
        outputs = z @ heads.transpose(1, 2)
        losses = torch.stack(
            [
                mse_diet_loss(outputs[0], targets),
                mse_diet_loss(outputs[1], targets),
                spectral_contrastive_loss(x @ w_scl.T, x_other @ w_scl.T),
            ]
        )
        optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        optimizer.step()
        scheduler.step()
        if step == 0:
            # App. D.4: reset Adam after the first step, whose gradient through normalize(W x) at
            # W = 0 is ~1e12 times the later ones (App. A.1.5)
            optimizer.state.clear()
        if step % record_every == 0 or step == setup.steps - 1:
            with torch.no_grad():
                records["steps"].append(torch.tensor(step + 1))
                records["content"].append(
                    torch.linalg.norm(data.content @ w.transpose(1, 2), dim=2)
                )
                records["style"].append(torch.linalg.norm(data.style @ w.transpose(1, 2), dim=2))
                diet_z = isometric_embedding(heads[0], fixed_views @ w[0].T)
                records["procrustes"].append(procrustes_distance(fixed_views @ w_scl.T, diet_z))
    out = {name: torch.stack(values) for name, values in records.items()}
    out["losses"] = losses.detach()
    return out


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
