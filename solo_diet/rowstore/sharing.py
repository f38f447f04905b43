"""One row store per host for its DDP processes.

Several DDP processes of one host share one ``"cpu"`` (a file in ``/dev/shm``) or ``"disk"`` store:
one process of the host creates and writes the tables, the others map the same files and only read.
Every process computes the same update (the batch is gathered), so only the writer stores it, one
step late: a row written at step ``t`` is written during step ``t + 1``, after a collective that
every process passes only once it has loaded step ``t``'s rows; the rows of step ``t + 1`` are
disjoint from those of step ``t`` within an epoch (our design), and the caller synchronises at epoch
boundaries (:meth:`~solo_diet.rowstore.RowStore.synchronize`).

A run over several nodes keeps one store per node, each written by its own writer (every process
computes the same update, so the nodes' stores stay equal), or, sharded (:class:`RowShard`), one
part of the rows per node: node ``k`` of ``nodes`` owns the rows whose index is ``k`` modulo
``nodes``.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class HostSharing:
    """One store per host for its DDP processes (module docstring).

    Args:
        name: file-name prefix, the same on every process of the host and unique to the run.
        writer: whether this process creates and writes the tables (one per host).
        barrier: waits for every process (``torch.distributed.barrier``).
        directory: folder of the shared ``"cpu"`` tables (memory-backed ``/dev/shm``).
    """

    name: str
    writer: bool
    barrier: Callable[[], None]
    directory: str = "/dev/shm"


def host_sharing(
    prefix: str = "solo_diet_rows", directory: str = "/dev/shm", node: int = 0
) -> Optional[HostSharing]:
    """:class:`HostSharing` for the initialised ``torch.distributed`` group; None without one or for
    one process. The processes of one node (same host name and ``node``, the node rank of a run
    over several machines) share a store; the lowest global rank of each writes. The file prefix
    carries rank 0's random token and the node, so two nodes on one host keep apart. Collective:
    every process must call it."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    places: list = [None] * dist.get_world_size()
    dist.all_gather_object(places, (socket.gethostname(), node))
    token = [uuid.uuid4().hex]
    dist.broadcast_object_list(token, src=0)
    rank = dist.get_rank()
    writer = places.index(places[rank]) == rank
    return HostSharing(f"{prefix}_{token[0]}_node{node}", writer, dist.barrier, directory)


@dataclass(frozen=True)
class RowShard:
    """This node's part of the rows: node ``node`` of ``nodes`` owns the rows ``index % nodes ==
    node``, at table row ``index // nodes`` (each node's table has ``ceil(N / nodes)`` rows).

    Args:
        node: this process's node.
        nodes: how many nodes share the rows out.
        contributes: this process serves its node's rows to the others (one per node: the shared
            store's writer).
        all_reduce: sums a tensor over every process, in place (``torch.distributed.all_reduce``).
        device: where the collective's tensors live (the CUDA device under NCCL).
    """

    node: int
    nodes: int
    contributes: bool
    all_reduce: Callable[[Tensor], None]
    device: torch.device = torch.device("cpu")

    def table_rows(self, num_rows: int) -> int:
        """``ceil(N / nodes)``: the rows of every node's table."""
        return -(-num_rows // self.nodes)

    def owned_rows(self, num_rows: int, node: int) -> int:
        """How many of the ``N`` rows ``node`` owns."""
        return len(range(node, num_rows, self.nodes))

    def owns(self, indices: Tensor) -> Tensor:
        """Which ``indices`` this node owns (a bool mask)."""
        return indices % self.nodes == self.node

    def local(self, indices: Tensor) -> Tensor:
        """Table rows of owned ``indices``."""
        return indices // self.nodes


def node_shard(node: int, nodes: int, contributes: bool, device: torch.device) -> RowShard:
    """:class:`RowShard` over the initialised ``torch.distributed`` group (``node`` and ``nodes``
    may count processes instead: then each process holds a part)."""
    return RowShard(node, nodes, contributes, dist.all_reduce, torch.device(device))
