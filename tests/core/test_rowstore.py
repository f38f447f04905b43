"""RowStore: the placements agree, lazy = full-table optimiser with zero grads, eager = the s-DIET
paper's Listing 1, exact snapshots."""

import math
import threading

import numpy as np
import pytest
import torch

from solo_diet.core.sdiet import rowstore
from solo_diet.core.sdiet.optim import RowAdamW, RowSGDW
from solo_diet.core.sdiet.rowstore import HostSharing, RowStore

N, D, LR, WD, BETAS, EPS = 10, 3, 1e-2, 0.05, (0.9, 0.999), 1e-8
BATCHES = [[0, 1, 2], [3, 4, 5], [6, 0, 7], [1, 8, 3], [9, 2, 6], [4, 5, 8], [0, 9, 1]]


def grads_for(step, rows=3):
    return torch.randn(
        rows, D, generator=torch.Generator().manual_seed(100 + step), dtype=torch.float64
    )


def make(mode="lazy", optimizer=None, **kwargs):
    optimizer = optimizer or RowAdamW(weight_decay=WD, betas=BETAS, eps=EPS)
    return RowStore(N, D, optimizer, mode=mode, dtype=torch.float64, seed=3, **kwargs)


def run(store, batches=BATCHES, first_step=0):
    for step, batch in enumerate(batches, start=first_step):
        idx = torch.tensor(batch)
        rows, state = store.load(idx, "cpu", lr=LR)
        store.update(idx, rows, state, grads_for(step) * (1 + rows), lr=LR)


def full_table(store):
    rows, state = store.load(torch.arange(N), "cpu", lr=LR)
    return [rows, *state]


def simulate_full_adamw(init, batches):
    """Every row takes an AdamW (psi = 1) step every global step; absent rows get a zero
    gradient."""
    theta, m, v = init.clone(), torch.zeros_like(init), torch.zeros_like(init)
    b1, b2 = BETAS
    for step, batch in enumerate(batches):
        grad = torch.zeros_like(theta)
        grad[batch] = grads_for(step) * (1 + theta[batch])
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        theta = (1 - LR * WD) * theta - LR * m / (v.sqrt() + EPS)
    return [theta, m, v]


def simulate_full_sgdw(init, batches, momentum=0.9):
    theta, buf = init.clone(), torch.zeros_like(init)
    for step, batch in enumerate(batches):
        grad = torch.zeros_like(theta)
        grad[batch] = grads_for(step) * (1 + theta[batch])
        buf = momentum * buf + grad
        theta = (1 - LR * WD) * theta - LR * buf
    return [theta, buf]


def test_init_is_uniform_in_bound_with_zero_state_and_seeded():
    store = RowStore(400, 16, RowAdamW(weight_decay=WD), seed=1)
    rows = store.tables["rows"]
    bound = 1 / math.sqrt(16)
    assert rows.dtype == torch.float32 and float(rows.abs().max()) <= bound
    assert float(rows.abs().max()) > 0.95 * bound and abs(float(rows.mean())) < 0.01
    assert (
        float(store.tables["exp_avg"].abs().max()) == 0
        and float(store.tables["exp_avg_sq"].abs().max()) == 0
    )
    assert torch.equal(rows, RowStore(400, 16, RowAdamW(weight_decay=WD), seed=1).tables["rows"])


def test_init_in_row_chunks_equals_one_seeded_draw(monkeypatch):
    """The table is filled chunk by chunk (no N x D temporary): the values are those of one draw."""
    monkeypatch.setattr(rowstore, "INIT_CHUNK_ELEMENTS", 7 * D)
    store = make("lazy")
    bound = 1 / math.sqrt(D)
    one_draw = torch.empty(N, D, dtype=torch.float64).uniform_(
        -bound, bound, generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(store.tables["rows"], one_draw)


def test_lazy_equals_full_table_adamw_with_zero_gradients():
    store = make("lazy")
    init = store.tables["rows"].clone()
    for cut in (3, len(BATCHES)):  # rows absent for several steps, checked mid-run and at the end
        fresh = make("lazy")
        run(fresh, BATCHES[:cut])
        expected = simulate_full_adamw(init, BATCHES[:cut])
        for got, ref in zip(full_table(fresh), expected):
            assert (got - ref).abs().max().item() <= 1e-8


def test_lazy_equals_full_table_sgdw():
    store = make("lazy", RowSGDW(weight_decay=WD, momentum=0.9))
    init = store.tables["rows"].clone()
    run(store)
    for got, ref in zip(full_table(store), simulate_full_sgdw(init, BATCHES)):
        assert (got - ref).abs().max().item() <= 1e-12


def test_eager_matches_paper_listing1():
    """s-DIET paper, Listing 1: real step, then alpha1 = a^(t-1),
    alpha2 = (alpha1 lr mu - lr mu^t)/(a - mu), t = N/B."""
    t = N / 3
    store = make("eager", eager_steps=t - 1)
    theta = store.tables["rows"].clone()
    m, v = torch.zeros_like(theta), torch.zeros_like(theta)
    b1, b2 = BETAS
    a, mu = 1 - LR * WD, b1 / math.sqrt(b2)
    for step, batch in enumerate(BATCHES):
        head, hm, hv = theta[batch], m[batch], v[batch]
        g = grads_for(step) * (1 + head)
        head = a * head
        hm = b1 * hm + (1 - b1) * g
        hv = b2 * hv + (1 - b2) * g * g
        head = head - LR * hm / (hv.sqrt() + EPS)
        alpha1 = a ** (t - 1)
        alpha2 = (alpha1 * LR * mu - LR * mu**t) / (a - mu)
        theta[batch] = alpha1 * head - alpha2 * hm / (hv.sqrt() + EPS)
        m[batch], v[batch] = b1 ** (t - 1) * hm, b2 ** (t - 1) * hv
    run(store)
    for got, ref in zip(full_table(store), (theta, m, v)):
        assert torch.allclose(got, ref, rtol=1e-12, atol=1e-14)


def test_eager_and_lazy_differ_but_both_move_rows():
    eager, lazy = make("eager", eager_steps=N / 3 - 1), make("lazy")
    init = eager.tables["rows"].clone()
    run(eager)
    run(lazy)
    assert (full_table(eager)[0] - init).abs().max() > 1e-3
    assert (full_table(eager)[0] - full_table(lazy)[0]).abs().max() > 1e-6


def test_gpu_and_disk_placements_equal_cpu(tmp_path):
    stores = [
        make("lazy"),
        make("lazy", placement="gpu", device="cpu"),
        make("lazy", placement="disk", directory=str(tmp_path)),
    ]
    for store in stores:
        run(store)
    reference = full_table(stores[0])
    for store in stores[1:]:
        for got, ref in zip(full_table(store), reference):
            assert torch.equal(got, ref)
    disk = stores[2]
    assert (tmp_path / "table.bin").stat().st_size == N * len(
        disk.names
    ) * D * 8  # rows + AdamW state, adjacent
    disk.commit()
    on_file = np.fromfile(tmp_path / "table.bin", dtype=np.float64).reshape(N, len(disk.names), D)
    for k, (name, table) in enumerate(disk.tables.items()):
        assert table.device == torch.device("cpu")
        assert np.array_equal(on_file[:, k], table.numpy()), name
    assert np.array_equal(
        np.fromfile(tmp_path / "last_step.bin", dtype=np.int64), disk.last_step.numpy()
    )


def test_load_returns_copies_and_store_writes_back():
    store = make("eager")
    idx = torch.tensor([2, 5])
    rows, state = store.load(idx, "cpu")
    rows.add_(1.0)
    assert not torch.equal(store.tables["rows"][idx], rows)
    store.store(idx, rows, state)
    written = rows.clone()
    rows.add_(
        5.0
    )  # the caller's tensors are free again once store() returns: the pending write copied them
    assert torch.equal(
        store.load(idx, "cpu")[0], written
    )  # a load waits for pending writes of host tables
    store.commit()
    assert torch.equal(store.tables["rows"][idx], written)


def test_lazy_load_needs_lr():
    with pytest.raises(ValueError, match="lr"):
        make("lazy").load(torch.tensor([0]), "cpu")


def test_multi_step_residency_counts_every_real_step():
    """write_back=False keeps rows resident; lazy catch-up still counts the global steps."""
    store = make("lazy")
    init = store.tables["rows"].clone()
    idx = torch.tensor([0, 1, 2])
    rows, state = store.load(idx, "cpu", lr=LR)
    for step in range(2):
        rows, state = store.update(
            idx, rows, state, grads_for(step) * (1 + rows), lr=LR, write_back=step == 1
        )
    run(store, [[3, 4, 5]], first_step=2)
    expected = simulate_full_adamw(init, [[0, 1, 2], [0, 1, 2], [3, 4, 5]])
    for got, ref in zip(full_table(store), expected):
        assert (got - ref).abs().max().item() <= 1e-8


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_state_dict_round_trip_is_exact(mode):
    store = make(mode, eager_steps=2.3)
    run(store, BATCHES[:3])
    snapshot = store.state_dict()
    run(store, BATCHES[3:], first_step=3)
    resumed = make(mode, eager_steps=2.3)
    resumed.load_state_dict(snapshot)
    assert resumed.global_step == 3
    run(resumed, BATCHES[3:], first_step=3)
    for got, ref in zip(full_table(resumed), full_table(store)):
        assert torch.equal(got, ref)
    assert torch.equal(resumed.last_step, store.last_step)


def test_state_dict_from_another_optimizer_is_refused():
    snapshot = make().state_dict()
    with pytest.raises(KeyError, match="head_optimizer"):
        make(optimizer=RowSGDW(weight_decay=WD)).load_state_dict(snapshot)


def test_bad_arguments():
    with pytest.raises(ValueError, match="placement"):
        make(placement="tape")
    with pytest.raises(ValueError, match="directory"):
        make(placement="disk")
    with pytest.raises(ValueError, match="mode"):
        make("sometimes")


@pytest.mark.parametrize("placement", ["cpu", "gpu"])
def test_prefetch_gives_identical_results(placement):
    """Prefetching each next batch (on CPU: a copy made early, the code path of the CUDA side
    stream) changes nothing, also in eager mode and for the gpu placement on the CPU device."""
    for mode in ("eager", "lazy"):
        plain, early = (
            make(mode, placement=placement, device="cpu", eager_steps=2.0) for _ in range(2)
        )
        run(plain)
        for step, batch in enumerate(BATCHES):
            idx = torch.tensor(batch)
            rows, state = early.load(idx, "cpu", lr=LR)
            if step + 1 < len(BATCHES):
                early.prefetch(torch.tensor(BATCHES[step + 1]), "cpu")
            early.update(idx, rows, state, grads_for(step) * (1 + rows), lr=LR)
        assert early.prefetch_hits == len(BATCHES) - 1 and plain.prefetch_hits == 0
        for got, ref in zip(full_table(early), full_table(plain)):
            assert torch.equal(got, ref)


def test_load_uses_the_prefetched_copy_unless_stored_rows_made_it_stale():
    store = make("eager")
    store.prefetch(torch.tensor([0, 1]), "cpu")
    store._prefetched[1].result()  # the worker thread has gathered the rows
    before = store.tables["rows"][[0, 1]].clone()
    store.tables["rows"][[0, 1]] += (
        1.0  # behind the store's back: the prefetched copy is what load returns
    )
    assert torch.equal(store.load(torch.tensor([0, 1]), "cpu")[0], before)

    store.prefetch(torch.tensor([2, 3]), "cpu")
    rows, state = store.load(torch.tensor([3, 4]), "cpu")
    store.store(torch.tensor([3, 4]), rows + 5.0, state)  # row 3 changes after it was prefetched
    assert torch.equal(store.load(torch.tensor([2, 3]), "cpu")[0], store.tables["rows"][[2, 3]])
    assert store.prefetch_hits == 1


def test_host_shared_store_has_one_writer_and_deferred_writes(tmp_path):
    """Two stores (threads standing in for two DDP processes) map the same /dev/shm-style files: the
    reader initialises and writes nothing, the writer's store lands at its next commit, both see
    it."""
    barrier = threading.Barrier(2)
    stores = {}

    def build(writer):
        sharing = HostSharing("test", writer, barrier.wait, directory=str(tmp_path))
        stores[writer] = make("eager", sharing=sharing)

    threads = [threading.Thread(target=build, args=(w,)) for w in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer, reader = stores[True], stores[False]
    assert (
        writer.shared_files == reader.shared_files and len(writer.shared_files) == 2
    )  # table, last_step
    assert list(tmp_path.iterdir()) == []  # unlinked once both mapped them
    assert torch.equal(reader.tables["rows"], make("eager").tables["rows"])

    idx = torch.tensor([1, 4])
    rows, state = reader.load(idx, "cpu")
    reader.store(idx, rows + 1.0, state)
    writer.store(idx, rows + 2.0, state)
    assert torch.equal(reader.tables["rows"][idx], rows)  # pending until the writer commits
    writer.commit()
    assert torch.equal(reader.tables["rows"][idx], rows + 2.0)
    with pytest.raises(ValueError, match="gpu"):
        make(placement="gpu", sharing=HostSharing("x", True, barrier.wait, directory=str(tmp_path)))


def test_host_shared_store_refuses_a_too_small_shared_memory(tmp_path):
    sharing = HostSharing("big", True, lambda: None, directory=str(tmp_path))
    with pytest.raises(RuntimeError, match="shm-size"):
        RowStore(10**9, 10**4, RowAdamW(weight_decay=WD), sharing=sharing)
