"""The streaming data path (``data.gpu.storage: stream``, docs/data-path.md)."""

from __future__ import annotations

from typing import Any

import torch

from solo_diet.core.data.stream import (
    DEFAULT_WORKERS,
    CorruptImage,
    EncodedFiles,
    StreamLoader,
    decode_images,
)
from solo_diet.launch.datapaths.base import ViewRequest
from solo_diet.launch.datapaths.gpu import GPUPath
from solo_diet.launch.settings import LoaderSettings


class StreamPath(GPUPath):
    """:class:`GPUPath` over encoded files (:class:`EncodedFiles`, :class:`StreamLoader`)."""

    storage = "stream"
    loader_class = StreamLoader

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.loaders: list[StreamLoader] = []

    def read_split(self, run: LoaderSettings, root: Any, split: str, fraction: float) -> Any:
        """The split's files, listed, not read."""
        return EncodedFiles.from_folder(
            run.dataset, root, split, no_labels=run.no_labels, fraction=fraction
        )

    def loader_kwargs(self, run: LoaderSettings) -> dict[str, Any]:
        stream = {"num_workers": run.workers(DEFAULT_WORKERS), "on_corrupt": self.gpu.on_corrupt}
        return super().loader_kwargs(run) | stream

    def opened(self, loader: StreamLoader) -> StreamLoader:
        self.loaders.append(loader)
        return loader

    def close(self) -> None:
        """Stop every loader's host workers (left alone they hold the exit 5 s each)."""
        for loader in self.loaders:
            loader.close()

    @torch.no_grad()
    def lidar_views(self, run: LoaderSettings, request: ViewRequest) -> torch.Tensor:
        """The views of images of their own sizes, decoded on ``device``."""
        transform = self.view_transform(run, request)
        files = self.load_split(run, "val")
        chosen = request.choose(len(files)).tolist()
        read = [files[index] for index in chosen]
        images, failed = decode_images(
            [data for _, data, _, _ in read], request.device, [p for *_, p in read]
        )
        if failed:
            position, problem = next(iter(failed.items()))
            path = files.path(chosen[position])
            raise CorruptImage(f"cannot decode {path} ({problem}): replace or delete the file.")
        generator = torch.Generator(request.device).manual_seed(request.seed)
        repeated = [image for image in images for _ in range(request.views)]
        size = request.batch_size
        chunks = [repeated[start : start + size] for start in range(0, len(repeated), size)]
        return torch.cat([transform(chunk, generator).cpu() for chunk in chunks])
