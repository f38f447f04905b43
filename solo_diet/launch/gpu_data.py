"""The GPU data path's loaders (:class:`solo_diet.launch.datapaths.gpu.GPUPath`): the set
decoded once into a uint8 tensor, batches augmented on the training device (docs/data-path.md).

Each function takes the run's checked settings, never its config: ``run``, its
:class:`~solo_diet.launch.loader_settings.LoaderSettings`, and ``gpu``, its
:class:`~solo_diet.launch.settings.GPUDataSettings`. The keys are documented in
:mod:`solo_diet.launch.settings` and :mod:`solo_diet.launch.loader_settings`.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from typing import Any, Callable, Optional, Sequence, Union

from solo_diet.config import ConfigError
from solo_diet.data.loader import GPUBatchLoader
from solo_diet.data.pipeline import (
    IMAGENET_STATS,
    EvalTransform,
    ProbeTrainTransform,
)
from solo_diet.data.stream import DEFAULT_WORKERS, EncodedFiles, StreamLoader
from solo_diet.data.tensor_data import ImageTensors, load_images
from solo_diet.launch.loader_settings import FittedBatch, LoaderSettings, ProbeAugmentation
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    GPUDataSettings,
    core_errors_named,
)

# solo-learn's classification pipelines of its named sets: crop, mean, std, eval resize size
PROBE_PIPELINES = {
    "cifar10": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "cifar100": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "stl10": (96, (0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261), 96),
    "imagenet": (224, *IMAGENET_STATS, 256),
    "imagenet100": (224, *IMAGENET_STATS, 256),
}


def load_split(
    run: LoaderSettings, gpu: GPUDataSettings, split: str, fraction: float = -1.0
) -> Union[ImageTensors, EncodedFiles]:
    """Decode the ``pretrain``/``train`` (``data.train_path``) or ``val`` (``data.val_path``)
    set; with ``data.gpu.storage: stream``, list its files instead."""
    root_key = "data.val_path" if split == "val" else "data.train_path"
    root = run.val_path if split == "val" else run.train_path
    with core_errors_named(GPU_ARGUMENT_KEYS | {"root": root_key}):
        if gpu.storage == "stream":
            return EncodedFiles.from_folder(
                run.dataset, root, split, no_labels=run.no_labels, fraction=fraction
            )
        return load_images(
            run.dataset,
            root,
            split,
            no_labels=run.no_labels,
            fraction=fraction,
            image_size=gpu.image_size,
            threads=gpu.decode_threads,
            cache=gpu.decode_cache,
        )


def _loader_class(gpu: GPUDataSettings) -> type[GPUBatchLoader]:
    """:class:`StreamLoader` for ``data.gpu.storage: stream``, else :class:`GPUBatchLoader`."""
    return StreamLoader if gpu.storage == "stream" else GPUBatchLoader


def _loader_kwargs(run: LoaderSettings, gpu: GPUDataSettings) -> dict[str, Any]:
    if gpu.device == "cpu":
        _say_cpu_batches()
    stream = {"num_workers": run.workers(DEFAULT_WORKERS), "on_corrupt": gpu.on_corrupt}
    return {
        "seed": run.seed,
        "storage": gpu.storage,
        "device": gpu.device,
        "cuda_graphs": gpu.cuda_graphs,
    } | (stream if gpu.storage == "stream" else {})


@functools.lru_cache(maxsize=None)
def _say_cpu_batches() -> None:
    """Once per process: the GPU data path on a CPU works, slowly."""
    print(
        "solo-diet: the GPU data path on the CPU: the same batched augmentations run eagerly in "
        "this process, slower than solo-learn's image-folder loader with loader workers on a CPU.",
        file=sys.stderr,
        flush=True,
    )


def probe_transforms(dataset: str, probe: Optional[ProbeAugmentation]):
    """GPU twins of :func:`solo_diet.launch.common.classification_transforms`: ``(train, eval)``;
    ``probe`` (custom data's crop and statistics) is unused for solo-learn's named sets."""
    if dataset in PROBE_PIPELINES:
        crop_size, mean, std, resize_size = PROBE_PIPELINES[dataset]
        min_scale = 0.08
    else:
        assert probe is not None, "parse_loader_settings requires it for custom data"
        (crop_size, min_scale, mean, std), resize_size = probe, None
    train = ProbeTrainTransform(crop_size, mean, std, min_scale=min_scale)
    return train, EvalTransform(crop_size, mean, std, resize_size=resize_size)


def fit_probe_batch(run: LoaderSettings, num_samples: int) -> Optional[FittedBatch]:
    """A probe's training set smaller than one global batch would give no training batch (the
    incomplete one is dropped): lower ``optimizer.batch_size`` to the set's size per device, scale
    the learning rate with it (solo-learn's linear scaling) and say so in one line. Returns what
    was fitted (the launcher writes it into the probe's config), or None when the batch fits."""
    world, batch = run.world_size, run.batch_size
    if num_samples >= batch * world:
        return None
    fitted = num_samples // world
    devices = f" x {world} devices" if world > 1 else ""
    if fitted < 1:
        raise ConfigError(
            f"the probe's training set has {num_samples} images, fewer than the {world} devices: "
            "add images or use fewer devices."
        )
    lr = run.lr
    scaled = lr * fitted / batch
    print(
        f"solo-diet linear: the training set has {num_samples} images, fewer than one batch "
        f"(optimizer.batch_size={batch}{devices}, incomplete batches dropped): the probe trains "
        f"at optimizer.batch_size={fitted}, learning rate {lr:g} -> {scaled:g}.",
        flush=True,
    )
    return FittedBatch(num_samples, fitted, batch, scaled)


def pretrain_loader(
    run: LoaderSettings,
    gpu: GPUDataSettings,
    batch_sampler: Optional[Callable[[Sequence[Any]], Optional[Any]]] = None,
) -> tuple[GPUBatchLoader, int]:
    """The pretraining loader ``[indexes, [views], targets]`` and N. ``batch_sampler(dataset)``,
    the method's hook (s-DIET) bound to its config, may return its own batch sampler; None:
    shuffled."""
    data = load_split(run, gpu, "pretrain", fraction=run.fraction)
    run.check_one_global_batch(len(data))
    sampler = None if batch_sampler is None else batch_sampler(data)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        loader = _loader_class(gpu).for_pretraining(
            data,
            run.batch_size,
            run.views,
            batch_sampler=sampler,
            **_loader_kwargs(run, gpu),
        )
    return loader, len(data)


def eval_loader(
    run: LoaderSettings,
    gpu: GPUDataSettings,
    probe: Optional[ProbeAugmentation],
    batch_size: int,
    split: str = "val",
    split_ranks: bool = True,
) -> GPUBatchLoader:
    """``[images, targets]`` of a split in dataset order, eval-transformed (crop and statistics
    from ``probe``, as the probe's); ``split_ranks``: each DDP rank its contiguous share."""
    data = load_split(run, gpu, split)
    _, transform = probe_transforms(run.dataset, probe)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        return _loader_class(gpu).for_classification(
            data,
            batch_size,
            transform,
            shuffle=False,
            split_ranks=split_ranks,
            **_loader_kwargs(run, gpu),
        )


def linear_loaders(
    run: LoaderSettings, gpu: GPUDataSettings
) -> tuple[GPUBatchLoader, GPUBatchLoader, Optional[FittedBatch]]:
    """``solo-diet linear``: probe training (random resized crop + flip, shuffled, incomplete batch
    dropped, ``data.fraction`` as solo-learn) and validation loaders, and the batch fitted to a
    small training set (:func:`fit_probe_batch`)."""
    train_transform, _ = probe_transforms(run.dataset, run.probe)
    data = load_split(run, gpu, "train", fraction=run.fraction)
    fitted = fit_probe_batch(run, len(data))
    if fitted:
        run = dataclasses.replace(run, batch_size=fitted.batch_size, lr=fitted.lr)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        train = _loader_class(gpu).for_classification(
            data, run.batch_size, train_transform, shuffle=True, **_loader_kwargs(run, gpu)
        )
    return train, eval_loader(run, gpu, run.probe, run.batch_size), fitted


def feature_loader(
    run: LoaderSettings, gpu: GPUDataSettings, split: str, batch_size: int
) -> GPUBatchLoader:
    """Every image of the probe's ``train`` or ``val`` set once, in dataset order, transformed as
    ``solo-diet linear`` validates (``run``: a linear probe's settings): feature extraction for
    kNN, RankMe, k-means. Not split over ranks."""
    return eval_loader(run, gpu, run.probe, batch_size, split=split, split_ranks=False)
