"""``GPUBatchLoader``: batches of a decoded dataset drawn by index on the device."""

from __future__ import annotations

import hashlib
import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import torch
from torch import Tensor

from solo_diet.core.data.augment.resample import to_device
from solo_diet.core.data.pipeline import CapturedAugmentation
from solo_diet.core.data.tensor_data import GIB, ImageTensors, check_host_memory
from solo_diet.core.errors import Argument, ArgumentError
from solo_diet.core.sdiet.samplers import SuperBatchSampler, world_and_rank

STORAGES = ("auto", "device", "pinned")
# "auto" keeps the data on the device when it takes at most this share of the free memory
AUTO_DEVICE_SHARE = 0.5
Transform = Callable[[Tensor, Optional[torch.Generator]], Union[Tensor, list]]
DeviceSpec = Union[str, torch.device]


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers, the same in every process (no salted ``hash``)."""
    digest = hashlib.blake2b(":".join(str(int(p)) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def resolve_device(device: DeviceSpec) -> torch.device:
    """A concrete device; ``"cuda"`` alone is the current CUDA device (set per DDP rank)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


class OrderedBatchSampler:
    """Consecutive batches of ``0..N-1``; ``split_ranks``: each rank its contiguous share."""

    def __init__(self, num_samples: int, batch_size: int, *, split_ranks: bool = False):
        self.num_samples, self.batch_size, self.split_ranks = num_samples, batch_size, split_ranks

    def share(self) -> Tensor:
        """This process's indices: all of them, or the rank's contiguous share."""
        order = torch.arange(self.num_samples)
        if not self.split_ranks:
            return order
        world, rank = world_and_rank()
        return order.tensor_split(world)[rank]

    def __iter__(self) -> Iterator[list[int]]:
        return (batch.tolist() for batch in self.share().split(self.batch_size))

    def __len__(self) -> int:
        return math.ceil(len(self.share()) / self.batch_size)


class _PinnedRows:
    """Rows of a host tensor copied to the device one batch ahead through pinned buffers."""

    def __init__(self, host: Tensor, device: torch.device, max_rows: int):
        self.cuda = device.type == "cuda"
        self.host = host.pin_memory() if self.cuda and not host.is_pinned() else host
        self.device = device
        shape = (max_rows,) + tuple(host.shape[1:])
        self.staging = [
            torch.empty(shape, dtype=host.dtype, pin_memory=self.cuda) for _ in range(2)
        ]
        self.copied: list[Optional[torch.cuda.Event]] = [None, None]
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="solo-diet-rows")

    def _copy(self, slot: int, idx: Tensor) -> tuple[Tensor, Optional[torch.cuda.Event]]:
        if self.copied[slot] is not None:
            self.copied[slot].synchronize()
        buffer = self.staging[slot][: len(idx)]
        torch.index_select(self.host, 0, idx, out=buffer)
        if not self.cuda:
            return buffer.to(self.device, copy=True), None
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            rows = buffer.to(self.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(self.stream)
        self.copied[slot] = done
        return rows, done

    def submit(self, slot: int, idx: Tensor) -> Future:
        return self.worker.submit(self._copy, slot, idx)

    def take(self, pending: Future) -> Tensor:
        """The batch's rows, usable on the current stream."""
        rows, done = pending.result()
        if done is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(done)
            rows.record_stream(stream)
        return rows


class GPUBatchLoader:
    """solo-learn's batches of ``data`` transformed on the device, reseeded each epoch."""

    storages: tuple[str, ...] = STORAGES

    def __init__(
        self,
        data: ImageTensors,
        transform: Transform,
        batch_sampler: Iterable,
        *,
        pretraining: bool,
        seed: int = 0,
        storage: str = "auto",
        device: DeviceSpec = "cuda",
        cuda_graphs: bool = True,
    ):
        if storage not in self.storages:
            raise ArgumentError(
                Argument("storage"), f" must be one of {list(self.storages)}, got {storage!r}."
            )
        if not isinstance(cuda_graphs, bool):
            raise ArgumentError(
                Argument("cuda_graphs"), f" must be True or False, got {cuda_graphs!r}."
            )
        self.dataset, self.transform, self.batch_sampler = data, transform, batch_sampler
        self.pretraining, self.seed, self.storage = pretraining, seed, storage
        self.device, self.cuda_graphs = device, cuda_graphs
        self._resident: Optional[tuple[torch.device, str, Any, Tensor]] = None
        self._augmenters: dict[torch.device, tuple[Transform, torch.Generator]] = {}

    @classmethod
    def for_pretraining(
        cls,
        data: ImageTensors,
        batch_size: int,
        augment: Transform,
        *,
        seed: int = 0,
        batch_sampler: Optional[Iterable] = None,
        **kwargs: Any,
    ) -> "GPUBatchLoader":
        """Shuffled batches split over ranks, incomplete ones dropped (or ``batch_sampler``'s)."""
        if batch_sampler is None:
            batch_sampler = SuperBatchSampler(len(data), batch_size, seed=seed)
        return cls(data, augment, batch_sampler, pretraining=True, seed=seed, **kwargs)

    @classmethod
    def for_classification(
        cls,
        data: ImageTensors,
        batch_size: int,
        transform: Transform,
        *,
        shuffle: bool,
        split_ranks: bool = True,
        seed: int = 0,
        **kwargs: Any,
    ) -> "GPUBatchLoader":
        """``[images, targets]`` batches: shuffled with drop_last, or in order."""
        if shuffle:
            sampler = SuperBatchSampler(len(data), batch_size, seed=seed)
        else:
            sampler = OrderedBatchSampler(len(data), batch_size, split_ranks=split_ranks)
        return cls(data, transform, sampler, pretraining=False, seed=seed, **kwargs)

    @property
    def sampler(self) -> Any:
        """The batch sampler's epoch holder (Lightning calls its ``set_epoch``), if it has one."""
        return getattr(self.batch_sampler, "sampler", None)

    @property
    def epoch(self) -> int:
        return int(getattr(self.sampler, "epoch", 0))

    def set_epoch(self, epoch: int) -> None:
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def rank(self) -> int:
        replicas = getattr(self.batch_sampler, "replicas", None)
        return replicas()[1] if callable(replicas) else world_and_rank()[1]

    def placement(self, device: torch.device) -> str:
        """``device`` or ``pinned`` on ``device``; an error with the sizes when it cannot fit."""
        nbytes = self.dataset.images.nbytes + self.dataset.targets.nbytes
        if device.type != "cuda":
            return "device" if self.storage == "auto" else self.storage
        free, _ = torch.cuda.mem_get_info(device)
        if self.storage == "auto":
            return "device" if nbytes <= AUTO_DEVICE_SHARE * free else "pinned"
        if self.storage == "device" and nbytes > free:
            raise ArgumentError(
                f"the dataset ({len(self.dataset)} images, {nbytes / GIB:.2f} GiB) does not fit "
                f"in the {free / GIB:.2f} GiB free on {device}: set ",
                Argument("storage", ": pinned"),
                " (or auto), or a smaller ",
                Argument("image_size"),
                " when decoding.",
            )
        if self.storage == "pinned":
            check_host_memory(
                nbytes,
                f"pinning the dataset ({len(self.dataset)} images)",
                "Set a smaller ",
                Argument("image_size"),
                " when decoding.",
            )
        return self.storage

    def resident(self) -> tuple[torch.device, str, Any, Tensor]:
        """``(device, placement, images or _PinnedRows, targets on device)``, once per device."""
        device = resolve_device(self.device)
        if self._resident is None or self._resident[0] != device:
            placement = self.placement(device)
            if placement == "device":
                images: Any = self.dataset.images.to(device)
            else:
                size = getattr(self.batch_sampler, "batch_size", None)
                rows = size if size is not None else max(map(len, self.batch_sampler))
                images = _PinnedRows(self.dataset.images, device, max_rows=rows)
                self.dataset.images = images.host  # the page-locked copy replaces the pageable one
            self._resident = (device, placement, images, self.dataset.targets.to(device))
        return self._resident

    def augmenter(self, device: torch.device) -> tuple[Transform, torch.Generator]:
        """``(transform, generator)`` on ``device``, made once (the transform graphed on CUDA)."""
        if device not in self._augmenters:
            generator = torch.Generator(device=device)
            transform = self.transform
            if device.type == "cuda" and self.cuda_graphs:
                transform = CapturedAugmentation(self.transform, generator)
            self._augmenters[device] = (transform, generator)
        return self._augmenters[device]

    def epoch_indices(self, device: torch.device) -> tuple[list[Tensor], list[Tensor]]:
        """This epoch's batches of indices on the host and on the device (one copy per epoch)."""
        batches = [torch.as_tensor(batch, dtype=torch.int64) for batch in self.batch_sampler]
        if not batches:
            return [], []
        sizes = [len(batch) for batch in batches]
        host = torch.cat(batches)
        return list(host.split(sizes)), list(to_device(host, device).split(sizes))

    def __iter__(self) -> Iterator[list]:
        device, placement, images, targets = self.resident()
        transform, generator = self.augmenter(device)
        generator.manual_seed(derive_seed(self.seed, self.epoch, self.rank()))
        host_batches, device_batches = self.epoch_indices(device)
        pinned = placement == "pinned"
        pending = images.submit(0, host_batches[0]) if pinned and host_batches else None
        for step, idx in enumerate(device_batches):
            rows = images.take(pending) if pinned else images.index_select(0, idx)
            out = transform(rows, generator)
            if pinned and step + 1 < len(host_batches):  # after a graph's capture
                pending = images.submit((step + 1) % 2, host_batches[step + 1])
            batch_targets = targets.index_select(0, idx)
            yield [idx, list(out), batch_targets] if self.pretraining else [out, batch_targets]
