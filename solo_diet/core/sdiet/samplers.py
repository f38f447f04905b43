"""s-DIET's seeded data order and head step (multi-batch CE, s-DIET paper, §5.2): each epoch
shuffles ``0..N-1`` (seed ``seed + epoch``) into super-batches of ``m`` global batches, each split
into contiguous rank slices (incomplete global batches dropped); a super-batch's ``m*B`` head rows
stay on the device for its ``m`` steps (load, CE, step, write back) while the next one's are
prefetched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Optional

import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from solo_diet.core.errors import Argument, ArgumentError
from solo_diet.core.labels import batch_rows
from solo_diet.core.losses import sdiet_multi_batch_cross_entropy
from solo_diet.core.sdiet.rowstore import RowStore

ITERATE_THE_SAMPLER = (
    "the train DataLoader must iterate that sampler (DataLoader(dataset, batch_sampler=sampler))."
)


def world_and_rank() -> tuple[int, int]:
    """``(world size, rank)`` of the initialised process group, else ``(1, 0)``."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class EpochPermutation(Sampler[int]):
    """A permutation of ``0..N-1`` seeded by ``seed + epoch``; Lightning calls :meth:`set_epoch`."""

    def __init__(self, num_samples: int, seed: int = 0):
        self.num_samples, self.seed, self.epoch = num_samples, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self) -> torch.Tensor:
        return torch.randperm(
            self.num_samples, generator=torch.Generator().manual_seed(self.seed + self.epoch)
        )

    def __iter__(self) -> Iterator[int]:
        return iter(self.order().tolist())

    def __len__(self) -> int:
        return self.num_samples


class SuperBatchSampler(Sampler[list[int]]):
    """This rank's index list for each step (``DataLoader(batch_sampler=...)``)."""

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
        self.batch_size, self.rows_per_step = batch_size, rows_per_step
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
        world, group_rank = world_and_rank()
        num_replicas = self._num_replicas or world
        rank = self._rank if self._rank is not None else group_rank
        if num_replicas <= 0 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        if self.num_samples < self.batch_size * num_replicas:
            raise ValueError(
                f"num_samples={self.num_samples} is smaller than one global batch "
                f"(batch_size*num_replicas={self.batch_size * num_replicas})"
            )
        return num_replicas, rank

    def __len__(self) -> int:
        return self.num_samples // (self.batch_size * self.replicas()[0])

    def global_batches(self) -> torch.Tensor:
        """``(steps, batch_size*num_replicas)`` global indices of this epoch, in step order."""
        steps, size = len(self), self.batch_size * self.replicas()[0]
        return self.sampler.order()[: steps * size].view(steps, size)

    def __iter__(self) -> Iterator[list[int]]:
        start = self.replicas()[1] * self.batch_size
        for batch in self.global_batches():
            yield batch[start : start + self.batch_size].tolist()


def check_sampler(
    sampler: Optional[SuperBatchSampler], num_samples: int, rows_per_step: int
) -> None:
    """Refuse a training order that does not fit ``num_samples`` and ``rows_per_step``."""
    build = "build it with the method's train_batch_sampler (`solo-diet pretrain` installs it)"
    if sampler is None and rows_per_step > 1:
        raise ArgumentError(
            Argument("rows_per_step"),
            " > 1 needs the train DataLoader's batch_sampler to be "
            f"solo_diet.core.sdiet.samplers.SuperBatchSampler: {build}.",
        )
    if sampler is not None and sampler.num_samples > num_samples:
        raise ArgumentError(
            f"the SuperBatchSampler orders {sampler.num_samples} samples, ",
            Argument("num_samples"),
            f" is {num_samples}: {build} on the training set.",
        )
    if sampler is not None and sampler.rows_per_step != rows_per_step:
        raise ArgumentError(
            f"the SuperBatchSampler has rows_per_step={sampler.rows_per_step}, ",
            Argument("rows_per_step"),
            f" is {rows_per_step}: {build}.",
        )


@dataclass(frozen=True)
class SuperBatch:
    """A step's super-batch ``indexes``, ``place``, ``length`` and the ``following`` one."""

    indexes: torch.Tensor
    place: int
    length: int
    following: Optional[torch.Tensor]


class SuperBatchOrder:
    """Follows a :class:`SuperBatchSampler` from the training loop, checking each batch."""

    def __init__(self, rows_per_step: int):
        self.rows_per_step = rows_per_step
        self._epoch_batches: Optional[tuple[int, torch.Tensor]] = None
        self._pending: Optional[tuple] = None

    def locate(
        self, sampler: SuperBatchSampler, indexes: torch.Tensor, batch_idx: int, steps: float
    ) -> SuperBatch:
        """The super-batch of step ``batch_idx`` whose global batch is ``indexes``."""
        if self._epoch_batches is None or self._epoch_batches[0] != sampler.epoch:
            self._epoch_batches = (sampler.epoch, sampler.global_batches())
        batches = self._epoch_batches[1]
        if batch_idx >= len(batches):
            raise RuntimeError(
                f"batch {batch_idx} is past the SuperBatchSampler's {len(batches)} batches of "
                f"epoch {sampler.epoch}: {ITERATE_THE_SAMPLER}"
            )
        self._check(indexes, batches[batch_idx], batch_idx, sampler.epoch)
        steps, m = int(min(len(batches), steps)), self.rows_per_step
        start = batch_idx - batch_idx % m
        group = batches[start : min(start + m, steps)]
        following = batches[start + m : min(start + 2 * m, steps)]
        following = following.flatten() if len(following) else None
        return SuperBatch(group.flatten(), batch_idx - start, len(group), following)

    def _check(self, indexes: torch.Tensor, expected: torch.Tensor, batch_idx: int, epoch: int):
        """Compare ``indexes`` with ``expected`` now (CPU) or at the next batch (GPU: no wait)."""
        self.check_pending()
        if not indexes.is_cuda:
            self._pending = (batch_idx, epoch, expected, indexes, None)
            return self.check_pending()
        seen = torch.empty(indexes.shape, dtype=indexes.dtype, pin_memory=True)
        seen.copy_(indexes, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._pending = (batch_idx, epoch, expected, seen, event)

    def check_pending(self) -> None:
        """Finish the deferred check of the last batch (call it at the end of an epoch)."""
        if self._pending is None:
            return
        batch_idx, epoch, expected, seen, event = self._pending
        self._pending = None
        if event is not None:
            event.synchronize()
        if not torch.equal(expected, seen):
            raise RuntimeError(
                f"batch {batch_idx} is not the SuperBatchSampler's batch of epoch {epoch}: "
                f"{ITERATE_THE_SAMPLER}"
            )


class ResidentRows(NamedTuple):
    """The super-batch whose rows are on the device: its indexes, rows and optimiser state."""

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

    def _loss_and_grad(self, z: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor):
        """``(loss, rows as a leaf, the loss's gradient for them)``; ``z`` keeps its graph."""
        rows = rows.detach().requires_grad_(True)
        loss = sdiet_multi_batch_cross_entropy(
            z, rows, positions, label_smoothing=self.label_smoothing, temperature=self.temperature
        )
        return loss, rows, torch.autograd.grad(loss, rows, retain_graph=True)[0]

    def index_step(
        self, store: RowStore, z: torch.Tensor, super_batch: SuperBatch, lr: float, batch_idx: int
    ) -> torch.Tensor:
        """Multi-batch CE of ``z`` over the super-batch's resident rows, written back after it."""
        group, place, length = super_batch.indexes, super_batch.place, super_batch.length
        if place == 0:
            self.resident = ResidentRows(group, *store.load(group, z.device, lr=lr))
            if super_batch.following is not None and self.prefetch:
                store.prefetch(super_batch.following, z.device)
        if self.resident is None or not torch.equal(self.resident.indexes, group):
            raise RuntimeError(
                f"batch {batch_idx} continues a super-batch whose rows were never loaded"
            )
        batch_size = z.shape[0]
        positions = torch.arange(place * batch_size, (place + 1) * batch_size, device=z.device)
        loss, rows, head_grad = self._loss_and_grad(z, self.resident.rows, positions)
        leaving = place == length - 1
        rows, state = store.update(
            group,
            rows,
            self.resident.state,
            head_grad,
            lr=lr,
            write_back=leaving,
            eager_steps=store.eager_steps + self.rows_per_step - length,
        )
        self.resident = None if leaving else ResidentRows(group, rows, state)
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
