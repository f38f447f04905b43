"""Pieces our launchers share: composition, checks, devices, Trainer, callbacks, resume."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import yaml
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import check_run_name, closest_name, core_errors_named, device_count
from solo_diet.launch.errors import Interrupted
from solo_diet.launch.launch_checks import (
    TrainingSettings,
    check_cfg_before_parse,
    check_key_typos,
    known_top_level_keys,
    trainer_arguments,
)
from solo_diet.launch.nodes import check_nodes

if TYPE_CHECKING:
    import torch


def compose_cfg(config_path: str, config_name: str, overrides: Sequence[str]) -> DictConfig:
    """Compose a Hydra config; ``config_path`` is relative to the current directory."""
    from hydra import compose, initialize_config_dir

    config_dir = Path(config_path).expanduser().resolve()
    if not config_dir.is_dir():
        raise FileNotFoundError(
            f"--config-path {config_path!r} is not a directory (resolved to {config_dir})."
        )
    name = config_name[:-5] if config_name.endswith(".yaml") else config_name
    if not (config_dir / f"{name}.yaml").is_file():
        there = sorted(p.stem for p in config_dir.glob("*.yaml"))
        close = closest_name(name, there)
        hint = f" Did you mean {close!r}?" if close else ""
        raise FileNotFoundError(  # the folder as typed: a link into the package stays one
            f"--config-name {config_name!r}: no {name}.yaml in {config_path}; it holds "
            f"{there}.{hint}"
        )
    primary = yaml.safe_load((config_dir / f"{name}.yaml").read_text())
    if not isinstance(primary, (dict, type(None))):
        raise ConfigError(
            f"--config-name {config_name!r}: {config_dir / name}.yaml is not a YAML mapping of "
            "keys (`method: ...`, `backbone: ...`): pass a solo-learn-style config."
        )
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.2"):
        try:
            cfg = compose(config_name=name, overrides=[quote_equals(o) for o in overrides])
        except ConfigCompositionException as err:
            unknown = re.match(r"Could not override '([^']+)'", str(err))
            if unknown is None:
                raise
            raise ConfigError(_unknown_override(compose(config_name=name), unknown[1])) from None
        if any(o.startswith("+") for o in overrides):  # the keys they add, against the YAML's
            check_key_typos(cfg, functools.cache(lambda: compose(config_name=name)))
    OmegaConf.set_struct(cfg, False)
    return cfg


def _unknown_override(base: DictConfig, key: str) -> str:
    """One line for an override of a key the YAML lacks, naming the closest it has."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(base, parent) if parent else base
    known = sorted(node) if isinstance(node, DictConfig) else []
    if not parent:
        top_level = known_top_level_keys()
        if leaf in top_level:
            missing = "is not in the YAML, though solo-learn or Lightning reads it"
            return f"`{key}` {missing}: write `+{key}=...` to add it."
        known = sorted({*known, *top_level})
    close = closest_name(leaf, known)
    where = f"`{parent}`" if parent else "the config"
    hint = f"; did you mean `{parent + '.' if parent else ''}{close}`?" if close else "."
    return (
        f"`{key}` is not a key of {where}{hint} `+{key}=...` would add it as a new key (for a "
        "setting solo-learn reads that the YAML leaves out)."
    )


def quote_equals(override: str) -> str:
    """Quote an override value holding ``=`` (``k=a-ep=9.ckpt`` -> ``k='a-ep=9.ckpt'``)."""
    key, sep, value = override.partition("=")
    if not sep or "=" not in value or "'" in value or value.startswith(('"', "[", "{")):
        return override
    return f"{key}='{value}'"


def check_launch_cfg(cfg: DictConfig) -> TrainingSettings:
    """Run name, devices, nodes, then :func:`check_cfg_before_parse`; returns its settings."""
    OmegaConf.set_struct(cfg, False)
    fix = "Pass e.g. name=my-run; `checkpoint.dir` says where the run's folder goes."
    check_run_name(OmegaConf.select(cfg, "name"), "`name`", fix)
    normalize_devices(cfg)
    return check_cfg_before_parse(cfg)


def normalize_devices(cfg: DictConfig) -> None:
    """``devices: 2`` becomes ``[0, 1]``, ``strategy: null`` ``auto``; the nodes are checked."""
    count = device_count(cfg)
    if not isinstance(cfg.get("devices"), (list, ListConfig)):
        cfg.devices = list(range(count))
    if OmegaConf.select(cfg, "strategy") in (None, "None"):
        cfg.strategy = "auto"
    check_nodes(cfg)


def trainer_kwargs(cfg: DictConfig, callbacks: list, logger: Any) -> dict:
    """The cfg's ``Trainer`` arguments with logger, callbacks, strategy and checkpoint IO."""
    from solo_diet.launch.checkpointing import AtomicCheckpointIO, OneProcessAwareDDP
    from solo_diet.methods.checkpoint import pickle_allowed

    valid = trainer_arguments()
    kwargs = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items() if k in valid}
    if kwargs.get("accelerator") == "cpu":
        kwargs["devices"] = len(cfg.devices)
    plugins = kwargs.get("plugins") or []
    plugins = plugins if isinstance(plugins, list) else [plugins]
    ddp = cfg.strategy == "ddp"
    kwargs.update(
        logger=logger if logger is not None else False,
        callbacks=callbacks,
        plugins=[*plugins, AtomicCheckpointIO(pickle_allowed(cfg))],
        enable_checkpointing=False,
        strategy=OneProcessAwareDDP(find_unused_parameters=False) if ddp else cfg.strategy,
    )
    return kwargs


def already_finished(ckpt_path: Optional[str | Path], training: TrainingSettings) -> bool:
    """Whether the checkpoint to resume from holds the last epoch (no ``max_steps``) and loads."""
    from solo_diet.launch.checkpointing import checkpoint_epoch
    from solo_diet.methods.checkpoint import checkpoint_problem

    epoch = checkpoint_epoch(ckpt_path)
    return (
        epoch is not None
        and training.max_steps in (-1, None)
        and training.max_epochs is not None
        and epoch >= training.max_epochs - 1
        and checkpoint_problem(ckpt_path) is None
    )


def resume_hint(cfg: DictConfig, checkpointer: Any) -> str:
    """Where an interrupted run resumes from."""
    if checkpointer is None:
        return (
            "checkpointing is off for this step, so the same command runs it again from the start."
        )
    last = getattr(checkpointer, "last_ckpt", None)
    if last is not None and not Path(last).is_file():
        # stopped between the Checkpointer's removal of the previous one and its record
        from solo_diet.launch.checkpointing import newest_loading

        folder = Path(getattr(checkpointer, "path", Path(last).parent))
        last = newest_loading(folder.glob("*.ckpt"), say=lambda _: None)
    if last is None:
        return "no epoch had finished, so no checkpoint was written: run the same command again."
    if OmegaConf.select(cfg, "auto_resume.enabled", default=False):
        return f"run the same command again to resume from {last}."
    return f"resume with the same command plus resume_from_checkpoint='{last}'."


def _drop_empty_run_folder(checkpointer: Any) -> None:
    """Remove the run folder a failed fit made before writing any checkpoint (args.json only)."""
    folder = getattr(checkpointer, "path", None)
    if folder is None or not Path(folder).is_dir() or any(Path(folder).glob("*.ckpt")):
        return
    shutil.rmtree(folder)
    if not any(Path(folder).parent.iterdir()):
        Path(folder).parent.rmdir()


def fit_or_raise(
    trainer: Any, model: Any, cfg: DictConfig, checkpointer: Any, data_path: Any, **fit_kwargs: Any
) -> None:
    """``trainer.fit``: an interruption raises ``Interrupted`` saying where to resume, core errors
    name their keys, no empty run folder stays, ``data_path`` and the lock are always released."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from solo_diet.launch.settings import GPU_ARGUMENT_KEYS
    from solo_diet.methods.index_method import INDEX_ARGUMENT_KEYS

    try:
        with core_errors_named(GPU_ARGUMENT_KEYS | INDEX_ARGUMENT_KEYS):
            trainer.fit(model, **fit_kwargs)
        stopped = trainer.interrupted and (
            signal.SIGTERM if trainer.received_sigterm else signal.SIGINT
        )
    except SIGTERMException:  # Lightning's own graceful SIGTERM stop: a SystemExit with status 0
        stopped = signal.SIGTERM
    except BaseException:
        _drop_empty_run_folder(checkpointer)
        raise
    finally:
        data_path.close()
        if checkpointer is not None:
            checkpointer.lock.close()
    if stopped:
        _drop_empty_run_folder(checkpointer)
        raise Interrupted(stopped, resume_hint(cfg, checkpointer)) from None


def as_trained(model: torch.nn.Module, channels_last: bool) -> torch.nn.Module:
    """``model`` made contiguous and, where ``channels_last``, channels-last."""
    import torch
    from solo.utils.misc import make_contiguous

    make_contiguous(model)
    return model.to(memory_format=torch.channels_last) if channels_last else model


def logger_and_callbacks(
    cfg: DictConfig,
    model: torch.nn.Module,
    logdir: str,
    wandb_run_id: Optional[str],
    resume_from: Optional[str] = None,
    command: str = "pretrain",
):
    """The run's divergence guard, progress bar, checkpointer and wandb logger."""
    from lightning.pytorch.callbacks import LearningRateMonitor

    from solo_diet.launch.callbacks import DivergenceGuard, FinalEpochCheckpoint, TimedProgressBar
    from solo_diet.launch.checkpointing import RunCheckpointer

    callbacks: list = [DivergenceGuard()]
    if OmegaConf.select(cfg, "enable_progress_bar", default=True) is not False:
        callbacks.append(TimedProgressBar())
    checkpointer = None
    if cfg.checkpoint.enabled:
        checkpointer = RunCheckpointer(cfg, logdir, resume_from, command)
        callbacks += [checkpointer, FinalEpochCheckpoint(checkpointer)]
    logger = None
    if cfg.wandb.enabled:
        from lightning.pytorch.loggers.wandb import WandbLogger

        try:
            from wandb.errors import UsageError
        except ImportError:  # solo-learn installed without its requirements
            raise ConfigError(
                "`wandb.enabled: True`, but wandb is not installed: `pip install wandb`, or turn "
                "wandb off with wandb.enabled=False."
            ) from None

        where = {key: cfg.wandb[key] for key in ("project", "entity", "offline")}
        resume = "allow" if wandb_run_id else None
        logger = WandbLogger(name=cfg.name, resume=resume, id=wandb_run_id, **where)
        try:  # a run wandb refuses (no API key, say) is one ConfigError
            logger.log_hyperparams(OmegaConf.to_container(cfg))
            if OmegaConf.select(cfg, "wandb.watch_gradients", default=False):
                logger.watch(model, log="gradients", log_freq=100)
        except UsageError as err:
            raise ConfigError(
                f"`wandb.enabled: True`, but wandb did not start a run ({str(err).strip()}): log "
                "in with `wandb login` (or set WANDB_API_KEY), log offline with wandb.offline=True"
                ", or turn wandb off with wandb.enabled=False."
            ) from None
        callbacks.append(LearningRateMonitor(logging_interval="step"))
    return logger, callbacks, checkpointer


def fit_run(
    cfg: DictConfig,
    model: torch.nn.Module,
    data_path: Any,
    fit: dict[str, Any],
    command: str,
    training: Optional[TrainingSettings] = None,
    callbacks: Sequence = (),
    **trainer_args: Any,
) -> tuple[dict[str, float], Optional[str]]:
    """Resume and :func:`fit_or_raise` unless already finished: the metrics and last checkpoint."""
    from lightning.pytorch import Trainer

    from solo_diet.launch.checkpointing import resume_checkpoint

    logdir = os.path.join(cfg.checkpoint.dir, cfg.method if command == "pretrain" else command)
    ckpt_path, wandb_run_id = resume_checkpoint(cfg, logdir)
    if training is not None and already_finished(ckpt_path, training):
        epochs = training.max_epochs
        print(f"nothing to train: {ckpt_path} already holds the last of max_epochs={epochs}.")
        return {}, str(ckpt_path)
    logger, own, checkpointer = logger_and_callbacks(
        cfg, model, logdir, wandb_run_id, ckpt_path, command
    )
    trainer = Trainer(**trainer_kwargs(cfg, own + list(callbacks), logger) | trainer_args)
    fit_or_raise(trainer, model, cfg, checkpointer, data_path, ckpt_path=ckpt_path, **fit)
    last = getattr(checkpointer, "last_ckpt", None)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    return metrics, None if last is None else str(last)
