"""The streaming source (``data.gpu.storage: stream``; docs/data-path.md)."""

from __future__ import annotations

import functools
import io
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy as np
import torch
from torch import Tensor

from solo_diet.core.data.augment.resample import to_device
from solo_diet.core.data.loader import GPUBatchLoader, derive_seed, resolve_device
from solo_diet.core.data.tensor_data import PathLike, folder_split_samples
from solo_diet.core.errors import Argument, ArgumentError, ConfigError

ON_CORRUPT = ("stop", "skip")
JPEG_START, JPEG_END = (0xFF, 0xD8, 0xFF), (0xFF, 0xD9)
DEFAULT_WORKERS = 4
# a host batch: (indices, encoded bytes end to end, their lengths, targets, read problems)
HostBatch = tuple[Tensor, Tensor, Tensor, Tensor, tuple[str, ...]]


class CorruptImage(ArgumentError):
    """An image file of the streaming source could not be read or decoded; names the file."""


class EncodedFiles(torch.utils.data.Dataset):
    """``paths`` and ``targets``; item ``i``: ``(i, bytes, target, problem)``."""

    def __init__(self, paths: Sequence[str], targets: Sequence[int], source: str) -> None:
        if len(paths) != len(targets) or not paths:
            raise ConfigError(f"{source}: no images to stream ({len(paths)} paths).")
        encoded = [str(path).encode() for path in paths]
        self._ends = np.cumsum([len(name) for name in encoded], dtype=np.int64)
        self._names = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.targets = torch.as_tensor(list(targets), dtype=torch.int64)

    @classmethod
    def from_folder(
        cls,
        dataset: str,
        root: PathLike,
        split: str,
        *,
        no_labels: bool = False,
        fraction: float = -1.0,
    ) -> EncodedFiles:
        """A folder split in solo-learn's order, as the decoded path reads it."""
        samples = folder_split_samples(dataset, root, split, no_labels, fraction)
        return cls([p for p, _ in samples], [t for _, t in samples], source=str(root))

    def __len__(self) -> int:
        return len(self._ends)

    def path(self, index: int) -> str:
        start = int(self._ends[index - 1]) if index > 0 else 0
        return self._names[start : int(self._ends[index])].tobytes().decode()

    def __getitem__(self, index: int) -> tuple[int, Tensor, int, str]:
        try:
            data = torch.from_numpy(np.fromfile(self.path(index), dtype=np.uint8))
            problem = "" if data.numel() else "the file is empty"
        except OSError as err:
            data, problem = torch.empty(0, dtype=torch.uint8), f"{type(err).__name__}: {err}"
        return index, data, int(self.targets[index]), problem


def collate_encoded(items: Sequence[tuple[int, Tensor, int, str]]) -> HostBatch:
    """One host batch: the files' bytes end to end in one tensor."""
    indices, datas, targets, problems = zip(*items)
    return (
        torch.as_tensor(indices, dtype=torch.int64),
        torch.cat(datas),
        torch.as_tensor([len(d) for d in datas], dtype=torch.int64),
        torch.as_tensor(targets, dtype=torch.int64),
        tuple(problems),
    )


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[-1] if lines else ''}".strip()


def decode_on_host(data: Tensor) -> Tensor:
    """(3, H, W) uint8 RGB by torchvision, else PIL; ValueError when neither can."""
    from PIL import Image
    from torchvision.io import ImageReadMode, decode_image

    try:
        return decode_image(data, mode=ImageReadMode.RGB)
    except (RuntimeError, ValueError):
        pass
    try:
        with Image.open(io.BytesIO(data.numpy().tobytes())) as image:
            pixels = np.array(image.convert("RGB"))
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise ValueError(_first_line(err)) from err
    return torch.from_numpy(pixels).permute(2, 0, 1).contiguous()


def _is_whole_jpeg(data: Tensor) -> bool:
    """Starts as a JPEG and ends with its end-of-image marker."""
    head, tail = tuple(data[:3].tolist()), tuple(data[-2:].tolist())
    return len(data) > 4 and head == JPEG_START and tail == JPEG_END


@functools.lru_cache(maxsize=None)
def _allocation_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream nvJPEG's outputs are allocated on, one per device (see the decoder below)."""
    return torch.cuda.Stream(device)


def _decode_jpegs_on_gpu(datas: list[Tensor], device: torch.device) -> list[Optional[Tensor]]:
    """nvJPEG in one batched call; on failure, one call per file: None where nvJPEG refuses.
    nvJPEG writes at once, not after the current stream's queued kernels (pytorch/vision#9606):
    outputs allocated there could overwrite blocks those kernels still read (NaN weights), so they
    are allocated on a stream of their own and kept until the current stream's uses end."""
    from torchvision.io import ImageReadMode, decode_jpeg

    current, side = torch.cuda.current_stream(device), _allocation_stream(device)
    with torch.cuda.stream(side):
        try:
            decoded = list(decode_jpeg(datas, mode=ImageReadMode.RGB, device=device))
        except RuntimeError as err:
            decoded = []
            for data in datas:
                try:
                    decoded.append(decode_jpeg(data, mode=ImageReadMode.RGB, device=device))
                except RuntimeError:
                    decoded.append(None)
            if len(datas) > 1 and all(image is None for image in decoded):
                _say_host_decoding(_first_line(err))
    current.wait_stream(side)
    for image in decoded:
        if image is not None:
            image.record_stream(current)
    return decoded


@functools.lru_cache(maxsize=None)
def _say_host_decoding(problem: str) -> None:
    """Once per problem: nvJPEG refused a whole batch, so the host decodes (slowly)."""
    print(
        f"solo-diet: nvJPEG decoded none of a batch's JPEGs ({problem}); the host decodes them.",
        file=sys.stderr,
        flush=True,
    )


def decode_images(
    datas: Sequence[Tensor], device: torch.device, problems: Sequence[str] = ()
) -> tuple[list[Optional[Tensor]], dict[int, str]]:
    """Each file's (3, H, W) uint8 image on ``device``, and each position's problem."""
    images: list[Optional[Tensor]] = [None] * len(datas)
    failed = {i: problem for i, problem in enumerate(problems) if problem}
    if device.type == "cuda":
        jpegs = [i for i, data in enumerate(datas) if i not in failed and _is_whole_jpeg(data)]
        if jpegs:
            for i, image in zip(jpegs, _decode_jpegs_on_gpu([datas[i] for i in jpegs], device)):
                images[i] = image
    for i, data in enumerate(datas):
        if images[i] is None and i not in failed:
            try:
                image = decode_on_host(data)
            except ValueError as err:
                failed[i] = str(err)
                continue
            images[i] = to_device(image, device)
    return images, failed


class StreamLoader(GPUBatchLoader):
    """Batches of :class:`EncodedFiles` decoded and transformed on the device."""

    storages = ("stream",)

    def __init__(
        self,
        *args: Any,
        num_workers: int = DEFAULT_WORKERS,
        on_corrupt: str = "stop",
        storage: str = "stream",
        cuda_graphs: bool = False,
        **kwargs: Any,
    ) -> None:
        if on_corrupt not in ON_CORRUPT:
            raise ArgumentError(
                Argument("on_corrupt"), f" must be one of {list(ON_CORRUPT)}, got {on_corrupt!r}."
            )
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ArgumentError(
                Argument("num_workers"), f" must be an integer >= 0, got {num_workers!r}."
            )
        super().__init__(*args, storage=storage, cuda_graphs=False, **kwargs)
        self.num_workers, self.on_corrupt = num_workers, on_corrupt
        self.skipped: dict[str, str] = {}  # path -> problem, for on_corrupt="skip"
        self._host_loader: Optional[torch.utils.data.DataLoader] = None

    def host_batches(self, device: torch.device) -> torch.utils.data.DataLoader:
        """The DataLoader of encoded batches, made once (its workers persist)."""
        if self._host_loader is None:
            self._host_loader = torch.utils.data.DataLoader(
                self.dataset,
                batch_sampler=self.batch_sampler,
                num_workers=self.num_workers,
                collate_fn=collate_encoded,
                pin_memory=device.type == "cuda",
                persistent_workers=self.num_workers > 0,
                prefetch_factor=4 if self.num_workers > 0 else None,
            )
        return self._host_loader

    def close(self) -> None:
        """Stop the host workers now (at exit they hold it 5 s each, pytorch#81794)."""
        loader, self._host_loader = self._host_loader, None
        iterator = getattr(loader, "_iterator", None)  # torch keeps persistent workers' iterator
        if iterator is not None:
            iterator._shutdown_workers()

    def _corrupt(self, failed: dict[int, str], indices: Tensor) -> None:
        named = [(self.dataset.path(int(indices[i])), problem) for i, problem in failed.items()]
        listing = "; ".join(f"{path} ({problem})" for path, problem in named)
        if self.on_corrupt == "stop" or len(failed) == len(indices):
            raise CorruptImage(
                f"cannot decode {listing}: replace or delete the file, or set ",
                Argument("on_corrupt", ": skip"),
                " to train without it.",
            )
        for path, problem in named:
            if path not in self.skipped:
                print(
                    f"solo-diet: skipping the corrupt image {path} ({problem}); its place in the "
                    "batch takes another sample of the batch (on_corrupt: skip).",
                    file=sys.stderr,
                    flush=True,
                )
            self.skipped[path] = problem

    def decoded_batch(
        self, batch: HostBatch, device: torch.device
    ) -> tuple[Tensor, list[Tensor], Tensor]:
        """(indices, images, targets) of a host batch; corrupt files stop or are skipped."""
        indices, flat, lengths, targets, problems = batch
        images, failed = decode_images(list(flat.split(lengths.tolist())), device, problems)
        if failed:
            self._corrupt(failed, indices)
            good = [i for i in range(len(images)) if i not in failed]
            stand_in = torch.arange(len(images))
            for slot, i in enumerate(sorted(failed)):
                stand_in[i] = good[slot % len(good)]
                images[i] = images[good[slot % len(good)]]
            indices, targets = indices[stand_in], targets[stand_in]
        return indices, images, targets

    def __iter__(self) -> Iterator[list]:
        device = resolve_device(self.device)
        transform, generator = self.augmenter(device)
        generator.manual_seed(derive_seed(self.seed, self.epoch, self.rank()))
        for batch in self.host_batches(device):
            indices, images, targets = self.decoded_batch(batch, device)
            idx = indices.to(device, non_blocking=True)
            batch_targets = targets.to(device, non_blocking=True)
            out = transform(images, generator)
            yield [idx, list(out), batch_targets] if self.pretraining else [out, batch_targets]
