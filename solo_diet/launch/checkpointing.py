"""A run's checkpoints: written whole and locked, resumed from, and the reference ones."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.strategies.ddp import DDPStrategy
from omegaconf import DictConfig, OmegaConf
from solo.utils.checkpointer import Checkpointer

from solo_diet.core.atomic import atomic_write, remove_stale_temporaries, write_text_atomic
from solo_diet.core.errors import ConfigError
from solo_diet.core.lock import folder_lock, lock_file
from solo_diet.launch.errors import disk_full_named
from solo_diet.methods._common import SOLO_LEARN_SEED
from solo_diet.methods.checkpoint import (
    CorruptCheckpoint,
    check_checkpoint_file,
    checkpoint_problem,
    load_checkpoint_file,
    pickle_allowed,
)

# args.json keys an auto-resumed run must share besides AutoResumer's (the data and N)
SAME_RUN_KEYS = ("data.train_path", "data.val_path", "data.fraction", "method_kwargs.num_samples")
ARGS_FILE, RUN_LOCK_FILE = "args.json", ".run.lock"  # in each run folder


def checkpoint_epoch(path: Optional[str | Path], default: Optional[int] = None) -> Optional[int]:
    """The epoch in a Checkpointer file name (``...-ep=<epoch>.ckpt``), else ``default``."""
    match = re.search(r"ep=(\d+)\.ckpt$", str(path)) if path else None
    return int(match.group(1)) if match else default


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint IO of local files: saved whole, loaded without pickle by default."""

    def __init__(self, allow_pickle: bool = False):
        self.allow_pickle = allow_pickle

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Optional[Any] = None
    ) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with disk_full_named(Path(path)), atomic_write(path, binary=True) as f:
            torch.save(checkpoint, f)

    def load_checkpoint(self, path: Any, map_location: Optional[Any] = None) -> dict[str, Any]:
        return load_checkpoint_file(path, allow_pickle=self.allow_pickle)


class RunCheckpointer(Checkpointer):
    """solo-learn's ``Checkpointer``: ``args.json`` written whole, rank 0's run folder everywhere, a
    resumed run in its own folder, and the folder locked by rank 0 during the fit."""

    def __init__(
        self, cfg: DictConfig, logdir: str | Path, resume_from: Optional[str], command: str
    ):
        super().__init__(cfg, logdir, cfg.checkpoint.frequency, keep_prev=cfg.checkpoint.keep_prev)
        self.resume_from = Path(resume_from) if resume_from is not None else None
        self.command, self.lock = command, contextlib.ExitStack()

    def initial_setup(self, trainer: Any) -> None:
        if trainer.is_global_zero:  # saves killed mid-write, in any run folder, left these
            remove_stale_temporaries(self.logdir)
            remove_abandoned_runs(self.logdir)
        resumed = None if self.resume_from is None else self.resume_from.resolve().parent
        if resumed is None or resumed.parent != self.logdir.resolve():  # not a run folder of logdir
            super().initial_setup(trainer)
            # each process drew its own run name: all take rank 0's (a collective)
            self.path, self.ckpt_placeholder = trainer.strategy.broadcast(
                (self.path, self.ckpt_placeholder)
            )
        else:
            if trainer.logger is not None:
                self.wandb_run_id = str(trainer.logger.version)
            self.path = folder = self.logdir / resumed.name
            self.ckpt_placeholder = f"{self.cfg.name}-{folder.name}" + "-ep={}.ckpt"
            own = self.resume_from.name.startswith(f"{self.cfg.name}-{folder.name}-ep=")
            self.last_ckpt = folder / self.resume_from.name if own else None
        if trainer.is_global_zero:
            fix = "start a new run with auto_resume.enabled=False or another `checkpoint.dir`"
            lock = folder_lock(
                self.path / RUN_LOCK_FILE, self.command, f"the run folder {self.path}", fix
            )
            with disk_full_named(self.path / RUN_LOCK_FILE):  # the lock's holder: a first write
                self.lock.enter_context(lock)

    def save_args(self, trainer: Any) -> None:
        if trainer.is_global_zero:
            args = OmegaConf.to_container(self.cfg)
            args["wandb_run_id"] = getattr(self, "wandb_run_id", None)
            text = json.dumps(args, default=lambda _: "<not serializable>")
            with disk_full_named(self.path / ARGS_FILE):
                write_text_atomic(self.path / ARGS_FILE, text)


def remove_abandoned_runs(logdir: Path, say: Callable[[str], None] = print) -> None:
    """Remove ``logdir``'s run folders holding only ``args.json`` and/or a lock no one holds."""
    for folder in sorted(Path(logdir).glob("*/")):
        names = {p.name for p in folder.iterdir()}
        if not names or names - {ARGS_FILE, RUN_LOCK_FILE}:
            continue
        with contextlib.ExitStack() as held:
            if (folder / RUN_LOCK_FILE).exists():
                _, state = held.enter_context(lock_file(folder / RUN_LOCK_FILE, create=False))
                if state != "taken":  # its run is alive (or no file locks here)
                    continue
            shutil.rmtree(folder)
            say(f"removed {folder}: a run stopped before its first checkpoint left it")


def newest_loading(
    checkpoints: Iterable[Path], say: Callable[[str], None] = print
) -> Optional[Path]:
    """The newest of ``checkpoints`` that loads; each newer one is named (``say``) and skipped."""
    ranked = sorted(checkpoints, key=lambda p: (checkpoint_epoch(p, default=-1), p.stat().st_mtime))
    for path in reversed(ranked):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        say(f"skipping checkpoint {path}: it does not load ({problem}).")
    if ranked:
        say(f"none of the {len(ranked)} checkpoint(s) loads: the run starts over from epoch 0.")
    return None


def _matching_runs(cfg: DictConfig, logdir: Path) -> dict[Path, DictConfig]:
    """{run folder holding a checkpoint: its args.json} where AutoResumer's keys match ``cfg``."""
    from solo.utils.auto_resumer import AutoResumer
    from solo.utils.misc import omegaconf_select

    runs = {}
    for args_path in sorted(logdir.glob("**/args.json")):
        if not any(args_path.parent.glob("*.ckpt")):
            continue
        try:
            previous = OmegaConf.create(json.loads(args_path.read_text()))
        except (OSError, ValueError) as err:
            print(f"auto-resume: skipping {args_path.parent}: its args.json does not read ({err}).")
            continue
        if all(
            omegaconf_select(previous, key, None) == omegaconf_select(cfg, key, None)
            for key in AutoResumer.SHOULD_MATCH
        ):
            runs[args_path.parent] = previous
    return runs


def _comparable(value: Any) -> Any:
    if value in (None, "None"):
        return None
    return os.path.normpath(value) if isinstance(value, str) and os.sep in value else value


def auto_resume_checkpoint(
    cfg: DictConfig, logdir: str | Path
) -> tuple[Optional[Path], Optional[str]]:
    """``(checkpoint, wandb run id)`` to auto-resume from, or ``(None, None)``."""
    runs = _matching_runs(cfg, Path(logdir))
    now, max_hours = time.time(), float(cfg.auto_resume.max_hours)
    recent, old = [], []
    for folder in runs:
        for path in folder.glob("*.ckpt"):
            (recent if now - path.stat().st_mtime < max_hours * 3600 else old).append(path)
    chosen = newest_loading(recent)
    if chosen is None and old:
        newest = max(old, key=lambda p: p.stat().st_mtime)
        hours = (now - newest.stat().st_mtime) / 3600
        print(
            f"auto-resume: {newest} was written {hours:.1f} h ago, more than "
            f"auto_resume.max_hours={cfg.auto_resume.max_hours}, so this run starts over; pass ++"
            f"auto_resume.max_hours={math.ceil(hours) + 1} to resume from it."
        )
    if chosen is None:
        return None, None
    previous = runs[chosen.parent]
    for key in SAME_RUN_KEYS:
        before, given = OmegaConf.select(previous, key), OmegaConf.select(cfg, key)
        if _comparable(before) != _comparable(given):
            raise ConfigError(
                f"auto-resume found {chosen}, trained with {key}={before!r}, but this run has "
                f"{key}={given!r}: pass auto_resume.enabled=False (new run) or another "
                "checkpoint.dir."
            )
    return chosen, previous.get("wandb_run_id")


def check_checkpoint_key(key: str, ckpt: str, allow_pickle: bool = False) -> None:
    """Refuse a checkpoint that is missing or does not load, in one line naming the ``key``."""
    try:
        check_checkpoint_file(Path(ckpt))
        problem = checkpoint_problem(ckpt, allow_pickle=allow_pickle)
        if problem is not None:
            raise CorruptCheckpoint(ckpt, problem)
    except ConfigError as err:
        raise ConfigError(f"`{key}`: {err}") from None


def resume_checkpoint(cfg: DictConfig, logdir: str) -> tuple[Optional[str], Optional[str]]:
    """``(ckpt_path, wandb_run_id)`` from ``resume_from_checkpoint`` or auto-resume."""
    if cfg.resume_from_checkpoint is not None:
        ckpt = str(cfg.resume_from_checkpoint)
        del cfg.resume_from_checkpoint
        check_checkpoint_key("resume_from_checkpoint", ckpt, pickle_allowed(cfg))
        return ckpt, None
    if cfg.auto_resume.enabled:
        found, run_id = auto_resume_checkpoint(cfg, logdir)
        if found is not None:
            print(f"Resuming from previous checkpoint that matches specifications: '{found}'")
            return str(found), run_id
    return None, None


class OneProcessAwareDDP(DDPStrategy):
    """``strategy: ddp`` whose ``reduce`` over one process is the identity (docs/data-path.md)."""

    def reduce(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if self.world_size == 1 and isinstance(tensor, torch.Tensor):
            return tensor
        return super().reduce(tensor, *args, **kwargs)


def _save_backbone(path: Path, backbone: torch.nn.Module, args: dict[str, Any]) -> Path:
    state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
    AtomicCheckpointIO().save_checkpoint({"state_dict": state}, path)
    write_text_atomic(path.parent / "args.json", json.dumps(args, default=str))
    return path


def save_random_init(cfg: DictConfig, path: Path) -> Path:
    """The backbone of pretraining cfg ``cfg``, initialised with its seed and never trained."""
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
    return _save_backbone(path, backbone, args)


def save_raw_pixels(path: Path, image_shape: tuple[int, int, int], dataset: str) -> Path:
    """The ``raw_pixels`` backbone for images of ``image_shape`` = (channels, size, size)."""
    from solo_diet.core.backbones import RawPixels

    channels, size, _ = image_shape  # square: every probe's eval transform ends in a square crop
    backbone = RawPixels(size=size, channels=channels)
    args = {
        "method": "raw_pixels",
        "backbone": {"name": "raw_pixels", "kwargs": {"size": size, "channels": channels}},
        "data": {"dataset": dataset},
    }
    return _save_backbone(path, backbone, args)
