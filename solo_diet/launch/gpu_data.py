"""What the data paths of :mod:`solo_diet.launch.datapaths` share: the probe's GPU transforms
and the probe batch fitted to a small training set (docs/data-path.md).

Each function takes the run's checked settings, never its config: ``run``, its
:class:`~solo_diet.launch.loader_settings.LoaderSettings`.
"""

from __future__ import annotations

from typing import Optional

from solo_diet.config import ConfigError
from solo_diet.data.pipeline import (
    IMAGENET_STATS,
    EvalTransform,
    ProbeTrainTransform,
)
from solo_diet.launch.loader_settings import FittedBatch, LoaderSettings, ProbeAugmentation

# solo-learn's classification pipelines of its named sets: crop, mean, std, eval resize size
PROBE_PIPELINES = {
    "cifar10": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "cifar100": (32, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261), 32),
    "stl10": (96, (0.4914, 0.4823, 0.4466), (0.247, 0.243, 0.261), 96),
    "imagenet": (224, *IMAGENET_STATS, 256),
    "imagenet100": (224, *IMAGENET_STATS, 256),
}


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
