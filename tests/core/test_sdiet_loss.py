"""s-DIET batch / multi-batch cross-entropy against float64 references, and the super-batch
sampler."""

import math

import pytest
import torch

from solo_diet.core.losses import sdiet_batch_cross_entropy, sdiet_multi_batch_cross_entropy
from solo_diet.core.losses.sdiet import sdiet_logits
from solo_diet.core.sdiet.samplers import SuperBatchSampler


def reference_smoothed_ce(z, rows, targets, eps, temperature=1.0):
    """Per-sample loop: -sum_k q_jk log softmax(s_j)_k with q = (1-eps) onehot + eps/K."""
    total = 0.0
    for j in range(z.shape[0]):
        zj = z[j] / math.sqrt(float((z[j] ** 2).sum()))
        scores = [float(zj @ rows[k]) / temperature for k in range(rows.shape[0])]
        top = max(scores)
        log_norm = top + math.log(sum(math.exp(s - top) for s in scores))
        classes = len(scores)
        for k, s in enumerate(scores):
            q = (1 - eps) * (k == targets[j]) + eps / classes
            total -= q * (s - log_norm)
    return total / z.shape[0]


def data(batch=6, dim=5, rows=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(batch, dim, generator=gen, dtype=torch.float64)
    head = torch.randn(rows or batch, dim, generator=gen, dtype=torch.float64)
    return z, head


@pytest.mark.parametrize("eps,temperature", [(0.8, 1.0), (0.0, 1.0), (0.3, 0.5)])
def test_batch_ce_matches_reference(eps, temperature):
    z, rows = data()
    got = sdiet_batch_cross_entropy(z, rows, label_smoothing=eps, temperature=temperature)
    expected = reference_smoothed_ce(z, rows, list(range(6)), eps, temperature)
    assert got.dtype == torch.float64
    assert abs(got.item() - expected) < 1e-12


def test_batch_ce_closed_form_gradients():
    """s-DIET paper, App. A.4 on the batch rows: dL/dHb = (P - Q).T zhat / B and
    dL/dzhat = (P - Q) Hb / B."""
    z, rows = data(batch=7, dim=4, seed=1)
    eps, batch = 0.8, 7
    zhat = (z / z.norm(dim=1, keepdim=True)).requires_grad_()
    rows = rows.clone().requires_grad_()
    # normalize(zhat) == zhat, so the gradient w.r.t. zhat is the gradient in the normalised space
    sdiet_batch_cross_entropy(zhat, rows, label_smoothing=eps).backward()
    with torch.no_grad():
        probs = torch.softmax(zhat @ rows.T, dim=1)
        target = (1 - eps) * torch.eye(batch, dtype=torch.float64) + eps / batch
        grad_rows = (probs - target).T @ zhat / batch
        grad_zhat = (probs - target) @ rows / batch
        # normalize() projects the z gradient onto the tangent space of the unit sphere
        tangent = grad_zhat - (grad_zhat * zhat).sum(1, keepdim=True) * zhat
    assert torch.allclose(rows.grad, grad_rows, rtol=0, atol=1e-14)
    assert torch.allclose(zhat.grad, tangent, rtol=0, atol=1e-14)


def test_uniform_logits_give_log_batch_size():
    z, _ = data(batch=16)
    rows = torch.zeros(16, 5, dtype=torch.float64)
    assert abs(sdiet_batch_cross_entropy(z, rows).item() - math.log(16)) < 1e-12


def test_multi_batch_m1_equals_batch_ce_exactly():
    z, rows = data(seed=2)
    positions = torch.arange(6)
    multi = sdiet_multi_batch_cross_entropy(z, rows, positions)
    assert torch.equal(multi, sdiet_batch_cross_entropy(z, rows))


def test_multi_batch_ce_over_resident_rows_matches_reference():
    z, resident = data(batch=4, rows=12, seed=3)
    positions = torch.tensor([5, 0, 11, 7])
    got = sdiet_multi_batch_cross_entropy(z, resident, positions, label_smoothing=0.8)
    expected = reference_smoothed_ce(z, resident, positions.tolist(), 0.8)
    assert abs(got.item() - expected) < 1e-12


def test_multi_batch_with_all_rows_and_no_smoothing_is_full_diet_ce():
    """m*B = N, eps = 0 gives the full N-way CE of normalised DIET."""
    z, head = data(batch=4, rows=8, seed=4)
    indexes = torch.tensor([3, 6, 1, 0])
    full = torch.nn.functional.cross_entropy(torch.nn.functional.normalize(z) @ head.T, indexes)
    got = sdiet_multi_batch_cross_entropy(z, head, indexes, label_smoothing=0.0)
    assert abs(got.item() - full.item()) < 1e-13


def test_half_inputs_are_computed_in_float32():
    z, rows = data()
    assert sdiet_batch_cross_entropy(z.half(), rows.half()).dtype == torch.float32


def test_logits_and_loss_are_float32_under_bf16_autocast():
    """Under bf16 autocast (CPU) the logits stay float32 and equal a float32 reference, where a
    plain matmul would give bf16; the loss then equals the one without autocast."""
    z, rows = (t.float() for t in data(batch=6, dim=5, rows=12))
    reference = (torch.nn.functional.normalize(z.double(), dim=1) @ rows.double().T / 0.5).float()
    positions = torch.arange(6)
    plain = sdiet_multi_batch_cross_entropy(z, rows, positions, temperature=0.5)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        assert (z @ rows.T).dtype == torch.bfloat16  # what autocast alone would give
        logits = sdiet_logits(z, rows, temperature=0.5)
        loss = sdiet_multi_batch_cross_entropy(z, rows, positions, temperature=0.5)
    assert logits.dtype == torch.float32 and loss.dtype == torch.float32
    torch.testing.assert_close(logits, reference, rtol=0, atol=1e-5)
    torch.testing.assert_close(loss, plain, rtol=0, atol=1e-6)


def test_super_batches_partition_each_epoch_and_change_with_epoch():
    sampler = SuperBatchSampler(50, batch_size=4, rows_per_step=3, seed=7)
    assert len(sampler) == 12
    supers = sampler.global_batches().split(sampler.rows_per_step)  # the super-batches
    assert [s.shape for s in supers] == [torch.Size([3, 4])] * 4
    seen = torch.cat([s.flatten() for s in supers])
    assert seen.unique().numel() == 48 and bool(((seen >= 0) & (seen < 50)).all())
    batches = list(sampler)
    assert batches == sampler.global_batches().tolist()
    first = sampler.global_batches()
    assert torch.equal(first, SuperBatchSampler(50, 4, 3, seed=7).global_batches())
    sampler.set_epoch(1)
    assert not torch.equal(first, sampler.global_batches())


def test_super_batch_sampler_ranks_rebuild_the_global_batch():
    ranks = [
        SuperBatchSampler(30, batch_size=3, rows_per_step=2, seed=1, num_replicas=2, rank=r)
        for r in range(2)
    ]
    assert len(ranks[0]) == len(ranks[1]) == 5
    for step, (b0, b1) in enumerate(zip(*ranks)):
        assert b0 + b1 == ranks[0].global_batches()[step].tolist()
    with pytest.raises(ValueError, match="rank"):
        SuperBatchSampler(30, 3, rank=2, num_replicas=2)
