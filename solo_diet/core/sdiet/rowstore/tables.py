"""The row store's ``N x K x D`` table (a row beside its optimiser states: one gather, copy and
scatter per batch) and last-step counters, on ``cpu``, ``gpu`` or ``disk``, shared by a host's
processes (one writes a step's rows a step late, after a collective) or sharded over nodes."""

from __future__ import annotations

import math
import mmap
import os
import shutil
import socket
import uuid
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

PLACEMENTS = ("cpu", "gpu", "disk")
INIT_CHUNK_ELEMENTS = 1 << 24
Device = Union[str, torch.device]


@dataclass(frozen=True)
class HostSharing:
    """One store per host: file prefix, ``writer``, a ``barrier`` and the shared ``directory``."""

    name: str
    writer: bool
    barrier: Callable[[], None]
    directory: str = "/dev/shm"


def host_sharing(directory: str = "/dev/shm", node: int = 0) -> Optional[HostSharing]:
    """:class:`HostSharing` of host ``node``'s processes (None for one). Collective."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    places: list = [None] * dist.get_world_size()
    dist.all_gather_object(places, (socket.gethostname(), node))
    token = [uuid.uuid4().hex]
    dist.broadcast_object_list(token, src=0)
    rank = dist.get_rank()
    writer = places.index(places[rank]) == rank
    return HostSharing(f"solo_diet_rows_{token[0]}_node{node}", writer, dist.barrier, directory)


@dataclass(frozen=True)
class RowShard:
    """Node ``node`` of ``nodes`` owns the rows ``index % nodes == node``."""

    node: int
    nodes: int
    contributes: bool
    all_reduce: Callable[[Tensor], None]
    device: torch.device = torch.device("cpu")

    def owned_rows(self, num_rows: int, node: int = 0) -> int:
        """How many of the ``N`` rows ``node`` owns (node 0: ``ceil(N / nodes)``, every table's)."""
        return len(range(node, num_rows, self.nodes))

    def owns(self, indices: Tensor) -> Tensor:
        return indices % self.nodes == self.node

    def local(self, indices: Tensor) -> Tensor:
        """Table rows of owned ``indices``."""
        return indices // self.nodes


def node_shard(node: int, nodes: int, contributes: bool, device: torch.device) -> RowShard:
    """:class:`RowShard` over the initialised ``torch.distributed`` group."""
    return RowShard(node, nodes, contributes, dist.all_reduce, torch.device(device))


class RowTables:
    """The ``N x K x D`` table (slots ``names``: ``"rows"``, then the optimiser's) and each row's
    last real step; rows start ``U(-1/sqrt(D), 1/sqrt(D))`` from ``seed`` (our choice), state 0."""

    def __init__(
        self,
        num_rows: int,
        dim: int,
        names: Sequence[str],
        *,
        placement: str = "cpu",
        device: Optional[Device] = None,
        directory: Optional[str] = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        sharing: Optional[HostSharing] = None,
        shard: Optional[RowShard] = None,
    ):
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if placement == "disk" and not directory:
            raise ValueError("placement='disk' needs a directory for its memory-mapped files")
        if sharing is not None and placement == "gpu":
            raise ValueError(
                "placement='gpu' cannot be shared between processes: each GPU holds its own table"
            )
        self.total_rows, self.shard, self.dim, self.names = num_rows, shard, dim, tuple(names)
        self.num_rows = num_rows if shard is None else shard.owned_rows(num_rows)
        self.placement, self.dtype, self.sharing = placement, dtype, sharing
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cpu")
        if placement == "gpu":
            self.device = torch.device(device or ("cuda" if self.cuda else "cpu"))
        self.writer = sharing is None or sharing.writer
        self.shared_files: list[str] = []
        if sharing is not None and placement == "cpu":
            # nothing is allocated yet: every process of the host sees the same free space
            sharing.barrier()
            self._check_shared_memory(sharing.directory)

        if self.writer:
            self._allocate_all(directory)
            self._initialise_rows(seed)
            for name in self.names[1:]:
                self.tables[name].zero_()
            self.last_step.fill_(-1)
        if sharing is not None:
            sharing.barrier()  # the writer's files exist and hold the initial tables
            if not self.writer:
                self._allocate_all(directory)
            sharing.barrier()  # every process has mapped them
            if self.writer and placement == "cpu":
                for path in self.shared_files:  # stays mapped; no /dev/shm file left on a crash
                    os.unlink(path)

    def _initialise_rows(self, seed: int) -> None:
        """``U(-1/sqrt(D), 1/sqrt(D))`` in row chunks from one seeded stream."""
        bound = 1.0 / math.sqrt(self.dim)
        generator = torch.Generator().manual_seed(seed)
        chunk_rows = max(1, INIT_CHUNK_ELEMENTS // max(self.dim, 1))
        rows, num_rows, shard = self.tables["rows"], self.total_rows, self.shard
        for start in range(0, num_rows, chunk_rows):
            drawn = torch.empty((min(chunk_rows, num_rows - start), self.dim), dtype=self.dtype)
            drawn.uniform_(-bound, bound, generator=generator)
            if shard is None:
                rows[start : start + len(drawn)].copy_(drawn)
                continue
            first = start + (shard.node - start) % shard.nodes  # this node's first row in the chunk
            kept = drawn[first - start :: shard.nodes]
            rows[first // shard.nodes : first // shard.nodes + len(kept)].copy_(kept)
        if shard is not None:
            rows[shard.owned_rows(num_rows, shard.node) :].zero_()

    def _check_shared_memory(self, directory: str) -> None:
        """Refuse a too small ``/dev/shm`` (touching a page beyond its size kills the process)."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        needed = self.num_rows * (self.dim * itemsize * len(self.names) + 8)
        free = shutil.disk_usage(directory).free
        if free < needed:
            raise RuntimeError(
                f"the shared row store needs {needed / 2**30:.2f} GiB in {directory}, which has "
                f"{free / 2**30:.2f} GiB free: enlarge it (docker: --shm-size) or use "
                "placement='disk'."
            )

    def _allocate_all(self, directory: Optional[str]) -> None:
        """One ``N x K x D`` table; ``tables[name]`` are its ``N x D`` views."""
        shape = (self.num_rows, len(self.names), self.dim)
        self.table = self._allocate("table", shape, self.dtype, directory)
        self.tables = {name: self.table[:, k] for k, name in enumerate(self.names)}
        self.last_step = self._allocate("last_step", (self.num_rows,), torch.int64, directory)

    def _allocate(self, name: str, shape: tuple, dtype: torch.dtype, directory: Optional[str]):
        if self.placement == "disk":
            return self._map_file(os.path.join(directory, f"{name}.bin"), shape, dtype)
        if self.sharing is not None:
            path = os.path.join(self.sharing.directory, f"{self.sharing.name}.{name}.bin")
            self.shared_files.append(path)
            size = math.prod(shape)
            return torch.from_file(path, shared=True, size=size, dtype=dtype).view(shape)
        if self.placement == "gpu":
            return torch.empty(shape, dtype=dtype, device=self.device)
        return torch.empty(shape, dtype=dtype, pin_memory=self.cuda)

    def _map_file(self, path: str, shape: tuple, dtype: torch.dtype) -> Tensor:
        """A table memory-mapped from ``path`` (the writer creates it), no read-ahead."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np_dtype = torch.empty((), dtype=dtype).numpy().dtype
        size = math.prod(shape) * np_dtype.itemsize
        with open(path, "w+b" if self.writer else "r+b") as handle:
            if self.writer:
                handle.truncate(size)
            mapped = mmap.mmap(handle.fileno(), size)
        mapped.madvise(mmap.MADV_RANDOM)
        return torch.from_numpy(np.frombuffer(mapped, dtype=np_dtype).reshape(shape))

    def table_index(self, indices: Tensor) -> Tensor:
        """``indices`` as long on the table's device (to CUDA via pinned memory: no wait)."""
        indices = indices.to(dtype=torch.long)
        if self.device.type == "cuda" and indices.device.type == "cpu":
            return indices.pin_memory().to(self.device, non_blocking=True)
        return indices.to(self.device)

    def gather(self, indices: Tensor, pinned: bool = False) -> Tensor:
        """``B x K x D`` rows and state of ``indices`` (page-locked when ``pinned``)."""
        idx = self.table_index(indices)
        if not pinned:
            return self.table.index_select(0, idx)
        shape = (idx.numel(), len(self.names), self.dim)
        return torch.index_select(
            self.table, 0, idx, out=torch.empty(shape, dtype=self.dtype, pin_memory=True)
        )

    def scatter(
        self, idx: Tensor, values: Tensor, last_step: int, event: Optional[torch.cuda.Event]
    ) -> None:
        """Write ``B x K x D`` rows and state into the table once ``event`` (their copy) is done."""
        if event is not None:
            event.synchronize()
        self.table.index_copy_(0, idx, values)
        self.last_step.index_fill_(0, idx, last_step)

    def snapshot(self) -> dict:
        """Contiguous CPU copies of every ``N x D`` slot and of the counters."""
        snapshot = {
            name: torch.empty((self.num_rows, self.dim), dtype=self.dtype).copy_(table)
            for name, table in self.tables.items()
        }
        snapshot["last_step"] = self.last_step.to("cpu", copy=True)
        return snapshot

    def restore(self, snapshot: dict) -> None:
        """Copy a :meth:`snapshot` back (a shard only its rows; the writer only)."""
        if not self.writer:
            return
        own = slice(None) if self.shard is None else slice(self.shard.node, None, self.shard.nodes)
        for name, table in (*self.tables.items(), ("last_step", self.last_step)):
            kept = snapshot[name][own]
            table[: len(kept)].copy_(kept)
