"""Samplers for s-DIET: a known, seeded data order (multi-batch CE, s-DIET paper, §5.2).

Each epoch shuffles ``0..N-1`` with a generator seeded by ``seed + epoch`` (the same on every
process) and cuts the order into super-batches of ``m`` global batches; the ``m`` batches of a
super-batch cover its ``m*B`` indices exactly, without overlap. A global batch of
``batch_size * num_replicas`` indices is split into ``num_replicas`` contiguous slices in rank order,
so gathering the ranks' indices (rank 0 first) rebuilds the global batch. Incomplete global batches
at the end of an epoch are dropped. Because the order is known in advance, the method can load a
whole super-batch at once and prefetch the next one.
"""

from __future__ import annotations

from typing import Iterator, Optional

import torch
import torch.distributed as dist
from torch.utils.data import Sampler


class EpochPermutation(Sampler[int]):
    """A permutation of ``0..N-1`` seeded by ``seed + epoch``; Lightning calls :meth:`set_epoch`."""

    def __init__(self, num_samples: int, seed: int = 0):
        self.num_samples = num_samples
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> torch.Tensor:
        return torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch))

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())

    def __len__(self) -> int:
        return self.num_samples


class SuperBatchSampler(Sampler[list[int]]):
    """Yields this rank's index list for each step; use as ``DataLoader(batch_sampler=...)``.

    ``num_replicas``/``rank`` default to the initialised ``torch.distributed`` group (else 1/0),
    read when iterated, so the sampler can be built before the DDP processes start.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        rows_per_step: int = 1,
        *,
        seed: int = 0,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
    ):
        if num_samples <= 0 or batch_size <= 0 or rows_per_step <= 0:
            raise ValueError("num_samples, batch_size and rows_per_step must be positive")
        self.batch_size = batch_size
        self.rows_per_step = rows_per_step
        self._num_replicas, self._rank = num_replicas, rank
        # ``sampler`` with ``set_epoch``: the attribute Lightning looks for on a batch sampler
        self.sampler = EpochPermutation(num_samples, seed)
        self.replicas()

    @property
    def num_samples(self) -> int:
        return self.sampler.num_samples

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def replicas(self) -> tuple[int, int]:
        """``(num_replicas, rank)``: as given, else from ``torch.distributed``, else ``(1, 0)``."""
        distributed = dist.is_available() and dist.is_initialized()
        num_replicas = self._num_replicas or (dist.get_world_size() if distributed else 1)
        rank = self._rank if self._rank is not None else (dist.get_rank() if distributed else 0)
        if num_replicas <= 0 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        if self.num_samples < self.batch_size * num_replicas:
            raise ValueError(
                f"num_samples={self.num_samples} is smaller than one global batch "
                f"(batch_size*num_replicas={self.batch_size * num_replicas})"
            )
        return num_replicas, rank

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.replicas()[0]

    def __len__(self) -> int:
        return self.num_samples // self.global_batch_size

    def global_batches(self) -> torch.Tensor:
        """``(steps, batch_size*num_replicas)`` global indices of this epoch, in step order."""
        steps, size = len(self), self.global_batch_size
        return self.sampler.order()[: steps * size].view(steps, size)

    def super_batches(self) -> list[torch.Tensor]:
        """The epoch's super-batches: up to ``m`` consecutive global batches each (the last may be shorter)."""
        return list(self.global_batches().split(self.rows_per_step))

    def __iter__(self) -> Iterator[list[int]]:
        start = self.replicas()[1] * self.batch_size
        for batch in self.global_batches():
            yield batch[start : start + self.batch_size].tolist()
