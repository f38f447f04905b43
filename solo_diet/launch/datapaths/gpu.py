"""The GPU data path: the set decoded once, batches augmented on the device, or streamed from the
encoded files (``data.gpu.storage: stream``; docs/data-path.md)."""

from __future__ import annotations

import functools
import sys
from typing import Any, ClassVar, Optional

import torch

from solo_diet.core.data.loader import GPUBatchLoader
from solo_diet.core.data.pipeline import (
    IMAGENET_STATS,
    EvalTransform,
    MultiCropAugmentation,
    ProbeTrainTransform,
)
from solo_diet.core.data.stream import (
    DEFAULT_WORKERS,
    CorruptImage,
    EncodedFiles,
    StreamLoader,
    decode_images,
)
from solo_diet.core.data.tensor_data import load_images
from solo_diet.core.settings import core_errors_named
from solo_diet.launch.datapaths.base import BatchSamplerHook, DataPath, PretrainData, ViewRequest
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    FittedBatch,
    GPUDataSettings,
    LoaderSettings,
    ProbeAugmentation,
)

# solo-learn's classification pipelines of its named sets: crop, mean, std, eval resize size
PROBE_PIPELINES = {
    "cifar10": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "cifar100": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "stl10": (96, (0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261), 96),
    "imagenet": (224, *IMAGENET_STATS, 256),
    "imagenet100": (224, *IMAGENET_STATS, 256),
}


def probe_transforms(dataset: str, probe: Optional[ProbeAugmentation]):
    """``(train, eval)``, GPU twins of ``image_folder.classification_transforms``."""
    if dataset in PROBE_PIPELINES:
        crop_size, mean, std, resize_size = PROBE_PIPELINES[dataset]
        min_scale = 0.08
    else:
        (crop_size, min_scale, mean, std), resize_size = probe, None
    train = ProbeTrainTransform(crop_size, mean, std, min_scale=min_scale)
    return train, EvalTransform(crop_size, mean, std, resize_size=resize_size)


@functools.lru_cache(maxsize=None)
def say_cpu_batches() -> None:
    """Once per process: the GPU data path on a CPU works, slowly."""
    print(
        "solo-diet: the GPU data path on the CPU: the same batched augmentations run eagerly in "
        "this process, slower than solo-learn's image-folder loader with loader workers on a CPU.",
        file=sys.stderr,
        flush=True,
    )


class GPUPath(DataPath):
    """Loaders of decoded images (``data.gpu.storage: stream``: :class:`StreamPath`)."""

    formats = ("gpu",)
    reads = "gpu"
    loader_class: ClassVar[type[GPUBatchLoader]] = GPUBatchLoader

    @property
    def gpu(self) -> GPUDataSettings:
        return self.settings.gpu

    def load_split(self, run: LoaderSettings, split: str, fraction: float = -1.0) -> Any:
        """The ``pretrain``, ``train`` or ``val`` set; an error naming ``root`` names its key."""
        key = "val_path" if split == "val" else "train_path"
        with core_errors_named(GPU_ARGUMENT_KEYS | {"root": f"data.{key}"}):
            return self.read_split(run, getattr(run, key), split, fraction)

    def read_split(self, run: LoaderSettings, root: Any, split: str, fraction: float) -> Any:
        """The split decoded into one uint8 tensor."""
        return load_images(
            run.dataset,
            root,
            split,
            no_labels=run.no_labels,
            fraction=fraction,
            image_size=self.gpu.image_size,
            threads=self.gpu.decode_threads,
            cache=self.gpu.decode_cache,
        )

    def loader_kwargs(self, run: LoaderSettings) -> dict[str, Any]:
        """The keyword arguments every loader of this path gets."""
        if self.gpu.device == "cpu":
            say_cpu_batches()
        keys = ("storage", "device", "cuda_graphs")
        return {"seed": run.seed} | {key: getattr(self.gpu, key) for key in keys}

    def pretrain_data(
        self, run: LoaderSettings, batch_sampler: Optional[BatchSamplerHook] = None
    ) -> PretrainData:
        data = self.load_split(run, "pretrain", fraction=run.fraction)
        run.check_one_global_batch(len(data))
        sampler = None if batch_sampler is None else batch_sampler(data)
        make = self.loader_class.for_pretraining
        loader = self.make_loader(run, make, data, run.batch_size, run.views, batch_sampler=sampler)
        return PretrainData(loader, len(data))

    def classification_val_loader(
        self, run: LoaderSettings, batch_size: int, split: str = "val", split_ranks: bool = True
    ) -> Any:
        """A split in order, eval-transformed (``split_ranks``: each rank its share)."""
        data = self.load_split(run, split)
        _, transform = probe_transforms(run.dataset, run.probe)
        make = self.loader_class.for_classification
        return self.make_loader(
            run, make, data, batch_size, transform, shuffle=False, split_ranks=split_ranks
        )

    def linear_loaders(self, run: LoaderSettings) -> tuple[Any, Any, Optional[FittedBatch]]:
        """The probe's train and val loaders, and the fitted batch."""
        train_transform, _ = probe_transforms(run.dataset, run.probe)
        data = self.load_split(run, "train", fraction=run.fraction)
        fitted = run.fit_probe_batch(len(data))
        batch = fitted.batch_size if fitted else run.batch_size
        make = self.loader_class.for_classification
        train = self.make_loader(run, make, data, batch, train_transform, shuffle=True)
        val = self.classification_val_loader(run, batch)
        return train, val, fitted

    def feature_loaders(self, run: LoaderSettings, batch_size: int) -> tuple[Any, Any]:
        return tuple(
            self.classification_val_loader(run, batch_size, split, split_ranks=False)
            for split in ("train", "val")
        )

    def make_loader(self, run: LoaderSettings, make: Any, *args: Any, **kwargs: Any) -> Any:
        """``make(*args, **kwargs)`` with this path's loader arguments, errors naming their keys."""
        with core_errors_named(GPU_ARGUMENT_KEYS):
            return make(*args, **kwargs, **self.loader_kwargs(run))

    @torch.no_grad()
    def lidar_views(self, run: LoaderSettings, request: ViewRequest) -> torch.Tensor:
        """The views made on ``device`` by the GPU data path's augmentations."""
        transform = self.view_transform(run, request)
        data = self.load_split(run, "val")
        chosen = request.choose(len(data))
        generator = torch.Generator(request.device).manual_seed(request.seed)
        repeated = data.images[chosen].repeat_interleave(request.views, dim=0)
        chunks = repeated.split(request.batch_size)
        return torch.cat([transform(c.to(request.device), generator).cpu() for c in chunks])

    @staticmethod
    def view_transform(run: LoaderSettings, request: ViewRequest) -> Any:
        """LiDAR's augmentation: ``request.node``'s first view, else the probe's training one."""
        if request.node is None:
            return probe_transforms(run.dataset, run.probe)[0]
        with core_errors_named(GPU_ARGUMENT_KEYS):
            augment = MultiCropAugmentation.from_config([request.node], run.dataset)
        return lambda x, g: augment(x, g)[0]


class StreamPath(GPUPath):
    """:class:`GPUPath` over encoded files (:class:`EncodedFiles`, :class:`StreamLoader`)."""

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

    def make_loader(self, run: LoaderSettings, make: Any, *args: Any, **kwargs: Any) -> Any:
        """The loader, kept to be closed."""
        self.loaders.append(super().make_loader(run, make, *args, **kwargs))
        return self.loaders[-1]

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
