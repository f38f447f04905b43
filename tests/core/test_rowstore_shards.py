"""The sharded row store (``row_sharding: node``) against the whole one, in float64: two nodes
played by two threads, each with its own gloo group, load, step and store the same batches as one
unsharded store; their gathered checkpoint equals its state, in both zero-gradient modes, and a
checkpoint reloaded into fresh shards goes on identically."""

import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from solo_diet.core.sdiet.optim import RowAdamW
from solo_diet.core.sdiet.rowstore import RowShard, RowStore, ShardedRowStore

N, D, BATCH, NODES = 7, 3, 3, 2  # 7 rows: node 1 holds 3 rows and a padding row


def batches(epochs: int) -> list[torch.Tensor]:
    """Each epoch a permutation of the rows in batches of ``BATCH`` (the last one short)."""
    generator = torch.Generator().manual_seed(0)
    return [b for _ in range(epochs) for b in torch.randperm(N, generator=generator).split(BATCH)]


def train(store: RowStore, steps: list[torch.Tensor], first: int = 0) -> None:
    """Load, step with a seeded gradient (the same on every node) and store each batch."""
    for number, indices in enumerate(steps, start=first):
        lr = 0.1 / (1 + number)
        rows, state = store.load(indices, "cpu", lr=lr)
        grad = torch.randn(
            rows.shape, generator=torch.Generator().manual_seed(number), dtype=torch.float64
        )
        store.update(indices, rows, state, grad, lr=lr)
    # no commit: a checkpoint waits for the pending write-backs itself


def new_store(mode: str, shard=None) -> RowStore:
    options = dict(mode=mode, eager_steps=N / BATCH - 1, seed=3, dtype=torch.float64)
    optimizer = RowAdamW(weight_decay=0.01)
    if shard is None:
        return RowStore(N, D, optimizer, **options)
    return ShardedRowStore(N, D, optimizer, shard=shard, **options)


def on_two_nodes(work, places=((0, True), (1, True))) -> list:
    """``work(shard)`` in one thread per process, each with its own gloo group, at its ``places``
    (node, serves the node's rows); their results."""
    rendezvous = dist.HashStore()
    results: list = [None] * len(places)

    def node(rank: int) -> None:
        group = dist.ProcessGroupGloo(rendezvous, rank, len(places), timedelta(seconds=60))
        node, serves = places[rank]
        shard = RowShard(node, NODES, serves, lambda tensor: group.allreduce([tensor]).wait())
        try:
            results[rank] = work(shard)
        except Exception as error:  # noqa: BLE001 - handed to the test's thread
            results[rank] = error

    threads = [threading.Thread(target=node, args=(rank,)) for rank in range(len(places))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


@pytest.mark.parametrize("mode", ["eager", "lazy"])
def test_two_shards_equal_one_whole_store_and_resume_exactly(mode):
    steps = batches(epochs=3)
    whole = new_store(mode)
    train(whole, steps)
    expected = whole.state_dict()

    def sharded_run(shard: RowShard) -> tuple[dict, int, dict]:
        store = new_store(mode, shard)
        assert store.num_rows == 4 and store.tables["rows"].shape == (4, D)
        train(store, steps[:5])
        saved = store.state_dict()
        resumed = new_store(mode, shard)
        resumed.load_state_dict(saved)
        train(resumed, steps[5:], first=5)
        owned = int(store.shard.owns(torch.arange(N)).sum())
        return resumed.state_dict(), owned, saved

    results = on_two_nodes(sharded_run)
    for got, _, saved in results:
        for name, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(got[name], value), (mode, name)
        assert got["global_step"] == expected["global_step"] == len(steps)
        assert not torch.equal(saved["rows"], got["rows"])  # the resumed part moved the rows
    assert [owned for _, owned, _ in results] == [4, 3]


def test_a_second_process_of_a_node_adds_nothing_and_gets_every_row():
    """Node 0 of two processes (the second serves nothing, as a shared store's reader) and node 1:
    all three load and checkpoint what one whole store does."""
    steps = batches(epochs=2)
    whole = new_store("lazy")
    train(whole, steps)
    expected = whole.state_dict()

    def run(shard: RowShard) -> dict:
        store = new_store("lazy", shard)
        train(store, steps)
        return store.state_dict()

    for got in on_two_nodes(run, places=((0, True), (0, False), (1, True))):
        assert all(torch.equal(got[name], expected[name]) for name in ("rows", "exp_avg_sq"))


def test_shards_start_from_the_whole_tables_rows():
    whole = new_store("lazy").state_dict()

    def start(shard: RowShard) -> dict:
        return new_store("lazy", shard).state_dict()

    for got in on_two_nodes(start):
        assert all(torch.equal(got[name], whole[name]) for name in ("rows", "exp_avg", "last_step"))


def test_a_snapshot_of_other_size_is_refused():
    def reload(shard: RowShard) -> str:
        with pytest.raises(ValueError, match=r"snapshot has \(6, 3\) rows, this store \(7, 3\)"):
            new_store("eager", shard).load_state_dict(RowStore(6, D, RowAdamW(0.0)).state_dict())
        return "refused"

    assert on_two_nodes(reload) == ["refused", "refused"]
