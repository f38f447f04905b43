"""The row store's transfer queue: host-table gathers and scatters run in order on one worker
thread, device copies on a CUDA side stream, so the training thread neither copies rows nor waits
for them; with ``gpu`` tables everything runs at once (CUDA is asynchronous already).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional

import torch
from torch import Tensor

# write-backs in flight before a new one waits for the oldest (bounds pinned buffers)
MAX_PENDING_WRITES = 2


class TransferQueue:
    """The worker thread, the writes in flight and the CUDA side stream of one row store
    (``host_tables``: ``cpu``/``disk``; ``side_stream``: CUDA with host tables).
    """

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
        """Queue a write-back (a ``deferred`` one, a shared store's writer's, waits for
        :meth:`submit_deferred_write`); at most ``MAX_PENDING_WRITES`` are in flight."""
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

    def to_device(
        self, values: Tensor, device: torch.device
    ) -> tuple[Tensor, Optional[torch.cuda.Event]]:
        """``values`` (pinned, for a side copy) on ``device``, and the event that ends the copy."""
        if not self.side_copies(device):
            return values.to(device), None
        with torch.cuda.stream(self.stream):
            values = values.to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return values, event

    def wait_on_current_stream(
        self, values: Tensor, event: torch.cuda.Event, device: torch.device
    ) -> None:
        """Make ``device``'s current stream wait for a side copy of ``values``."""
        current = torch.cuda.current_stream(device)
        current.wait_event(event)
        values.record_stream(current)  # allocated on the side stream, used on the current one

    def to_table(
        self, values: Tensor, device: torch.device, dtype: torch.dtype
    ) -> tuple[Tensor, Optional[torch.cuda.Event]]:
        """``values`` for a table on ``device`` in ``dtype``: from CUDA to host tables into a pinned
        buffer on the side stream (with the copy's event), otherwise now."""
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
