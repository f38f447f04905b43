"""s-DIET's head step over rows in a RowStore (s-DIET paper, §5.2): load, CE, step, write back;
a super-batch's ``m*B`` rows stay for its ``m`` steps while the next one's are prefetched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from solo_diet.core.labels import batch_rows
from solo_diet.core.losses import sdiet_multi_batch_cross_entropy
from solo_diet.core.sdiet.rowstore import RowStore
from solo_diet.core.sdiet.samplers import SuperBatch


@dataclass
class ResidentRows:
    """The super-batch whose head rows are on the device: its indices, rows and optimiser state."""

    indexes: torch.Tensor
    rows: torch.Tensor
    state: tuple[torch.Tensor, ...]


@dataclass
class RowHead:
    """CE steps against rows in a row store (``rows_per_step`` m; 1: batch CE)."""

    rows_per_step: int
    label_smoothing: float
    temperature: float
    prefetch: bool
    resident: Optional[ResidentRows] = None

    def _loss_and_grad(
        self, z: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, rows as a leaf, the loss's gradient for them)``; ``z`` keeps its graph."""
        rows = rows.detach().requires_grad_(True)
        loss = sdiet_multi_batch_cross_entropy(
            z, rows, positions, label_smoothing=self.label_smoothing, temperature=self.temperature
        )
        (head_grad,) = torch.autograd.grad(loss, rows, retain_graph=True)
        return loss, rows, head_grad

    def index_step(
        self, store: RowStore, z: torch.Tensor, super_batch: SuperBatch, lr: float, batch_idx: int
    ) -> torch.Tensor:
        """Multi-batch CE of ``z`` over the super-batch's resident rows, written back after it."""
        group, place, length = super_batch.indexes, super_batch.place, super_batch.length
        if place == 0:
            rows, state = store.load(group, z.device, lr=lr)
            self.resident = ResidentRows(group, rows, state)
            if super_batch.following is not None and self.prefetch:
                store.prefetch(super_batch.following, z.device)
        resident = self.resident
        if resident is None or not torch.equal(resident.indexes, group):
            raise RuntimeError(
                f"batch {batch_idx} continues a super-batch whose rows were never loaded"
            )

        batch_size = z.shape[0]
        positions = torch.arange(place * batch_size, (place + 1) * batch_size, device=z.device)
        loss, rows, head_grad = self._loss_and_grad(z, resident.rows, positions)
        leaving = place == length - 1
        resident.rows, resident.state = store.update(
            group,
            rows,
            resident.state,
            head_grad,
            lr=lr,
            write_back=leaving,
            eager_steps=store.eager_steps + self.rows_per_step - length,
        )
        if leaving:
            self.resident = None
        return loss

    def labelled_step(
        self, store: RowStore, z: torch.Tensor, ids: torch.Tensor, lr: float
    ) -> torch.Tensor:
        """Batch CE over the batch's distinct label rows (class / mix / groups): a row is the
        positive of every datum sharing its id (Birth-of-SSL paper, Thm. 1); id -1 adds nothing."""
        row_ids, positions = batch_rows(ids)
        if row_ids.numel() == 0:
            store.global_step += 1  # a step with no real row update: absent rows still age
            return z.sum() * 0.0
        labelled = positions >= 0
        rows, state = store.load(row_ids, z.device, lr=lr)
        loss, rows, head_grad = self._loss_and_grad(z[labelled], rows, positions[labelled])
        store.update(row_ids, rows, state, head_grad, lr=lr)
        return loss
