"""Small helpers shared by the plugin's solo-learn adapters: config checks and index checks."""

from __future__ import annotations

import omegaconf
import torch
from solo.utils.misc import omegaconf_select
from torch import nn

from solo_diet.config import ConfigError, check_bool, check_positive_int, fill_default
from solo_diet.labels import LABEL_DEFAULTS, label_source_from_kwargs
from solo_diet.nn import mlp_projector


def fill_and_check_num_samples(cfg: omegaconf.DictConfig) -> int:
    """``method_kwargs.num_samples`` (N, one head row per training sample): must be set, by the launcher."""
    fill_default(cfg, "method_kwargs.num_samples", None)
    return check_positive_int(
        cfg,
        "method_kwargs.num_samples",
        "It is the number of training samples (after data.fraction); `solo-diet pretrain` fills it.",
    )


def fill_and_check_labels(cfg: omegaconf.DictConfig) -> None:
    """Fill the label-source keys (:data:`solo_diet.labels.LABEL_DEFAULTS`) and build the source once, so a
    bad source, an unreadable groups file or class labels on an unlabelled dataset fail at config time."""
    for key, default in LABEL_DEFAULTS.items():
        fill_default(cfg, f"method_kwargs.{key}", default)
    has_labels = not omegaconf_select(cfg, "data.no_labels", False)
    try:
        label_source_from_kwargs(cfg.method_kwargs, omegaconf_select(cfg, "data.num_classes", None), has_labels)
    except ValueError as error:
        raise ConfigError(str(error)) from error


def fill_and_check_projector(cfg: omegaconf.DictConfig, default_layers: int, min_layers: int) -> None:
    """The ReLU MLP projector keys ``proj_layers`` (0 = none), ``proj_hidden_dim``, ``proj_output_dim``
    (both default 2048) and ``proj_use_bn`` (default True)."""
    fill_default(cfg, "method_kwargs.proj_layers", default_layers)
    fill_default(cfg, "method_kwargs.proj_hidden_dim", 2048)
    fill_default(cfg, "method_kwargs.proj_output_dim", 2048)
    fill_default(cfg, "method_kwargs.proj_use_bn", True)
    layers = cfg.method_kwargs.proj_layers
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < min_layers:
        none = " (0 = no projector)" if min_layers == 0 else ""
        raise ConfigError(f"`method_kwargs.proj_layers` must be an integer >= {min_layers}{none}, got {layers!r}.")
    check_bool(cfg, "method_kwargs.proj_use_bn")
    if layers > 0:
        check_positive_int(cfg, "method_kwargs.proj_hidden_dim")
        check_positive_int(cfg, "method_kwargs.proj_output_dim")


def projector_from_cfg(features_dim: int, method_kwargs: omegaconf.DictConfig) -> tuple[nn.Module, int]:
    """``(projector, output width)`` from the keys of :func:`fill_and_check_projector`; identity for 0 layers."""
    if method_kwargs.proj_layers == 0:
        return nn.Identity(), features_dim
    projector = mlp_projector(
        features_dim,
        method_kwargs.proj_hidden_dim,
        method_kwargs.proj_output_dim,
        num_layers=method_kwargs.proj_layers,
        use_bn=method_kwargs.proj_use_bn,
    )
    return projector, method_kwargs.proj_output_dim


def check_sample_indexes(indexes: torch.Tensor, num_samples: int) -> None:
    """Refuse dataset indices outside ``[0, num_samples)`` with an error that says what to fix."""
    low, high = int(indexes.min()), int(indexes.max())
    if low < 0 or high >= num_samples:
        raise IndexError(
            f"batch has dataset index {low if low < 0 else high} outside [0, {num_samples}) = "
            f"[0, method_kwargs.num_samples). The head has one row per training sample: launch with "
            f"`solo-diet pretrain` (it sets num_samples from the real dataset), or set "
            f"method_kwargs.num_samples to len(train_dataset) after data.fraction. With DALI, set "
            f"dali.encode_indexes_into_labels=True."
        )


def online_probe_loss(targets: torch.Tensor, class_loss: torch.Tensor) -> torch.Tensor:
    """solo-learn's online-probe loss, or 0 when no sample of the batch is labelled (it is NaN then).

    Chosen on the device, without a host sync; the NaN branch gets a zero gradient, and cross-entropy's
    backward writes nothing for ignored (-1) targets, so no NaN reaches the classifier."""
    return torch.where((targets != -1).any(), class_loss, class_loss.new_zeros(()))
