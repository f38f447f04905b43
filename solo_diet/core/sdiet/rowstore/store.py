"""s-DIET's row store, whole or sharded over nodes (docs/methods/sdiet.md). Zero-gradient steps of
the rows absent from a batch (s-DIET paper, App. D.2, Eq. 18-20, sign corrected): ``"eager"``
(paper) applies ``T = N/B - m`` right after a row's step; ``"lazy"`` (exact, ours) applies
``T = s - last - 1`` when the row is next loaded at step ``s``."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from solo_diet.core.sdiet.optim import RowOptimizer, RowState
from solo_diet.core.sdiet.rowstore.tables import Device, RowTables

MODES = ("eager", "lazy")
MAX_PENDING_WRITES = 2  # write-backs in flight before a new one waits (bounds pinned buffers)
EXCHANGE_CHUNK_ELEMENTS = 1 << 24  # bounds the buffer of a sharded checkpoint's gather
Copied = tuple[Tensor, Optional[torch.cuda.Event]]  # a copy's values and the event that ends it
Rows = tuple[Tensor, RowState]  # rows and their optimiser state


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
