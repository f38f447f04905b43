"""s-DIET head rows and their optimiser state, kept outside ``nn.Parameter`` s (seed 000 §5.1, Listing 1).

The ``N x D`` head ``W_H`` and its row-wise optimiser state (AdamW ``exp_avg``/``exp_avg_sq`` or SGDW
``momentum_buffer``), side by side in one ``N x K x D`` table, live in host RAM (``storage="cpu"``, pinned
when CUDA is available), on the accelerator (``"gpu"``) or in memory-mapped files (``"disk"``). Only the rows of a batch travel to the
device; after their update they are written back. With host tables the row copies run on a worker
thread in submission order (gathers of prefetched rows, scatters of written-back rows after their
asynchronous device -> host copy), so the training thread does no row copying and waits for none; a
load that was not prefetched first waits for every pending write.

Zero-gradient steps of rows absent from a batch (spec §3.4, §3.6):

* ``"eager"`` (paper, App. D.2): right after a row's real step, apply ``eager_steps`` zero-gradient
  steps in closed form (``T = N/B - 1``, a float) as if the row were absent until its next visit.
* ``"lazy"`` (exact): remember each row's last real step; when the row is next loaded at global step
  ``s``, apply ``T = s - last - 1`` zero-gradient steps with the current lr. Reproduces a full-table
  optimiser whose absent rows get zero gradients (up to the paper's eps approximation and lr drift).

Several DDP processes of one host share one ``"cpu"`` (a file in ``/dev/shm``) or ``"disk"`` store
(:class:`HostSharing`): one process of the host creates and writes the tables, the others map the
same files and only read. Every process computes the same update (the batch is gathered), so only
the writer stores it, one step late: a row written at step ``t`` is written during step ``t + 1``,
after a collective that every process passes only once it has loaded step ``t``'s rows; the rows of
step ``t + 1`` are disjoint from those of step ``t`` within an epoch (spec §3.2), and the caller
synchronises at epoch boundaries (:meth:`RowStore.commit`, then a barrier).
"""

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
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from solo_diet.optim import RowOptimizer

STORAGES = ("cpu", "gpu", "disk")
INIT_CHUNK_ELEMENTS = 1 << 24
MODES = ("eager", "lazy")
MAX_PENDING_WRITES = 2  # write-backs in flight before store() waits for the oldest (bounds pinned buffers)

Device = Union[str, torch.device]


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


def host_sharing(prefix: str = "solo_diet_rows", directory: str = "/dev/shm") -> Optional[HostSharing]:
    """:class:`HostSharing` for the initialised ``torch.distributed`` group; None without one or for one
    process. The lowest rank of each host writes; the file prefix carries rank 0's random token.
    Collective: every process must call it."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    hosts: list = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    token = [uuid.uuid4().hex]
    dist.broadcast_object_list(token, src=0)
    rank = dist.get_rank()
    return HostSharing(f"{prefix}_{token[0]}", hosts.index(hosts[rank]) == rank, dist.barrier, directory)


class RowStore:
    """Head rows + row-wise optimiser state + per-row last-step counters.

    Args:
        num_rows: N, one row per training sample.
        dim: D, width of a row (the projector output).
        optimizer: row-wise optimiser (:class:`solo_diet.optim.RowAdamW` or ``RowSGDW``).
        mode: ``"eager"`` or ``"lazy"`` zero-gradient steps (module docstring).
        eager_steps: zero-gradient steps applied after each write-back in eager mode (``N/B - 1``).
        storage: ``"cpu"`` (default), ``"gpu"`` (the ``device`` argument) or ``"disk"`` (``directory``).
        device: device of the ``"gpu"`` storage (defaults to ``cuda`` when available, else ``cpu``).
        directory: folder of the ``"disk"`` storage's memory-mapped files (created, files overwritten).
        seed: seed of the row initialisation ``U(-1/sqrt(D), 1/sqrt(D))`` (spec A7; state starts at 0).
        dtype: dtype of the tables (``torch.float32``; ``float64`` for exact tests).
        sharing: share a ``"cpu"`` or ``"disk"`` store between the processes of a host (:class:`HostSharing`).
    """

    def __init__(
        self,
        num_rows: int,
        dim: int,
        optimizer: RowOptimizer,
        *,
        mode: str = "eager",
        eager_steps: float = 0.0,
        storage: str = "cpu",
        device: Optional[Device] = None,
        directory: Optional[str] = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        sharing: Optional[HostSharing] = None,
    ):
        if storage not in STORAGES:
            raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if eager_steps < 0:
            raise ValueError(f"eager_steps must be >= 0, got {eager_steps}")
        if storage == "disk" and not directory:
            raise ValueError("storage='disk' needs a directory for its memory-mapped files")
        if sharing is not None and storage == "gpu":
            raise ValueError("storage='gpu' cannot be shared between processes: each GPU holds its own table")
        self.num_rows, self.dim = num_rows, dim
        self.optimizer = optimizer
        self.mode = mode
        self.eager_steps = float(eager_steps)
        self.storage = storage
        self.global_step = 0
        self.dtype = dtype
        self.names = ("rows", *optimizer.state_names)
        self._cuda = torch.cuda.is_available()
        self.device = torch.device(device or ("cuda" if self._cuda else "cpu")) if storage == "gpu" else torch.device("cpu")
        self.sharing = sharing
        self.writer = sharing is None or sharing.writer
        self.shared_files: list[str] = []
        if sharing is not None and storage == "cpu":
            sharing.barrier()  # nothing is allocated yet: every process of the host sees the same free space
            self._check_shared_memory(sharing.directory)

        if self.writer:
            self._allocate_all(directory)
            self._initialise_rows(seed)
            for name in optimizer.state_names:
                self.tables[name].zero_()
            self.last_step.fill_(-1)
        if sharing is not None:
            sharing.barrier()  # the writer's files exist and hold the initial tables
            if not self.writer:
                self._allocate_all(directory)
            sharing.barrier()  # every process has mapped them
            if self.writer and storage == "cpu":
                for path in self.shared_files:  # memory stays mapped; nothing is left in /dev/shm after a crash
                    os.unlink(path)

        self._stream = torch.cuda.Stream() if self._cuda and self.device.type == "cpu" else None
        self._worker: Optional[ThreadPoolExecutor] = None  # host tables: gathers and scatters (see transfers)
        self._writes: list[Future] = []
        self._deferred_write: Optional[Callable[[], None]] = None
        self._prefetched: Optional[tuple[Tensor, Future]] = None
        self.prefetch_hits = 0  # loads served by a prefetch (benchmarks check that the overlap happens)

    def _initialise_rows(self, seed: int) -> None:
        """``U(-1/sqrt(D), 1/sqrt(D))`` in row chunks (one seeded stream, the same values as one draw):
        no ``N x D`` temporary next to the table."""
        bound = 1.0 / math.sqrt(self.dim)
        generator = torch.Generator().manual_seed(seed)
        chunk_rows = max(1, INIT_CHUNK_ELEMENTS // max(self.dim, 1))
        for chunk in self.tables["rows"].split(chunk_rows):
            chunk.copy_(torch.empty(chunk.shape, dtype=self.dtype).uniform_(-bound, bound, generator=generator))

    def _check_shared_memory(self, directory: str) -> None:
        """Refuse a too small ``/dev/shm`` (touching a page beyond its size would kill the process)."""
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        needed = self.num_rows * (self.dim * itemsize * len(self.names) + 8)
        free = shutil.disk_usage(directory).free
        if free < needed:
            raise RuntimeError(
                f"the shared row store needs {needed / 2**30:.2f} GiB in {directory}, which has "
                f"{free / 2**30:.2f} GiB free: enlarge it (docker: --shm-size) or use storage=disk."
            )

    def _allocate_all(self, directory: Optional[str]) -> None:
        """One ``N x K x D`` table (K = 1 + optimiser states): a row and its state are adjacent, so a batch
        travels in one gather, one copy and one scatter; ``tables[name]`` are its ``N x D`` views."""
        shape = (self.num_rows, len(self.names), self.dim)
        self.table = self._allocate("table", shape, self.dtype, directory)
        self.tables = {name: self.table[:, k] for k, name in enumerate(self.names)}
        self.last_step = self._allocate("last_step", (self.num_rows,), torch.int64, directory)

    def _allocate(self, name: str, shape: tuple, dtype: torch.dtype, directory: Optional[str]) -> Tensor:
        if self.storage == "disk":
            return self._map_file(os.path.join(directory, f"{name}.bin"), shape, dtype)
        if self.sharing is not None:
            path = os.path.join(self.sharing.directory, f"{self.sharing.name}.{name}.bin")
            self.shared_files.append(path)
            return torch.from_file(path, shared=True, size=math.prod(shape), dtype=dtype).view(shape)
        if self.storage == "gpu":
            return torch.empty(shape, dtype=dtype, device=self.device)
        return torch.empty(shape, dtype=dtype, pin_memory=self._cuda)

    def _map_file(self, path: str, shape: tuple, dtype: torch.dtype) -> Tensor:
        """A table memory-mapped from ``path`` (the writer creates it at full size). The kernel is told
        the access is random: a batch touches scattered rows, so read-ahead around each page fault
        would only read rows nobody asked for."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np_dtype = torch.empty((), dtype=dtype).numpy().dtype
        size = math.prod(shape) * np_dtype.itemsize
        with open(path, "w+b" if self.writer else "r+b") as handle:
            if self.writer:
                handle.truncate(size)
            mapped = mmap.mmap(handle.fileno(), size)
        mapped.madvise(mmap.MADV_RANDOM)
        return torch.from_numpy(np.frombuffer(mapped, dtype=np_dtype).reshape(shape))

    # ------------------------------------------------------------------ transfers
    # Host tables: the gathers of prefetched rows and the scatters of written-back rows run on one worker
    # thread, in submission order (a prefetch submitted after a write reads the written rows), so the
    # training thread neither copies rows on the host nor waits for a device -> host copy to finish.

    def _submit(self, work: Callable[[], Any]) -> Future:
        """Run ``work`` on the worker thread (host tables), or now (``gpu`` tables: already asynchronous)."""
        if self.storage == "gpu":
            done: Future = Future()
            done.set_result(work())
            return done
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solo-diet-rows")
        return self._worker.submit(work)

    def _table_index(self, indices: Tensor) -> Tensor:
        """``indices`` as long on the tables' device; host indices reach a CUDA table through pinned
        memory, without waiting for the stream (a pageable copy would)."""
        indices = indices.to(dtype=torch.long)
        if self.device.type == "cuda" and indices.device.type == "cpu":
            return indices.pin_memory().to(self.device, non_blocking=True)
        return indices.to(self.device)

    def _gather(self, indices: Tensor, pinned: bool = False) -> Tensor:
        """``B x K x D`` rows and state of ``indices``; with ``pinned``, gathered straight into a page-locked buffer."""
        idx = self._table_index(indices)
        if not pinned:
            return self.table.index_select(0, idx)
        shape = (idx.numel(), len(self.names), self.dim)
        return torch.index_select(self.table, 0, idx, out=torch.empty(shape, dtype=self.dtype, pin_memory=True))

    def _write(self, idx: Tensor, values: Tensor, last_step: int, event: Optional[torch.cuda.Event]) -> None:
        """Scatter written-back ``B x K x D`` rows and state into the table (on the worker for host tables)."""
        if event is not None:
            event.synchronize()
        self.table.index_copy_(0, idx, values)
        self.last_step.index_fill_(0, idx, last_step)

    def _submit_deferred_write(self) -> None:
        """A shared store's writer submits the previous step's write once it has passed this step's collective."""
        if self._deferred_write is not None:
            self._writes.append(self._submit(self._deferred_write))
            self._deferred_write = None

    def commit(self) -> None:
        """Finish every pending write-back (device -> pinned buffers -> table; the writer's shared write)."""
        self._submit_deferred_write()
        while self._writes:
            self._writes.pop(0).result()

    def synchronize(self) -> None:
        """:meth:`commit`, then wait for every process of a shared store (call it at epoch boundaries)."""
        self.commit()
        if self.sharing is not None:
            self.sharing.barrier()

    def prefetch(self, indices: Tensor, device: Device) -> None:
        """Start moving the rows of a coming batch to ``device``; :meth:`load` of the same indices uses them.

        From host tables the rows are gathered on the worker thread after the pending write-backs, and
        copied to a CUDA device on a side stream, overlapping the current step. Rows stored in between
        invalidate the prefetch.
        """
        device = torch.device(device)
        self._submit_deferred_write()
        indices = indices.detach().cpu().clone()
        to_cuda = self._stream is not None and device.type == "cuda"

        def gather() -> tuple[Tensor, Optional[torch.cuda.Event]]:
            values = self._gather(indices, pinned=to_cuda)
            if not to_cuda:
                return values.to(device), None
            with torch.cuda.stream(self._stream):
                values = values.to(device, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._stream)
            return values, event

        self._prefetched = (indices, self._submit(gather))

    def load(self, indices: Tensor, device: Device, *, lr: Optional[float] = None) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Rows and optimiser state of ``indices`` on ``device``; in lazy mode caught up to the current step.

        ``lr`` (the current learning rate) is required in lazy mode. The returned tensors are fresh
        copies: the table changes only through :meth:`store` / :meth:`update`.
        """
        device = torch.device(device)
        self._submit_deferred_write()
        values = self._take_prefetched(indices, device)
        if values is None:
            self.commit()
            values = self._gather(indices).to(device, non_blocking=True)
        rows, *state = values.unbind(1)
        state = tuple(state)
        if self.mode == "lazy":
            if lr is None:
                raise ValueError("RowStore.load needs the current lr in lazy mode")
            last = self.last_step.index_select(0, self._table_index(indices))
            steps = (self.global_step - 1 - last).to(device=device, dtype=rows.dtype)
            rows, state = self.optimizer.zero_grad_steps(rows, state, steps, lr)
        return rows, state

    def _take_prefetched(self, indices: Tensor, device: torch.device) -> Optional[Tensor]:
        """The prefetched rows if they are those of ``indices`` on ``device``. Rows written after the
        prefetch was submitted invalidated it (:meth:`_invalidate_prefetch`); rows written before it were
        gathered after their write, so no pending write has to finish here."""
        if self._prefetched is None:
            return None
        fetched_indices, gathered = self._prefetched
        self._prefetched = None
        values, event = gathered.result()
        if values.device != device or not torch.equal(fetched_indices, indices.detach().cpu()):
            return None
        if event is not None:
            current = torch.cuda.current_stream(device)
            current.wait_event(event)
            values.record_stream(current)  # allocated on the side stream, used on the current one
        self.prefetch_hits += 1
        return values

    def store(self, indices: Tensor, rows: Tensor, state: tuple[Tensor, ...]) -> None:
        """Write rows and state back, marking them as last stepped at ``global_step - 1``.

        From a CUDA device to host tables the copy is asynchronous and the scatter into the table runs
        on the worker thread; a shared store's writer submits it only at the next :meth:`load`,
        :meth:`prefetch` or :meth:`commit` (module docstring); the other processes of a shared store
        write nothing. At most ``MAX_PENDING_WRITES`` writes are in flight.
        """
        self._invalidate_prefetch(indices)
        if not self.writer:
            return
        self._submit_deferred_write()
        idx = self._table_index(indices)
        # a new B x K x D tensor: the caller may go on using its tensors while the write is pending
        values = torch.stack([rows.detach(), *(s.detach() for s in state)], dim=1)
        event = None
        if self._stream is not None and values.is_cuda:
            self._stream.wait_stream(torch.cuda.current_stream(values.device))
            with torch.cuda.stream(self._stream):
                values.record_stream(self._stream)
                buffer = torch.empty(values.shape, dtype=self.dtype, pin_memory=True)
                values = buffer.copy_(values, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._stream)
        else:
            values = values.to(device=self.device, dtype=self.dtype)
        write = partial(self._write, idx, values, self.global_step - 1, event)
        if self.sharing is not None:
            self._deferred_write = write
            return
        self._writes.append(self._submit(write))
        while len(self._writes) > MAX_PENDING_WRITES or (self._writes and self._writes[0].done()):
            self._writes.pop(0).result()

    def _invalidate_prefetch(self, indices: Tensor) -> None:
        """A prefetch that read rows now being stored is stale (possible across an epoch boundary)."""
        if self._prefetched is not None and bool(torch.isin(self._prefetched[0], indices.detach().cpu()).any()):
            self._drop_prefetch()

    def _drop_prefetch(self) -> None:
        """Forget the prefetch once its gather has finished (it reads the tables)."""
        if self._prefetched is not None:
            self._prefetched[1].result()
            self._prefetched = None

    def update(
        self,
        indices: Tensor,
        rows: Tensor,
        state: tuple[Tensor, ...],
        grad: Tensor,
        *,
        lr: float,
        write_back: bool = True,
        eager_steps: Optional[float] = None,
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """One real optimiser step of resident rows at the current global step, then the step count advances.

        With ``write_back`` (default) the rows are stored after the step (eager mode first applies
        ``eager_steps`` zero-gradient steps, default ``self.eager_steps``). ``write_back=False`` keeps
        them resident for another step (multi-batch CE). Returns the new ``(rows, state)``.
        """
        with torch.no_grad():
            rows, state = self.optimizer.step(rows.detach(), tuple(s.detach() for s in state), grad, lr)
            self.global_step += 1
            if write_back:
                if self.mode == "eager":
                    steps = self.eager_steps if eager_steps is None else eager_steps
                    rows, state = self.optimizer.zero_grad_steps(rows, state, steps, lr)
                self.store(indices, rows, state)
        return rows, state

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict:
        """Exact snapshot (CPU copies of every table, the counters and the step)."""
        self.commit()
        snapshot = {
            name: torch.empty((self.num_rows, self.dim), dtype=self.dtype).copy_(table)  # contiguous N x D copies
            for name, table in self.tables.items()
        }
        snapshot["last_step"] = self.last_step.to("cpu", copy=True)
        snapshot["global_step"] = self.global_step
        snapshot["mode"] = self.mode
        return snapshot

    def load_state_dict(self, snapshot: dict) -> None:
        """Restore a :meth:`state_dict`; shapes and optimiser state names must match. Collective when shared."""
        missing = [name for name in (*self.names, "last_step", "global_step") if name not in snapshot]
        if missing:
            raise KeyError(f"row-store snapshot lacks {missing}; was it saved with another head_optimizer?")
        if tuple(snapshot["rows"].shape) != (self.num_rows, self.dim):
            raise ValueError(
                f"row-store snapshot has {tuple(snapshot['rows'].shape)} rows, this store "
                f"{(self.num_rows, self.dim)} (num_samples x proj_output_dim)"
            )
        self.commit()
        self._drop_prefetch()
        if self.writer:
            for name in self.names:
                self.tables[name].copy_(snapshot[name])
            self.last_step.copy_(snapshot["last_step"])
        self.global_step = int(snapshot["global_step"])
        if self.sharing is not None:
            self.sharing.barrier()
