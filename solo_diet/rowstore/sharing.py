"""One row store per host for its DDP processes.

Several DDP processes of one host share one ``"cpu"`` (a file in ``/dev/shm``) or ``"disk"`` store:
one process of the host creates and writes the tables, the others map the same files and only read.
Every process computes the same update (the batch is gathered), so only the writer stores it, one
step late: a row written at step ``t`` is written during step ``t + 1``, after a collective that
every process passes only once it has loaded step ``t``'s rows; the rows of step ``t + 1`` are
disjoint from those of step ``t`` within an epoch (our design), and the caller synchronises at epoch
boundaries (:meth:`~solo_diet.rowstore.RowStore.synchronize`).

A run over several nodes keeps one store per node, each written by its own writer (every process
computes the same update, so the nodes' stores stay equal).
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass
from typing import Callable, Optional

import torch.distributed as dist


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
