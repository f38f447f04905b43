"""The row store sharded over nodes (docs/methods/sdiet.md), rows exchanged by exact all-reduce."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from solo_diet.core.sdiet.rowstore.store import RowStore
from solo_diet.core.sdiet.rowstore.tables import Device

EXCHANGE_CHUNK_ELEMENTS = 1 << 24  # bounds the buffer of a checkpoint's gather


class ShardedRowStore(RowStore):
    """A ``RowStore`` holding only ``shard``'s rows (indices stay global)."""

    def prefetch(self, indices: Tensor, device: Device) -> None:
        """Nothing: sharded rows arrive through the collective of :meth:`load`."""

    def load(
        self, indices: Tensor, device: Device, *, lr: Optional[float] = None
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
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

    def store(self, indices: Tensor, rows: Tensor, state: tuple[Tensor, ...]) -> None:
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
