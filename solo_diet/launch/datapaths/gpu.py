"""The GPU data path (``gpu``): the set decoded once into a uint8 tensor, batches augmented on the
training device (:mod:`solo_diet.launch.gpu_data`, docs/data-path.md)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from solo_diet.data.pipeline import MultiCropAugmentation
from solo_diet.data.stream import CorruptImage, EncodedFiles, decode_images
from solo_diet.launch import gpu_data
from solo_diet.launch.datapaths.base import BatchSamplerHook, DataPath, PretrainData, ViewRequest
from solo_diet.launch.loader_settings import FittedBatch, LoaderSettings, ProbeAugmentation
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    GPUDataSettings,
    core_errors_named,
)


class GPUPath(DataPath):
    """Loaders of :mod:`solo_diet.launch.gpu_data` with the run's checked ``data.gpu`` settings."""

    formats = ("gpu",)
    reads = "gpu"

    @property
    def gpu(self) -> GPUDataSettings:
        assert self.settings.gpu is not None, "parse_data_settings fills them for this path"
        return self.settings.gpu

    def pretrain_data(
        self, run: LoaderSettings, batch_sampler: Optional[BatchSamplerHook] = None
    ) -> PretrainData:
        loader, num_samples = gpu_data.pretrain_loader(run, self.gpu, batch_sampler)
        return PretrainData(loader, num_samples)

    def classification_val_loader(
        self, run: LoaderSettings, probe: Optional[ProbeAugmentation], batch_size: int
    ) -> Any:
        return gpu_data.eval_loader(run, self.gpu, probe, batch_size)

    def linear_loaders(self, run: LoaderSettings) -> tuple[Any, Any, Optional[FittedBatch]]:
        return gpu_data.linear_loaders(run, self.gpu)

    def feature_loaders(self, run: LoaderSettings, batch_size: int) -> tuple[Any, Any]:
        return tuple(
            gpu_data.feature_loader(run, self.gpu, split, batch_size) for split in ("train", "val")
        )

    @torch.no_grad()
    def lidar_views(self, run: LoaderSettings, request: ViewRequest) -> torch.Tensor:
        """The views made on ``device`` by the GPU data path's augmentations."""
        if request.node is not None:
            with core_errors_named(GPU_ARGUMENT_KEYS):
                augment = MultiCropAugmentation.from_config([request.node], run.dataset)
            transform = lambda x, g: augment(x, g)[0]  # noqa: E731 - one view per image
        else:
            transform = gpu_data.probe_transforms(run.dataset, run.probe)[0]
        data = gpu_data.load_split(run, self.gpu, "val")
        chosen = request.choose(len(data))
        device = request.device
        generator = torch.Generator(device).manual_seed(request.seed)
        if isinstance(data, EncodedFiles):  # images of their own sizes: lists, as the stream's
            images = _decoded(data, chosen.tolist(), device)
            repeated = [image for image in images for _ in range(request.views)]
            size = request.batch_size
            chunks = [repeated[start : start + size] for start in range(0, len(repeated), size)]
            return torch.cat([transform(chunk, generator).cpu() for chunk in chunks])
        repeated = data.images[chosen].repeat_interleave(request.views, dim=0)
        chunks = repeated.split(request.batch_size)
        return torch.cat([transform(chunk.to(device), generator).cpu() for chunk in chunks])


def _decoded(files: EncodedFiles, indices: list[int], device: torch.device) -> list[torch.Tensor]:
    """The files at ``indices`` decoded on ``device``; a file that cannot be is named."""
    read = [files[index] for index in indices]
    images, failed = decode_images([data for _, data, _, _ in read], device, [p for *_, p in read])
    if failed:
        position, problem = next(iter(failed.items()))
        path = files.path(indices[position])
        raise CorruptImage(f"cannot decode {path} ({problem}): replace or delete the file.")
    return images
