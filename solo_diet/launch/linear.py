"""``solo-diet linear``: offline linear evaluation with solo-learn's ``LinearModel``."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from torch import nn

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import KeyReader
from solo_diet.launch.callbacks import non_finite_tensors
from solo_diet.launch.checkpointing import check_checkpoint_key
from solo_diet.launch.common import as_trained, check_launch_cfg, fit_run
from solo_diet.launch.datapaths import make_data_path, parse_data_settings
from solo_diet.launch.launch_checks import (
    check_accelerator_present,
    check_solo_learn_choices,
    check_strategy_name,
)
from solo_diet.launch.settings import parse_loader_settings
from solo_diet.methods.checkpoint import (
    PretrainedCheckpoint,
    build_backbone,
    load_backbone_weights,
    pickle_allowed,
    read_pretrain_args,
)


def fill_from_pretrain_args(cfg: DictConfig) -> None:
    """Take ``backbone`` and ``pretrain_method`` from args.json when the cfg leaves them out."""
    ckpt = OmegaConf.select(cfg, "pretrained_feature_extractor")
    if ckpt in (None, "None"):
        raise ConfigError("`pretrained_feature_extractor` is not set: pass a pretraining .ckpt.")
    check_checkpoint_key("pretrained_feature_extractor", str(ckpt), pickle_allowed(cfg))
    if OmegaConf.select(cfg, "backbone.name") is not None:
        return
    args = read_pretrain_args(str(ckpt))
    cfg.backbone = args.backbone
    if OmegaConf.select(cfg, "pretrain_method") in (None, "None"):
        cfg.pretrain_method = args.method


def probe_features(cfg: DictConfig) -> nn.Module:
    """The probe's input: the backbone, or a twin's SEM representation (``probe: sem``)."""
    probe = KeyReader(cfg).choice("probe", ("backbone", "sem"), default="backbone")
    ckpt = cfg.pretrained_feature_extractor
    allow_pickle = pickle_allowed(cfg)
    if probe == "backbone":
        features = build_backbone(cfg)
        load_backbone_weights(features, ckpt, allow_pickle=allow_pickle)
    else:
        from solo_diet.methods.sem import sem_feature_extractor

        tau = OmegaConf.select(cfg, "sem_tau", default=None)
        if tau is not None and tau < 0:
            raise ConfigError(f"`sem_tau` must be >= 0 (0 = one-hot simplices), got {tau}.")
        checkpoint = PretrainedCheckpoint(ckpt, allow_pickle=allow_pickle)
        features = sem_feature_extractor(checkpoint, tau=tau)
    bad = non_finite_tensors(features.state_dict().items())
    if bad:
        raise ConfigError(
            f"`pretrained_feature_extractor`: {ckpt} holds NaN or infinite weights (`{bad[0]}` and "
            f"{len(bad) - 1} more): its pretraining diverged; pretrain again with a smaller "
            "`optimizer.lr`."
        )
    return features


def _loss_and_mixup(cfg: DictConfig):
    from timm.data.mixup import Mixup
    from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy

    if cfg.mixup > 0 or cfg.cutmix > 0:
        mixup = Mixup(
            mixup_alpha=cfg.mixup,
            cutmix_alpha=cfg.cutmix,
            prob=1.0,
            switch_prob=0.5,
            mode="batch",
            label_smoothing=cfg.label_smoothing,
            num_classes=cfg.data.num_classes,
        )
        return SoftTargetCrossEntropy(), mixup
    if cfg.label_smoothing > 0:
        return LabelSmoothingCrossEntropy(smoothing=cfg.label_smoothing), None
    return nn.CrossEntropyLoss(), None


def run_linear(cfg: DictConfig) -> dict[str, Any]:
    """Train and validate a linear probe; returns its final metrics (and ``fitted_batch``)."""
    from lightning.pytorch import seed_everything
    from solo.args.linear import parse_cfg
    from solo.methods.linear import LinearModel

    check_launch_cfg(cfg)
    check_accelerator_present(cfg)
    check_strategy_name(cfg)
    fill_from_pretrain_args(cfg)
    check_solo_learn_choices(cfg, LinearModel)
    data_path = make_data_path(parse_data_settings(cfg))
    cfg = parse_cfg(cfg)
    loader_settings = parse_loader_settings(cfg, data_path.settings)
    loader_settings.check_classes(5, "solo-learn's LinearModel (it reports top-5 accuracy)")
    seed_everything(cfg.seed)

    loss_func, mixup = _loss_and_mixup(cfg)
    model = LinearModel(probe_features(cfg), loss_func=loss_func, mixup_func=mixup, cfg=cfg)
    model = as_trained(model, channels_last=not cfg.performance.disable_channel_last)

    train_loader, val_loader, fitted = data_path.linear_loaders(loader_settings)
    if fitted:  # a training set smaller than one batch: the probe trains at the fitted batch
        cfg.optimizer.batch_size, cfg.optimizer.lr = fitted.batch_size, fitted.lr
    model.batch_size, model.lr = cfg.optimizer.batch_size, cfg.optimizer.lr
    fit = {"train_dataloaders": train_loader, "val_dataloaders": val_loader}
    metrics, _ = fit_run(cfg, model, data_path, fit, "linear")
    return metrics | ({"fitted_batch": fitted.report()} if fitted else {})
