"""The row store over several nodes: one store per node (its key is the host name and the node
rank), each with its own writer, even when two nodes run on one host; the processes of one node
share one."""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from solo_diet.core.sdiet.optim import RowAdamW
from solo_diet.core.sdiet.rowstore import RowStore, host_sharing

# the node of rank 0 and rank 1 in each layout: two nodes on one host, then one node of two
LAYOUTS = {"two nodes": [0, 1], "one node": [0, 0]}


def _worker(rank: int, init_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        for layout, nodes_of_ranks in LAYOUTS.items():
            sharing = host_sharing(directory=out, node=nodes_of_ranks[rank])
            store = RowStore(6, 2, RowAdamW(weight_decay=0.0), sharing=sharing, seed=1)
            idx = torch.tensor([rank, 2 + rank])  # each process stores other rows
            rows, state = store.load(idx, "cpu")
            store.store(idx, rows + 1.0 + rank, state)
            store.synchronize()
            record = {"name": sharing.name, "writer": sharing.writer}
            record["rows"] = store.tables["rows"].tolist()
            Path(out, f"{layout} rank{rank}.json").write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> dict:
    """{layout: [rank 0's record, rank 1's]} from one pair of gloo processes."""
    out = tmp_path_factory.mktemp("nodes")
    mp.spawn(_worker, args=(str(out / "init"), str(out)), nprocs=2)
    return {
        layout: [json.loads((out / f"{layout} rank{r}.json").read_text()) for r in (0, 1)]
        for layout in LAYOUTS
    }


def test_two_nodes_on_one_host_keep_a_store_each_with_its_own_writer(layouts):
    """Ranks 0 and 1 as nodes 0 and 1 (as one host playing two nodes): both write, under different
    names, and each store holds only what its own process stored (on a real cluster every process
    stores the same update, so the stores agree)."""
    first, second = layouts["two nodes"]
    assert first["writer"] and second["writer"]
    assert first["name"] != second["name"] and first["name"].endswith("_node0")
    initial = RowStore(6, 2, RowAdamW(weight_decay=0.0), seed=1).tables["rows"]
    for rank, record in enumerate((first, second)):
        rows = torch.tensor(record["rows"], dtype=initial.dtype)
        changed = [rank, 2 + rank]
        assert torch.equal(rows[changed], initial[changed] + 1.0 + rank)
        kept = [i for i in range(6) if i not in changed]
        assert torch.equal(rows[kept], initial[kept])


def test_the_processes_of_one_node_share_one_store_with_one_writer(layouts):
    """Both ranks on node 0 of this host: rank 0 writes, rank 1 maps the same table and sees rank
    0's write (rank 1's own store is dropped: every process computes the same update)."""
    first, second = layouts["one node"]
    assert first["writer"] and not second["writer"] and first["name"] == second["name"]
    assert first["rows"] == second["rows"]
    initial = RowStore(6, 2, RowAdamW(weight_decay=0.0), seed=1).tables["rows"]
    rows = torch.tensor(first["rows"], dtype=initial.dtype)
    assert torch.equal(rows[[0, 2]], initial[[0, 2]] + 1.0)
    assert torch.equal(rows[[1, 3, 4, 5]], initial[[1, 3, 4, 5]])
