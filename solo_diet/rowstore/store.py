"""The row store: s-DIET's head rows and their optimiser state, outside ``nn.Parameter`` s.

Rows are loaded for a batch, stepped by a row-wise optimiser and written back; only the rows of a
batch travel to the device (placement: :mod:`~solo_diet.rowstore.tables`; copies off the training
thread: :mod:`~solo_diet.rowstore.transfers`). A load that was not prefetched first waits for every
pending write.

Zero-gradient steps of rows absent from a batch (s-DIET paper, App. D.2, Eq. 18-20, sign corrected
as docs/references.md says; the exact lazy variant is ours):

* ``"eager"`` (paper, App. D.2): right after a row's real step, apply ``eager_steps`` zero-gradient
  steps in closed form (``T = N/B - m`` for ``m`` batches of rows resident per step, a float) as
  if the row were absent until its next visit.
* ``"lazy"`` (exact): remember each row's last real step; when the row is next loaded at global step
  ``s``, apply ``T = s - last - 1`` zero-gradient steps with the current lr. Reproduces a full-table
  optimiser whose absent rows get zero gradients (up to the paper's eps approximation and lr drift).
"""

from __future__ import annotations

from concurrent.futures import Future
from functools import partial
from typing import Any, Optional

import torch
from torch import Tensor

from solo_diet.optim import RowOptimizer
from solo_diet.rowstore.tables import Device, RowTables
from solo_diet.rowstore.transfers import TransferQueue

MODES = ("eager", "lazy")


class RowStore(RowTables):
    """Head rows + row-wise optimiser state + per-row last-step counters.

    Args:
        num_rows: N, one row per label id (per training sample with ``index`` labels).
        dim: D, width of a row (the projector output).
        optimizer: row-wise optimiser (:class:`solo_diet.optim.RowAdamW` or ``RowSGDW``).
        mode: ``"eager"`` or ``"lazy"`` zero-gradient steps (module docstring).
        eager_steps: zero-gradient steps applied after each write-back in eager mode (``N/B - m``).
        table_options: where and how the table lives: ``placement``, ``device``, ``directory``,
            ``seed``, ``dtype``, ``sharing`` (:class:`~solo_diet.rowstore.tables.RowTables`).
    """

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
        if eager_steps < 0:
            raise ValueError(f"eager_steps must be >= 0, got {eager_steps}")
        super().__init__(num_rows, dim, ("rows", *optimizer.state_names), **table_options)
        self.optimizer = optimizer
        self.mode = mode
        self.eager_steps = float(eager_steps)
        self.global_step = 0
        self.transfers = TransferQueue(
            self.placement != "gpu", self.cuda and self.device.type == "cpu"
        )
        self._prefetched: Optional[tuple[Tensor, Future]] = None
        # loads served by a prefetch (benchmarks check that the overlap happens)
        self.prefetch_hits = 0

    def commit(self) -> None:
        """Finish every pending write-back (device -> pinned buffers -> table; the writer's shared
        write)."""
        self.transfers.commit()

    def synchronize(self) -> None:
        """:meth:`commit`, then wait for every process of a shared store (call it at epoch
        boundaries)."""
        self.commit()
        if self.sharing is not None:
            self.sharing.barrier()

    def prefetch(self, indices: Tensor, device: Device) -> None:
        """Start moving the rows of a coming batch to ``device``; :meth:`load` of the same indices
        uses them.

        From host tables the rows are gathered on the worker thread after the pending write-backs,
        and copied to a CUDA device on a side stream, overlapping the current step. Rows stored in
        between invalidate the prefetch.
        """
        device = torch.device(device)
        self.transfers.submit_deferred_write()
        indices = indices.detach().cpu().clone()
        pinned = self.transfers.side_copies(device)

        def gather() -> tuple[Tensor, Optional[torch.cuda.Event]]:
            return self.transfers.to_device(self.gather(indices, pinned=pinned), device)

        self._prefetched = (indices, self.transfers.submit(gather))

    def load(
        self, indices: Tensor, device: Device, *, lr: Optional[float] = None
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """Rows and optimiser state of ``indices`` on ``device``; in lazy mode caught up to the
        current step.

        ``lr`` (the current learning rate) is required in lazy mode. The returned tensors are fresh
        copies: the table changes only through :meth:`store` / :meth:`update`.
        """
        device = torch.device(device)
        self.transfers.submit_deferred_write()
        values = self._take_prefetched(indices, device)
        if values is None:
            self.commit()
            values = self.gather(indices).to(device, non_blocking=True)
        rows, *state = values.unbind(1)
        state = tuple(state)
        if self.mode == "lazy":
            if lr is None:
                raise ValueError("RowStore.load needs the current lr in lazy mode")
            last = self.last_step.index_select(0, self.table_index(indices))
            steps = (self.global_step - 1 - last).to(device=device, dtype=rows.dtype)
            rows, state = self.optimizer.zero_grad_steps(rows, state, steps, lr)
        return rows, state

    def _take_prefetched(self, indices: Tensor, device: torch.device) -> Optional[Tensor]:
        """The prefetched rows if they are those of ``indices`` on ``device``. Rows written after
        the prefetch was submitted invalidated it (:meth:`_invalidate_prefetch`); rows written
        before it were gathered after their write, so no pending write has to finish here."""
        if self._prefetched is None:
            return None
        fetched_indices, gathered = self._prefetched
        self._prefetched = None
        values, event = gathered.result()
        if values.device != device or not torch.equal(fetched_indices, indices.detach().cpu()):
            return None
        if event is not None:
            self.transfers.wait_on_current_stream(values, event, device)
        self.prefetch_hits += 1
        return values

    def store(self, indices: Tensor, rows: Tensor, state: tuple[Tensor, ...]) -> None:
        """Write rows and state back, marking them as last stepped at ``global_step - 1``.

        From a CUDA device to host tables the copy is asynchronous and the scatter into the table
        runs on the worker thread; a shared store's writer submits it only at the next :meth:`load`,
        :meth:`prefetch` or :meth:`commit` (:mod:`~solo_diet.rowstore.sharing`); the other processes
        of a shared store write nothing.
        """
        self._invalidate_prefetch(indices)
        if not self.writer:
            return
        self.transfers.submit_deferred_write()
        idx = self.table_index(indices)
        # a new B x K x D tensor: the caller may go on using its tensors while the write is pending
        values = torch.stack([rows.detach(), *(s.detach() for s in state)], dim=1)
        values, event = self.transfers.to_table(values, self.device, self.dtype)
        write = partial(self.scatter, idx, values, self.global_step - 1, event)
        self.transfers.write(write, deferred=self.sharing is not None)

    def _invalidate_prefetch(self, indices: Tensor) -> None:
        """A prefetch that read rows now being stored is stale (possible across an epoch
        boundary)."""
        if self._prefetched is not None and bool(
            torch.isin(self._prefetched[0], indices.detach().cpu()).any()
        ):
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
        """One real optimiser step of resident rows at the current global step, then the step count
        advances.

        With ``write_back`` (default) the rows are stored after the step (eager mode first applies
        ``eager_steps`` zero-gradient steps, default ``self.eager_steps``). ``write_back=False``
        keeps them resident for another step (multi-batch CE). Returns the new ``(rows, state)``.
        """
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
        """Restore a :meth:`state_dict`; shapes and optimiser state names must match. Collective
        when shared."""
        missing = [
            name for name in (*self.names, "last_step", "global_step") if name not in snapshot
        ]
        if missing:
            raise KeyError(
                f"row-store snapshot lacks {missing}; was it saved with another head_optimizer?"
            )
        if tuple(snapshot["rows"].shape) != (self.num_rows, self.dim):
            raise ValueError(
                f"row-store snapshot has {tuple(snapshot['rows'].shape)} rows, this store "
                f"{(self.num_rows, self.dim)} (num_samples x proj_output_dim)"
            )
        self.commit()
        self._drop_prefetch()
        self.restore(snapshot)
        self.global_step = int(snapshot["global_step"])
        if self.sharing is not None:
            self.sharing.barrier()
