"""Reference checkpoints, an untrained backbone and the raw pixels, in the layout of solo-learn's
pretraining checkpoints (``backbone.*`` tensors beside an ``args.json``), probed like a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from solo_diet._atomic import atomic_write, write_text_atomic
from solo_diet.methods._common import SOLO_LEARN_SEED


def _save(path: Path, backbone: torch.nn.Module, args: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
    with atomic_write(path, binary=True) as f:
        torch.save({"state_dict": state}, f)
    write_text_atomic(path.parent / "args.json", json.dumps(args, default=str))
    return path


def save_random_init(cfg: DictConfig, path: Path) -> Path:
    """The backbone of pretraining cfg ``cfg`` (``backbone``, ``method``, ``data.dataset``),
    initialised with the cfg's seed and never trained."""
    from lightning.pytorch import seed_everything

    from solo_diet.methods.checkpoint import build_backbone

    seed = int(OmegaConf.select(cfg, "seed", default=SOLO_LEARN_SEED))
    kwargs = OmegaConf.select(cfg, "backbone.kwargs", default=None)
    args = {
        "method": str(cfg.method),
        "backbone": {
            "name": str(cfg.backbone.name),
            "kwargs": {} if kwargs is None else OmegaConf.to_container(kwargs, resolve=True),
        },
        "data": {"dataset": str(cfg.data.dataset)},
        "seed": seed,
    }
    seed_everything(seed)
    backbone = build_backbone(OmegaConf.create({**args, "pretrain_method": args["method"]}))
    return _save(path, backbone, args)


def save_raw_pixels(path: Path, image_shape: tuple[int, int, int], dataset: str) -> Path:
    """The ``raw_pixels`` backbone (the flattened image, ``solo_diet.backbones.RawPixels``) for
    images of ``image_shape`` = (channels, size, size) after the probe's eval transform."""
    from solo_diet.backbones import RawPixels

    channels, height, width = image_shape
    if height != width:
        raise ValueError(f"raw_pixels needs square images, got {height}x{width}")
    backbone = RawPixels(size=height, channels=channels)
    args = {
        "method": "raw_pixels",
        "backbone": {"name": "raw_pixels", "kwargs": {"size": height, "channels": channels}},
        "data": {"dataset": dataset},
    }
    return _save(path, backbone, args)
