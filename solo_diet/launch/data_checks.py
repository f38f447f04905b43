"""What our launchers refuse of a folder dataset's paths before any image is read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from solo_diet.core.data import FOLDER_DATASETS
from solo_diet.core.settings import KeyReader

# the split folders of a dataset root: refused in `data.train_path`, where each would be a class
SPLIT_FOLDERS = ("train", "val", "validation", "test")


def class_folders(path: Any) -> set[str]:
    """The subfolders of an image folder: its classes, as solo-learn and torchvision read them."""
    return {entry.name for entry in os.scandir(str(path)) if entry.is_dir()}


def check_data_paths(cfg: DictConfig) -> None:
    """Refuse a missing ``data.train_path``/``data.val_path``, or a dataset root as train path."""
    if OmegaConf.select(cfg, "data.dataset") not in FOLDER_DATASETS:
        return  # torchvision's datasets download into their path
    read = KeyReader(cfg)
    train, val = read.value("data.train_path", None), read.value("data.val_path", None)
    for key, path in (("data.train_path", train), ("data.val_path", val)):
        if path is not None and not Path(str(path)).exists():
            raise read.fail(
                key,
                f"{path} does not exist: point it at an image folder with one subfolder per class.",
            )
    if train is None or not Path(str(train)).is_dir():
        return
    root = Path(str(train))
    splits = sorted(class_folders(root) & set(SPLIT_FOLDERS))
    holds_val = val is not None and root.resolve() in Path(str(val)).resolve().parents
    if not ("train" in splits or len(splits) > 1 or holds_val):
        return
    fix = "point it at the training images alone (one subfolder per class)"
    if "train" in splits:
        fix = f"pass data.train_path={root / 'train'}"
        fix += f" data.val_path={root / 'val'}" if "val" in splits else ""
    held = ", ".join(f"{split}/" for split in splits) if splits else f"`data.val_path` {val}"
    raise read.fail(
        "data.train_path",
        f"= {root} is a dataset root: it holds {held}, each of which would be trained on as a "
        f"class; {fix}.",
    )
