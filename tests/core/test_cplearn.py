"""CPLearn core: loss against an independent float64 loop reference, dictionary statistics,
temperature, limit values (CPLearn paper, Lemma 1 and App. C, and our derivations), numerical
robustness, autocast and DDP marginal."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from solo_diet.core.losses import cplearn_diagnostics, cplearn_loss, cplearn_loss_terms
from solo_diet.core.nn import CPLearnProjector, code_temperature, logit_range, rademacher_codes


def _softmax_rows(z: np.ndarray) -> list[list[float]]:
    rows = []
    for row in z:
        top = max(row)
        weights = [math.exp(v - top) for v in row]
        total = sum(weights)
        rows.append([w / total for w in weights])
    return rows


def _reference_half(target: np.ndarray, pred: np.ndarray, beta: float, prior: str) -> float:
    """One direction of the CPLearn paper's Eq. 2 / App. N, with explicit loops over samples and
    codes."""
    p_t, p_s = _softmax_rows(target), _softmax_rows(pred)
    n, c = target.shape
    pbar = [sum(p_t[i][j] for i in range(n)) / n for j in range(c)]
    if prior == "reverse_kl":
        prior_value = sum(q * math.log(c * q) for q in pbar if q > 0)
    else:
        prior_value = -sum(math.log(q) for q in pbar) / c
    cross_entropy = -sum(p_t[i][j] * math.log(p_s[i][j]) for i in range(n) for j in range(c)) / n
    return prior_value + beta * cross_entropy


def _reference_loss(za, zb, beta, prior, symmetric):
    za, zb = za.detach().numpy(), zb.detach().numpy()
    if symmetric:
        return 0.5 * (_reference_half(za, zb, beta, prior) + _reference_half(zb, za, beta, prior))
    return _reference_half(za, zb, beta, prior)


def _logits(n=6, c=10, scale=3.0, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(2, n, c, generator=generator, dtype=dtype)).unbind(0)


@pytest.mark.parametrize("prior", ["reverse_kl", "forward_ce"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("beta", [0.25, 1.0, 2.0])
def test_loss_matches_loop_reference(prior, symmetric, beta):
    za, zb = _logits()
    got = cplearn_loss(za, zb, beta=beta, prior=prior, symmetric=symmetric)
    assert got.dtype == torch.float64
    assert got.item() == pytest.approx(_reference_loss(za, zb, beta, prior, symmetric), abs=1e-10)


def test_terms_compose_and_symmetry():
    za, zb = _logits(seed=1)
    terms = cplearn_loss_terms(za, zb, beta=0.7)
    assert terms["loss"].item() == pytest.approx(
        (terms["prior"] + 0.7 * terms["invariance"]).item(), abs=1e-12
    )
    swapped = cplearn_loss(zb, za, beta=0.7)
    assert swapped.item() == pytest.approx(terms["loss"].item(), abs=1e-12)
    forward = cplearn_loss(za, zb, beta=0.7, symmetric=False)
    backward = cplearn_loss(zb, za, beta=0.7, symmetric=False)
    assert forward.item() != pytest.approx(backward.item(), abs=1e-6)
    assert terms["loss"].item() == pytest.approx(0.5 * (forward + backward).item(), abs=1e-12)
    shift = torch.randn(za.shape[0], 1, dtype=za.dtype)
    assert cplearn_loss(za + shift, zb - 3 * shift, beta=0.7).item() == pytest.approx(
        terms["loss"].item(), abs=1e-10
    )


def test_mutual_information_identity_at_beta_one():
    """Our derivation: half = log c - [H(pbar) - mean H(p_i)] + mean KL(p_t || p_s) at beta = 1."""
    za, zb = _logits(n=7, c=5, seed=2)
    p_t, p_s = torch.softmax(za, 1), torch.softmax(zb, 1)
    pbar = p_t.mean(0)
    marginal_entropy = -(pbar * pbar.log()).sum()
    mean_entropy = -(p_t * p_t.log()).sum(1).mean()
    mean_kl = (p_t * (p_t.log() - p_s.log())).sum(1).mean()
    expected = math.log(5) - (marginal_entropy - mean_entropy) + mean_kl
    got = cplearn_loss(za, zb, beta=1.0, symmetric=False)
    assert got.item() == pytest.approx(expected.item(), abs=1e-12)


@pytest.mark.parametrize("prior", ["reverse_kl", "forward_ce"])
def test_gradcheck_and_both_views_receive_gradient(prior):
    za, zb = (z.clone().requires_grad_(True) for z in _logits(n=4, c=6, seed=3))
    for symmetric in (True, False):
        assert torch.autograd.gradcheck(
            lambda a, b: cplearn_loss(a, b, beta=0.5, prior=prior, symmetric=symmetric), (za, zb)
        )
        grads = torch.autograd.grad(
            cplearn_loss(za, zb, beta=0.5, prior=prior, symmetric=symmetric), (za, zb)
        )
        assert all(g.abs().sum() > 1e-6 for g in grads)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_constant_outputs_give_collapse_value(beta):
    """CPLearn paper, App. C: p_i = p for all i gives log c + (beta - 1) H(p) (reverse KL),
    beta H(p) + CE(u, p) (forward CE), and beta log c for uniform p."""
    c = 12
    row = torch.randn(c, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    logits = row.expand(5, c)
    p = torch.softmax(row, 0)
    entropy = -(p * p.log()).sum().item()
    assert cplearn_loss(logits, logits, beta=beta).item() == pytest.approx(
        math.log(c) + (beta - 1) * entropy, abs=1e-12
    )
    forward = cplearn_loss(logits, logits, beta=beta, prior="forward_ce").item()
    assert forward == pytest.approx(beta * entropy - p.log().mean().item(), abs=1e-12)
    uniform = torch.zeros(5, c, dtype=torch.float64)
    assert cplearn_loss(uniform, uniform, beta=beta).item() == pytest.approx(
        beta * math.log(c), abs=1e-12
    )


@pytest.mark.parametrize("c", [4, 8])
def test_balanced_extreme_assignment_reaches_lemma1_bound(c):
    """CPLearn paper, Lemma 1 (Eq. 3): one-hot rows with logit gap L give p_max = 1 - eps (c - 1);
    balanced over c | n the loss is beta h_eps (reverse KL) and ln c + beta h_eps (forward CE)."""
    eps, beta, n = 1e-8, 0.5, 2 * c
    a = eps * (c - 1)
    h_eps = -(1 - a) * math.log(1 - a) - a * math.log(eps)
    logits = logit_range(c, eps) * torch.eye(c, dtype=torch.float64).repeat(n // c, 1)
    assert torch.softmax(logits, 1).max().item() == pytest.approx(1 - a, abs=1e-15)
    assert cplearn_loss(logits, logits, beta=beta).item() == pytest.approx(
        beta * h_eps, rel=1e-6, abs=1e-14
    )
    forward = cplearn_loss(logits, logits, beta=beta, prior="forward_ce").item()
    assert forward == pytest.approx(math.log(c) + beta * h_eps, rel=1e-9)


@pytest.mark.parametrize("prior", ["reverse_kl", "forward_ce"])
def test_finite_with_unused_codes_and_huge_logit_gaps(prior):
    n, c = 8, 4096
    winners = torch.tensor([0, 0, 1, 1, 2, 3, 3, 5])
    za = torch.zeros(n, c)
    za[torch.arange(n), winners] = 300.0
    zb = torch.roll(za, 1, dims=0).requires_grad_(True)
    za.requires_grad_(True)
    assert (
        torch.softmax(za, 1).mean(0)[100] == 0
    )  # the codes beyond the winners underflow to exact 0
    loss = cplearn_loss(za, zb, beta=1.0, prior=prior)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(za.grad).all() and torch.isfinite(zb.grad).all()
    if prior == "reverse_kl":
        assert 0.0 <= cplearn_loss_terms(za, zb, beta=1.0)["prior"].item() <= math.log(c)


def test_diagnostics_on_hand_made_batch():
    eye = torch.eye(4)
    za = 50.0 * torch.cat([eye, eye])  # 8 rows, 4 codes, balanced and confident
    zb = 50.0 * torch.cat(
        [eye, eye[[1, 1, 2, 3]]]
    )  # second view disagrees on one row, uses the same 4 codes
    stats = cplearn_diagnostics(za, zb)
    assert stats["codes_used"].item() == 4
    assert stats["agreement"].item() == pytest.approx(7 / 8)
    assert stats["entropy"].item() == pytest.approx(0.0, abs=1e-6)
    assert stats["max_prob"].item() == pytest.approx(1.0, abs=1e-6)
    pbar_b = torch.tensor([1, 3, 2, 2]) / 8
    expected_marginal = 0.5 * (math.log(4) - (pbar_b * pbar_b.log()).sum().item())
    assert stats["marginal_entropy"].item() == pytest.approx(expected_marginal, abs=1e-5)


def test_rademacher_dictionary_statistics():
    f, c = 256, 2048
    codes = rademacher_codes(f, c, seed=7)
    assert codes.shape == (f, c) and codes.dtype == torch.float32
    assert set(codes.unique().tolist()) == {-1.0, 1.0}
    assert torch.allclose(codes.norm(dim=0), torch.full((c,), math.sqrt(f)))
    cosines = (codes.T @ codes) / f
    off = cosines[~torch.eye(c, dtype=torch.bool)]
    assert abs(off.mean().item()) < 0.01
    assert off.std().item() == pytest.approx(1 / math.sqrt(f), rel=0.1)
    assert torch.equal((codes @ codes.T / c).diagonal(), torch.ones(f))
    assert torch.equal(codes, rademacher_codes(f, c, seed=7))
    assert not torch.equal(codes, rademacher_codes(f, c, seed=8))
    torch.manual_seed(0)
    first = rademacher_codes(8, 32, seed=3)
    torch.manual_seed(1)
    assert torch.equal(first, rademacher_codes(8, 32, seed=3))  # the global RNG does not move W


def test_temperature_and_logit_range():
    assert code_temperature(2048, 64, 16384) == pytest.approx(13.8975, abs=1e-3)
    assert code_temperature(128, 64, 16384) == pytest.approx(0.869, abs=1e-3)
    assert logit_range(10) == pytest.approx(18.4207, abs=1e-4)
    assert logit_range(16384, 1e-6) == pytest.approx(13.80, abs=1e-2)
    with pytest.raises(ValueError, match="eps"):
        logit_range(16384, 1e-4)


def test_projector_buffer_and_parameters():
    projector = CPLearnProjector(12, 16, 64, codes_seed=3)
    assert "codes" in projector.state_dict()
    assert not projector.codes.requires_grad
    assert all(p is not projector.codes for p in projector.parameters())
    other = CPLearnProjector(12, 16, 64, codes_seed=4)
    other.load_state_dict(projector.state_dict())
    assert torch.equal(other.codes, projector.codes)
    h, logits = projector(torch.randn(8, 12))
    assert h.shape == (8, 16) and logits.shape == (8, 64)
    assert h.abs().max() <= 1.0
    bound = math.sqrt(8) * logit_range(64)
    assert logits.abs().max() <= bound * (1 + 1e-6)
    with pytest.raises(ValueError, match="activation"):
        CPLearnProjector(12, 16, 64, activation="relu")


def test_l2_head_is_cosine_classifier_independent_of_batch_size():
    """Eq. 1 with tau substituted: logits_ij = L cos(u_i, w_j), whatever n."""
    torch.manual_seed(0)
    projector = CPLearnProjector(10, 32, 128, activation="l2").double().eval()
    feats = torch.randn(64, 10, dtype=torch.float64)
    with torch.no_grad():
        _, logits = projector(feats)
        _, half = projector(feats[:32])
        u = projector.bn(projector.linear(feats))
    cosine = torch.nn.functional.normalize(u, dim=1) @ torch.nn.functional.normalize(
        projector.codes.double(), dim=0
    )
    assert torch.allclose(logits, logit_range(128) * cosine, atol=1e-10)
    assert torch.allclose(half, logits[:32], atol=1e-10)


def test_bf16_autocast_matches_float32():
    torch.manual_seed(0)
    projector = CPLearnProjector(24, 64, 512, codes_seed=1)
    feats_a, feats_b = torch.randn(2, 16, 24).unbind(0)

    def run():
        (_, za), (_, zb) = projector(feats_a), projector(feats_b)
        return za, cplearn_loss(za, zb, beta=1.0)

    reference_logits, reference = run()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = run()
    assert logits.dtype == torch.float32 and loss.dtype == torch.float32
    assert torch.allclose(logits, reference_logits, atol=1e-4)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-3, abs=1e-3)


def _ddp_worker(rank: int, world: int, init_file: str, out_dir: str, za, zb) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    rows = slice(rank * za.shape[0] // world, (rank + 1) * za.shape[0] // world)
    local_a = za[rows].clone().requires_grad_(True)
    local_b = zb[rows].clone().requires_grad_(True)
    terms = cplearn_loss_terms(local_a, local_b, beta=0.5, gather_marginal=True)
    terms["loss"].backward()
    torch.save(
        {
            "terms": {k: v.detach() for k, v in terms.items()},
            "grad_a": local_a.grad,
            "grad_b": local_b.grad,
        },
        os.path.join(out_dir, f"rank{rank}.pt"),
    )
    dist.destroy_process_group()


def test_gather_marginal_matches_single_process(tmp_path):
    """Two gloo ranks with gather_marginal see the global pbar: the mean of their losses equals the
    one-process loss on the concatenated batch, and each rank's gradient (before DDP's average over
    ranks) is world x the one-process gradient of its rows."""
    world = 2
    za, zb = _logits(n=6, c=9, seed=5, dtype=torch.float32)
    mp.spawn(
        _ddp_worker,
        args=(world, str(tmp_path / "init"), str(tmp_path), za, zb),
        nprocs=world,
        join=True,
    )
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(world)]

    full_a, full_b = za.clone().requires_grad_(True), zb.clone().requires_grad_(True)
    full = cplearn_loss_terms(full_a, full_b, beta=0.5)
    full["loss"].backward()
    for r, result in enumerate(results):
        assert result["terms"]["prior"].item() == pytest.approx(full["prior"].item(), abs=1e-6)
        rows = slice(r * 3, (r + 1) * 3)
        assert torch.allclose(result["grad_a"], world * full_a.grad[rows], atol=1e-6)
        assert torch.allclose(result["grad_b"], world * full_b.grad[rows], atol=1e-6)
    mean_loss = sum(result["terms"]["loss"] for result in results) / world
    assert mean_loss.item() == pytest.approx(full["loss"].item(), abs=1e-6)
    local = cplearn_loss_terms(za[:3], zb[:3], beta=0.5)
    assert local["prior"].item() != pytest.approx(full["prior"].item(), abs=1e-4)


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _optimise_tied_logits(n: int, c: int, beta: float, steps: int = 300) -> tuple[float, dict]:
    logits = (
        0.1 * torch.randn(n, c, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ).requires_grad_(True)
    optimizer = torch.optim.Adam([logits], lr=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = cplearn_loss(logits, logits, beta=beta)
        loss.backward()
        optimizer.step()
    return loss.item(), {
        k: v.item() for k, v in cplearn_diagnostics(logits.detach(), logits.detach()).items()
    }


@pytest.mark.slow  # over 2 s
@pytest.mark.usefixtures("one_thread")
def test_free_logit_optima_follow_the_phase_analysis():
    """Our analysis of the released loss with tied views: for c > n, beta > 1 gives one-hot rows on
    n distinct codes at loss log(c/n), beta < 1 soft rows (mean entropy about log(c/n)); for c < n,
    one-hot and balanced."""
    loss, stats = _optimise_tied_logits(8, 32, beta=2.0)
    assert loss == pytest.approx(math.log(4), abs=1e-3)
    assert stats["codes_used"] == 8 and stats["entropy"] < 1e-3
    loss, stats = _optimise_tied_logits(8, 32, beta=0.5)
    assert stats["entropy"] > 0.5 and stats["max_prob"] < 0.5
    assert loss == pytest.approx(0.5 * math.log(4), abs=0.05)
    _, stats = _optimise_tied_logits(32, 8, beta=1.0)
    assert stats["codes_used"] == 8 and stats["entropy"] < 1e-2
    assert stats["marginal_entropy"] == pytest.approx(math.log(8), abs=0.05)
