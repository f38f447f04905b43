"""``solo-diet demo``: data, pretraining, linear probe, and the probe of two reference rows."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional

import torch
from omegaconf import OmegaConf

from solo_diet.cli.data import write_dataset
from solo_diet.compare.spec.load import resolve_launch_format
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import FORMAT_KEY
from solo_diet.launch.callbacks import OverallProgress
from solo_diet.launch.checkpointing import save_random_init, save_raw_pixels
from solo_diet.launch.common import compose_cfg

DEMO_CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "demo"
DEMO_EPOCHS = {"cpu": 25, "gpu": 100}


def demo_data_format(requested: str) -> str:
    """``--data-format``; auto: the tensor data path on the CPU too (3x faster on 2 cores)."""
    return resolve_launch_format(requested, on_gpu=True, key="--data-format")


def _overrides(data: Path, accelerator: str, data_format: str) -> list[str]:
    """What the demo's pretraining and probes share: the data, the device, the data path."""
    precision = "bf16-mixed" if accelerator == "gpu" else "32"
    workers = min(8, len(os.sched_getaffinity(0)))
    return [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        f"accelerator={accelerator}",
        "devices=1",
        f"precision={precision}",
        f"data.num_workers={workers}",
        f"{FORMAT_KEY}={data_format}",
    ]


def _probe(workdir: Path, data: Path, ckpt: str, accelerator: str, data_format: str) -> float:
    from solo_diet.launch.linear import run_linear

    overrides = [f"pretrained_feature_extractor='{ckpt}'", f"++checkpoint.dir={workdir / 'linear'}"]
    overrides += _overrides(data, accelerator, data_format)
    return run_linear(compose_cfg(str(DEMO_CONFIGS), "linear", overrides))["val_acc1"]


def run_demo(
    method: str = "diet",
    epochs: Optional[int] = None,
    workdir: str = "solo-diet-demo",
    accelerator: str = "auto",
    data_format: str = "auto",
) -> tuple[float, float, float]:
    """Run the demo: the probe's top-1 (%) of the pretrained, random-init backbones, raw pixels."""
    from solo_diet.launch.pretrain import run_pretrain

    if not (DEMO_CONFIGS / f"{method}.yaml").is_file():
        available = sorted(p.stem for p in DEMO_CONFIGS.glob("*.yaml") if p.stem != "linear")
        raise ConfigError(f"no demo config for method {method!r}; available: {available}.")
    cuda = torch.cuda.is_available()
    if accelerator == "gpu" and not cuda:
        raise ConfigError("--accelerator gpu, but torch sees no CUDA device.")
    accelerator = ("gpu" if cuda else "cpu") if accelerator == "auto" else accelerator
    data_format = demo_data_format(data_format)
    epochs = DEMO_EPOCHS[accelerator] if epochs is None else epochs
    if epochs <= 0:
        raise ConfigError(f"--epochs must be positive, got {epochs}.")
    root = Path(workdir).expanduser().resolve()
    start = time.time()
    probe_yaml = OmegaConf.load(DEMO_CONFIGS / "linear.yaml")
    # weights in pretraining epochs: the data ~1, a probe epoch (frozen backbone) ~half of one
    weights = [1, epochs] + [probe_yaml.max_epochs / 2] * 3
    progress = OverallProgress("demo", weights, from_epochs=True)
    progress.step(1, "writing Animal-MNIST")
    data = write_dataset("animal-mnist", str(root / "data"))
    print(f"[demo] data ready in {data} ({time.time() - start:.0f}s)")

    overrides = [f"checkpoint.dir={root / 'pretrain'}", f"max_epochs={epochs}"]
    cfg = compose_cfg(
        str(DEMO_CONFIGS), method, overrides + _overrides(data, accelerator, data_format)
    )
    progress.step(2, f"pretraining {method} for {epochs} epochs")
    epoch_lines = progress.epoch_callback(2, f"pretraining {method}")
    ckpt = run_pretrain(cfg, extra_callbacks=[epoch_lines])
    if not epoch_lines.started:  # a finished pretraining rerun
        progress.skip(2)
    if ckpt is None:
        raise RuntimeError("pretraining wrote no checkpoint")
    print(
        f"[demo] pretrained {method} for {epochs} epochs on {accelerator} "
        f"({time.time() - start:.0f}s): {ckpt}"
    )

    untrained = save_random_init(cfg, root / "random_init" / "untrained.ckpt")
    crop = probe_yaml.data.augmentations.crop_size
    pixels = save_raw_pixels(root / "raw_pixels" / "pixels.ckpt", (3, crop, crop), "custom")
    accuracies = []
    probed = [(ckpt, f"the {method} backbone"), (untrained, "a random-init backbone")]
    for step, (checkpoint, what) in enumerate([*probed, (pixels, "the raw pixels")], 3):
        progress.step(step, f"linear probe of {what}")
        accuracies.append(_probe(root, data, str(checkpoint), accelerator, data_format))
    trained_acc, random_acc, pixels_acc = accuracies
    print(f"[demo] total {time.time() - start:.0f}s on {accelerator}")
    print(
        f"linear probe top-1: {trained_acc:.2f}% (random-init backbone: {random_acc:.2f}%, "
        f"raw pixels: {pixels_acc:.2f}%)"
    )
    return trained_acc, random_acc, pixels_acc
