"""``solo-diet configs DIR``: copy the shipped launch configs (``solo_diet/configs/``, package
data; ``scripts/`` and ``benchmarks/compare/`` link there) into ``DIR``: ``pretrain/<dataset>/``,
``linear/<dataset>/`` and ``compare/``, each ready for ``--config-path``."""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path
from typing import Optional

from solo_diet.config import ConfigError

SHIPPED = Path(__file__).resolve().parent.parent / "configs"
DATASET_CHOICES = ("cifar", "imagenet-100", "custom")


def shipped_folders(dataset: Optional[str] = None) -> list[Path]:
    """The shipped config folders, relative to ``SHIPPED``: pretrain and linear of ``dataset`` (all
    datasets when None) and, for custom data, the side-by-side comparison."""
    datasets = DATASET_CHOICES if dataset is None else (dataset,)
    folders = [Path(stage) / name for name in datasets for stage in ("pretrain", "linear")]
    if dataset in (None, "custom"):
        folders.append(Path("compare"))
    return folders


def _files(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*.yaml"))


def write_configs(directory: str, dataset: Optional[str] = None, force: bool = False) -> list[Path]:
    """Copy the shipped configs into ``directory``; returns the folders written.

    An identical file already there is left alone; a different one is refused unless ``force``."""
    root = Path(directory).expanduser().resolve()
    folders = shipped_folders(dataset)
    copies = [
        (SHIPPED / f / name, root / f / name) for f in folders for name in _files(SHIPPED / f)
    ]
    if not copies:
        raise FileNotFoundError(
            f"no shipped configs in {SHIPPED}: the solo-diet installation is incomplete."
        )
    changed = [
        dst for src, dst in copies if dst.exists() and not filecmp.cmp(src, dst, shallow=False)
    ]
    if changed and not force:
        raise ConfigError(
            f"{len(changed)} config(s) in {root} differ from the shipped ones (e.g. {changed[0]}): "
            "pass --force to overwrite them, or choose another directory."
        )
    for src, dst in copies:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    return [root / f for f in folders]
