"""``solo-diet pretrain``: solo-learn pretraining of every registered method (docs/launchers.md)."""

from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from solo_diet.core.data.pipeline.nodes import AugmentationNode
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import core_errors_named, unknown_method_hint
from solo_diet.launch.common import as_trained, check_launch_cfg, fit_run
from solo_diet.launch.datapaths import DataPath, make_data_path, parse_data_settings
from solo_diet.launch.launch_checks import (
    TrainingSettings,
    check_accelerator_present,
    check_solo_learn_choices,
    check_strategy_name,
)
from solo_diet.launch.settings import (
    GPU_ARGUMENT_KEYS,
    PRETRAIN_PROBE_NODE,
    LoaderSettings,
    PerformanceSettings,
    parse_loader_settings,
    parse_performance_settings,
)
from solo_diet.launch.step_graph import StepGraph, choose_step_graph
from solo_diet.methods.contract import Contract, method_contract
from solo_diet.methods.substitutes import substitute_step_parts, substitutes_line


def set_num_samples(cfg: DictConfig, contract: Contract, num_samples: int) -> None:
    """Write N into ``cfg.method_kwargs.num_samples`` (for args.json); refuse a wrong value."""
    if not contract.uses_sample_indexes:
        return
    given = OmegaConf.select(cfg, "method_kwargs.num_samples")
    if given not in (None, "None", num_samples):
        raise ConfigError(
            f"method_kwargs.num_samples={given} but the training set has {num_samples} samples "
            "(after data.fraction). Remove the key: the launcher sets it."
        )
    OmegaConf.update(cfg, "method_kwargs.num_samples", num_samples, force_add=True)


def prepare_run(
    cfg: DictConfig,
) -> tuple[
    DictConfig, type, Contract, DataPath, LoaderSettings, TrainingSettings, PerformanceSettings
]:
    """The checks, ``parse_cfg``, the method, data path and settings, before any data."""
    from solo.args.pretrain import parse_cfg
    from solo.methods import METHODS

    training = check_launch_cfg(cfg)
    performance = parse_performance_settings(cfg)
    data_path = make_data_path(parse_data_settings(cfg))
    # solo-learn's transforms ignore unknown keys and take any value (a probability of 2, no crop)
    with core_errors_named(GPU_ARGUMENT_KEYS):
        for index, node in enumerate(cfg.augmentations):
            AugmentationNode.from_config(node, cfg.data.dataset, name=f"nodes[{index}]")
    cfg = parse_cfg(cfg)
    if cfg.method not in METHODS:
        hint = unknown_method_hint(cfg.method, METHODS)
        raise ConfigError(f"unknown `method: {cfg.method}`; {hint}")
    method_cls = METHODS[cfg.method]
    check_solo_learn_choices(cfg, method_cls)
    contract = method_contract(method_cls)
    data_path.check(cfg.method, contract)
    loader_settings = parse_loader_settings(cfg, data_path.settings, PRETRAIN_PROBE_NODE)
    loader_settings.check_classes(2, "the online linear probe")
    return cfg, method_cls, contract, data_path, loader_settings, training, performance


def build_model(
    cfg: DictConfig, method_cls: type, performance: PerformanceSettings
) -> torch.nn.Module:
    """The method as trained: substitutes, channels-last, its step graphed where allowed."""
    model = method_cls(cfg)
    made = substitute_step_parts(model) if performance.foreach_substitutes else []
    if made:
        print(substitutes_line(made), flush=True)
    model = as_trained(model, channels_last=not performance.disable_channel_last)
    graphed, line = choose_step_graph(cfg, model, performance.step_graph)
    print(line, flush=True)
    if graphed:
        StepGraph(model)
    return model


def run_pretrain(cfg: DictConfig, extra_callbacks: Sequence = ()) -> Optional[str]:
    """Pretrain ``cfg.method``; returns the last checkpoint path (or None)."""
    from lightning.pytorch import seed_everything

    check_accelerator_present(cfg)
    check_strategy_name(cfg)
    cfg, method_cls, contract, data_path, loader_settings, training, performance = prepare_run(cfg)
    seed_everything(cfg.seed)

    # the method's batch order reads its own keys: its hook gets the config solo-learn's model gets
    batch_sampler = functools.partial(contract.train_batch_sampler, cfg)
    train_data = data_path.pretrain_data(loader_settings, batch_sampler)
    set_num_samples(cfg, contract, train_data.num_samples)
    val_loader = data_path.val_loader(loader_settings)

    model = build_model(cfg, method_cls, performance)
    # the method's batch sampler splits the ranks itself
    sampler = {"use_distributed_sampler": False} if train_data.own_sampler else {}
    fit = data_path.fit_kwargs(train_data, val_loader)
    return fit_run(cfg, model, data_path, fit, "pretrain", training, extra_callbacks, **sampler)[1]
