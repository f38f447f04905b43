"""s-DIET's row store, whole or sharded over nodes (s-DIET paper, §5.1; docs/methods/sdiet.md): head
rows and their optimiser state outside ``nn.Parameter`` s, in one ``N x K x D`` table (a row beside
its optimiser states: one gather, copy and scatter per batch) with last-step counters, on ``cpu``,
``gpu`` or ``disk``, shared by a host's processes (one writes a step's rows a step late, after a
collective) or sharded over nodes. Zero-gradient steps of the rows absent from a batch (s-DIET
paper, App. D.2, Eq. 18-20, sign corrected): ``"eager"`` (paper) applies ``T = N/B - m`` right
after a row's step; ``"lazy"`` (exact, ours) applies ``T = s - last - 1`` when the row is next
loaded at step ``s``."""

from __future__ import annotations

import math
import mmap
import os
import shutil
import socket
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from solo_diet.core.sdiet.optim import RowOptimizer, RowState

PLACEMENTS = ("cpu", "gpu", "disk")
INIT_CHUNK_ELEMENTS = 1 << 24
Device = Union[str, torch.device]
MODES = ("eager", "lazy")
MAX_PENDING_WRITES = 2  # write-backs in flight before a new one waits (bounds pinned buffers)
EXCHANGE_CHUNK_ELEMENTS = 1 << 24  # bounds the buffer of a sharded checkpoint's gather
Copied = tuple[Tensor, Optional[torch.cuda.Event]]  # a copy's values and the event that ends it
Rows = tuple[Tensor, RowState]  # rows and their optimiser state


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


class TransferQueue:
    """The row store's transfers: host work on one worker thread, copies on a side stream."""

    def __init__(self, host_tables: bool, side_stream: bool):
        self.host_tables = host_tables
        self.stream = torch.cuda.Stream() if side_stream else None
        self._worker: Optional[ThreadPoolExecutor] = None
        self._writes: list[Future] = []
        self._deferred_write: Optional[Callable[[], None]] = None

    def submit(self, work: Callable[[], Any]) -> Future:
        """Run ``work`` on the worker thread (host tables), or now (``gpu`` tables)."""
        if not self.host_tables:
            done: Future = Future()
            done.set_result(work())
            return done
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solo-diet-rows")
        return self._worker.submit(work)

    def write(self, write: Callable[[], None], *, deferred: bool) -> None:
        """Queue a write-back (``deferred``: the writer's, one step late); two in flight at most."""
        if deferred:
            self._deferred_write = write
            return
        self._writes.append(self.submit(write))
        while len(self._writes) > MAX_PENDING_WRITES or (self._writes and self._writes[0].done()):
            self._writes.pop(0).result()

    def submit_deferred_write(self) -> None:
        """Submit the previous step's deferred write (after this step's collective)."""
        if self._deferred_write is not None:
            self._writes.append(self.submit(self._deferred_write))
            self._deferred_write = None

    def commit(self) -> None:
        """Finish every pending write (the deferred one included)."""
        self.submit_deferred_write()
        while self._writes:
            self._writes.pop(0).result()

    def side_copies(self, device: torch.device) -> bool:
        """Rows for ``device`` travel on the side stream (host tables, CUDA device)."""
        return self.stream is not None and device.type == "cuda"

    def to_device(self, values: Tensor, device: torch.device) -> Copied:
        """``values`` (pinned, for a side copy) on ``device``, and the event that ends the copy."""
        if not self.side_copies(device):
            return values.to(device), None
        with torch.cuda.stream(self.stream):
            values = values.to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return values, event

    def to_table(self, values: Tensor, device: torch.device, dtype: torch.dtype) -> Copied:
        """``values`` for a table on ``device`` in ``dtype`` (CUDA to host: pinned, side stream)."""
        if self.stream is None or not values.is_cuda:
            return values.to(device=device, dtype=dtype), None
        self.stream.wait_stream(torch.cuda.current_stream(values.device))
        with torch.cuda.stream(self.stream):
            values.record_stream(self.stream)
            buffer = torch.empty(values.shape, dtype=dtype, pin_memory=True)
            values = buffer.copy_(values, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return values, event


class RowStore(RowTables):
    """Head rows, row-wise optimiser state and last-step counters (``mode``: eager or lazy)."""

    def __init__(
        self,
        num_rows: int,
        dim: int,
        optimizer: RowOptimizer,
        *,
        mode: str = "eager",
        eager_steps: float = 0.0,
        **table_options: Any,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        super().__init__(num_rows, dim, ("rows", *optimizer.state_names), **table_options)
        self.optimizer = optimizer
        self.mode = mode
        self.eager_steps = float(eager_steps)
        self.global_step = 0
        self.transfers = TransferQueue(
            self.placement != "gpu", self.cuda and self.device.type == "cpu"
        )
        self._prefetched: Optional[tuple[Tensor, Future]] = None
        self.prefetch_hits = 0  # loads served by a prefetch (benchmarks check the overlap)

    def commit(self) -> None:
        """Finish every pending write-back (the writer's deferred one included)."""
        self.transfers.commit()

    def synchronize(self) -> None:
        """:meth:`commit`, then wait for every process of a shared store (at epoch boundaries)."""
        self.commit()
        if self.sharing is not None:
            self.sharing.barrier()

    def prefetch(self, indices: Tensor, device: Device) -> None:
        """Start moving a coming batch's rows to ``device`` for :meth:`load` of the same indices."""
        device = torch.device(device)
        self.transfers.submit_deferred_write()
        indices = indices.detach().cpu().clone()
        pinned = self.transfers.side_copies(device)

        def gather() -> Copied:
            return self.transfers.to_device(self.gather(indices, pinned=pinned), device)

        self._prefetched = (indices, self.transfers.submit(gather))

    def load(self, indices: Tensor, device: Device, *, lr: Optional[float] = None) -> Rows:
        """Copies of the rows and state of ``indices`` on ``device``."""
        device = torch.device(device)
        self.transfers.submit_deferred_write()
        values = self._take_prefetched(indices, device)
        if values is None:
            self.commit()
            values = self.gather(indices).to(device, non_blocking=True)
        rows, *state = values.unbind(1)
        if self.mode == "lazy":
            if lr is None:
                raise ValueError("RowStore.load needs the current lr in lazy mode")
            last = self.last_step.index_select(0, self.table_index(indices))
            steps = (self.global_step - 1 - last).to(device=device, dtype=rows.dtype)
            return self.optimizer.zero_grad_steps(rows, tuple(state), steps, lr)
        return rows, tuple(state)

    def _take_prefetched(self, indices: Tensor, device: torch.device) -> Optional[Tensor]:
        """The prefetched rows if they are those of ``indices`` on ``device``, else None."""
        if self._prefetched is None:
            return None
        fetched_indices, gathered = self._prefetched
        self._prefetched = None
        values, event = gathered.result()
        if values.device != device or not torch.equal(fetched_indices, indices.detach().cpu()):
            return None
        if event is not None:  # a side copy: allocated on the side stream, used on the current one
            current = torch.cuda.current_stream(device)
            current.wait_event(event)
            values.record_stream(current)
        self.prefetch_hits += 1
        return values

    def store(self, indices: Tensor, rows: Tensor, state: RowState) -> None:
        """Write rows and state back as of ``global_step - 1`` (asynchronously to host tables)."""
        prefetched = self._prefetched
        if prefetched is not None and bool(torch.isin(prefetched[0], indices.detach().cpu()).any()):
            self._drop_prefetch()  # it read rows now being stored (possible across epochs)
        if not self.writer:
            return
        self.transfers.submit_deferred_write()
        idx = self.table_index(indices)
        # a new B x K x D tensor: the caller may go on using its tensors while the write is pending
        values = torch.stack([rows.detach(), *(s.detach() for s in state)], dim=1)
        values, event = self.transfers.to_table(values, self.device, self.dtype)
        write = partial(self.scatter, idx, values, self.global_step - 1, event)
        self.transfers.write(write, deferred=self.sharing is not None)

    def _drop_prefetch(self) -> None:
        """Forget the prefetch once its gather (which reads the tables) has finished."""
        if self._prefetched is not None:
            self._prefetched[1].result()
            self._prefetched = None

    def update(
        self,
        indices: Tensor,
        rows: Tensor,
        state: RowState,
        grad: Tensor,
        *,
        lr: float,
        write_back: bool = True,
        eager_steps: Optional[float] = None,
    ) -> Rows:
        """One real optimiser step of resident rows (stored with ``write_back``)."""
        with torch.no_grad():
            rows, state = self.optimizer.step(
                rows.detach(), tuple(s.detach() for s in state), grad, lr
            )
            self.global_step += 1
            if write_back:
                if self.mode == "eager":
                    steps = self.eager_steps if eager_steps is None else eager_steps
                    rows, state = self.optimizer.zero_grad_steps(rows, state, steps, lr)
                self.store(indices, rows, state)
        return rows, state

    def state_dict(self) -> dict:
        """Exact snapshot (CPU copies of every table, the counters and the step)."""
        self.commit()
        return {**self.snapshot(), "global_step": self.global_step, "mode": self.mode}

    def load_state_dict(self, snapshot: dict) -> None:
        """Restore a :meth:`state_dict` of the same shapes (collective)."""
        if missing := [n for n in (*self.names, "last_step", "global_step") if n not in snapshot]:
            raise KeyError(
                f"row-store snapshot lacks {missing}; was it saved with another head_optimizer?"
            )
        if tuple(snapshot["rows"].shape) != (self.total_rows, self.dim):
            raise ValueError(
                f"row-store snapshot has {tuple(snapshot['rows'].shape)} rows, this store "
                f"{(self.total_rows, self.dim)} (num_samples x proj_output_dim)"
            )
        self.commit()
        self._drop_prefetch()
        self.restore(snapshot)
        self.global_step = int(snapshot["global_step"])
        if self.sharing is not None:
            self.sharing.barrier()


class ShardedRowStore(RowStore):
    """A ``RowStore`` holding only ``shard``'s rows (indices stay global)."""

    def prefetch(self, indices: Tensor, device: Device) -> None:
        """Nothing: sharded rows arrive through the collective of :meth:`load`."""

    def load(self, indices: Tensor, device: Device, *, lr: Optional[float] = None) -> Rows:
        """The rows and state of the global ``indices`` from their owners (collective)."""
        device = torch.device(device)
        shape = (indices.numel(), len(self.names), self.dim)
        values = torch.zeros(shape, dtype=self.dtype, device=device)
        if self.shard.contributes:
            owned = self.shard.owns(indices)
            rows, state = super().load(self.shard.local(indices[owned]), device, lr=lr)
            values[owned.to(device)] = torch.stack([rows, *state], dim=1)
        self.shard.all_reduce(values)
        rows, *state = values.unbind(1)
        return rows, tuple(state)

    def store(self, indices: Tensor, rows: Tensor, state: RowState) -> None:
        """The contributor writes back its node's rows of ``indices``."""
        if not self.shard.contributes:
            return
        owned = self.shard.owns(indices)
        on_device = owned.to(rows.device)
        owned_state = tuple(s[on_device] for s in state)
        super().store(self.shard.local(indices[owned]), rows[on_device], owned_state)

    def state_dict(self, keep: bool = True) -> dict:
        """The whole table (collective); a process that does not ``keep`` it gets ``{}``."""
        self.commit()
        local = self.snapshot() if self.shard.contributes else None
        whole = {
            name: self._gather(name, None if local is None else local[name], keep)
            for name in (*self.names, "last_step")
        }
        return {**whole, "global_step": self.global_step, "mode": self.mode} if keep else {}

    def _gather(self, name: str, local: Optional[Tensor], keep: bool) -> Optional[Tensor]:
        """Every node's rows of table ``name``, in chunks, by sums of the owners' rows."""
        width, dtype = ((), torch.int64) if name == "last_step" else ((self.dim,), self.dtype)
        whole = torch.empty((self.total_rows, *width), dtype=dtype) if keep else None
        chunk = max(1, EXCHANGE_CHUNK_ELEMENTS // max(self.dim, 1))
        for node in range(self.shard.nodes):
            owned = self.shard.owned_rows(self.total_rows, node)
            for start in range(0, owned, chunk):
                stop = min(start + chunk, owned)
                part = torch.zeros((stop - start, *width), dtype=dtype, device=self.shard.device)
                if local is not None and node == self.shard.node:
                    part.copy_(local[start:stop])
                self.shard.all_reduce(part)
                if whole is not None:
                    first = node + start * self.shard.nodes
                    whole[first : node + stop * self.shard.nodes : self.shard.nodes] = part.cpu()
        return whole
