"""One row store per host for its DDP processes, or one part of the rows per node.

The processes of a host share one ``cpu`` (a ``/dev/shm`` file) or ``disk`` store: one writes, the
others map the same files and read. Every process computes the same update (the batch is
gathered), so the writer stores it one step late, after a collective that every process passes
only once it has loaded the rows; a step's rows are disjoint from the previous step's within an
epoch (our design), and the caller synchronises at epoch boundaries. Sharded (:class:`RowShard`),
node ``k`` of ``nodes`` owns the rows whose index is ``k`` modulo ``nodes``.
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
    """One store per host (module docstring): the file-name prefix ``name`` (the same on every
    process of the host, unique to the run), whether this process is the ``writer``, a ``barrier``
    over every process and the ``directory`` of shared ``cpu`` tables.
    """

    name: str
    writer: bool
    barrier: Callable[[], None]
    directory: str = "/dev/shm"


def host_sharing(
    prefix: str = "solo_diet_rows", directory: str = "/dev/shm", node: int = 0
) -> Optional[HostSharing]:
    """:class:`HostSharing` for the initialised ``torch.distributed`` group (None without one or
    for one process): the processes of one host and ``node`` share a store, the lowest global rank
    writes, the prefix carries rank 0's random token and the node. Collective."""
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
    """Node ``node`` of ``nodes`` owns the rows ``index % nodes == node``, at table row
    ``index // nodes``; ``contributes``: this process serves its node's rows (the shared store's
    writer); ``all_reduce`` sums in place over every process, on ``device``.
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
