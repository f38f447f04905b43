"""What our launchers refuse before solo-learn or Lightning would fail or ignore a typo."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import logging
import math
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import KeyReader, closest_name, is_number, parse_section, setting
from solo_diet.launch.errors import check_data_paths, check_destination

# the schedulers BaseMethod builds ("reduce" and "exponential": only LinearModel's)
PRETRAIN_SCHEDULERS = ("none", "step", "warmup_cosine")
# what solo-learn passes to the optimizer itself, next to ``optimizer.kwargs``
SOLO_LEARN_OPTIMIZER_ARGUMENTS = ("lr", "weight_decay")


def check_solo_learn_choices(cfg: DictConfig, model_cls: type) -> None:
    """Refuse names and ``kwargs`` keys solo-learn's ``model_cls`` does not take."""
    from solo.methods.base import BaseMethod
    from solo.methods.linear import LinearModel

    probe = issubclass(model_cls, LinearModel)
    choices = {
        "backbone.name": BaseMethod._BACKBONES,
        "optimizer.name": model_cls._OPTIMIZERS,
        "scheduler.name": model_cls._SCHEDULERS if probe else PRETRAIN_SCHEDULERS,
    }
    for key, known in choices.items():
        value = OmegaConf.select(cfg, key)
        any_case_none = key == "scheduler.name" and not probe and str(value).lower() == "none"
        if value is not None and not any_case_none:
            KeyReader(cfg).choice(key, sorted(known))
    name = OmegaConf.select(cfg, "optimizer.name")
    if name is not None:
        _check_optimizer_kwargs(cfg, name, model_cls._OPTIMIZERS[name])
    if OmegaConf.select(cfg, "backbone.name") is not None:
        _check_backbone_kwargs(cfg, BaseMethod._BACKBONES[cfg.backbone.name])


def _meta_build(build: Callable[..., Any], method: Any, kwargs: dict) -> Any:
    """The backbone built on the meta device, without its warnings and log lines."""
    import torch

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return build(method, **kwargs)
    finally:
        logging.disable(previous)


def _check_backbone_kwargs(cfg: DictConfig, build: Callable[..., Any]) -> None:
    """Refuse a ``backbone.kwargs`` key the backbone does not take (meta-device builds)."""
    kwargs = OmegaConf.to_container(OmegaConf.select(cfg, "backbone.kwargs") or OmegaConf.create())
    if not kwargs:
        return
    method = OmegaConf.select(cfg, "method") or OmegaConf.select(cfg, "pretrain_method")
    try:
        _meta_build(build, method, kwargs)
        return
    except TypeError as error:
        refused = error
    except Exception:  # noqa: BLE001 - not a keyword problem: the real build reports it
        return
    for key in kwargs:
        try:
            built = type(_meta_build(build, method, {k: v for k, v in kwargs.items() if k != key}))
        except Exception:  # noqa: BLE001 - not this key alone
            continue
        owner = f"the `{cfg.backbone.name}` backbone ({built.__module__}.{built.__qualname__})"
        parameters = inspect.signature(built.__init__).parameters.values()
        known = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        KeyReader(cfg).known("backbone.kwargs", known | (set(kwargs) - {key}), owner)
        raise KeyReader(cfg).fail(
            f"backbone.kwargs.{key}",
            f"is not a setting of {owner} ({refused}): remove it or correct its name.",
        ) from None


def _check_optimizer_kwargs(cfg: DictConfig, name: str, optimizer: type) -> None:
    """Refuse an ``optimizer.kwargs`` key the optimizer does not take or solo-learn passes."""
    given = OmegaConf.select(cfg, "optimizer.kwargs") or OmegaConf.create()
    for key in SOLO_LEARN_OPTIMIZER_ARGUMENTS:
        if key in given:
            raise KeyReader(cfg).fail(
                f"optimizer.kwargs.{key}",
                f": solo-learn passes the optimizer `optimizer.{key}` itself; set that instead.",
            )
    parameters = inspect.signature(optimizer).parameters
    owner = f"the `{name}` optimizer ({optimizer.__module__}.{optimizer.__qualname__})"
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        known = set(parameters) - {"params", *SOLO_LEARN_OPTIMIZER_ARGUMENTS}
        KeyReader(cfg).known("optimizer.kwargs", known, owner)
    import torch

    try:  # its own checks of the values (``betas`` in [0, 1), say), on one dummy parameter
        optimizer([torch.nn.Parameter(torch.zeros(1))], lr=1e-3, **OmegaConf.to_container(given))
    except (ValueError, TypeError) as err:
        raise KeyReader(cfg).fail("optimizer.kwargs", f"is refused by {owner}: {err}.") from None


# the precisions Lightning's Trainer takes (its ``_PRECISION_INPUT``), as written in a config
PRECISIONS = (
    *("16-mixed", "bf16-mixed", "32-true", "64-true", "16-true", "bf16-true"),
    *("transformer-engine", "transformer-engine-float16", "64", "32", "16", "bf16"),
)


# solo-learn's on/off keys: it reads each by its truth, so a quoted 'False' would switch it on
SWITCHES = (
    *("auto_augment", "auto_resume.enabled", "auto_umap.enabled", "checkpoint.enabled"),
    *("checkpoint.keep_prev", "dali.encode_indexes_into_labels", "data.no_labels"),
    *("debug_augmentations", "knn_eval.enabled", "momentum.classifier"),
    *("optimizer.exclude_bias_n_norm_wd", "performance.disable_channel_last", "wandb.enabled"),
    "wandb.offline",
)


@dataclass(frozen=True)
class TrainingSettings:
    """The training keys checked before ``parse_cfg`` (None: solo-learn's default)."""

    batch_size: Optional[int] = setting(None, minimum=1, key="optimizer.batch_size")
    max_epochs: Optional[int] = setting(None, minimum=1, key="max_epochs")
    max_steps: Optional[int] = setting(None, minimum=-1, key="max_steps", hint="-1: no limit.")
    lr: Optional[float] = setting(None, key="optimizer.lr")
    classifier_lr: Optional[float] = setting(None, key="optimizer.classifier_lr")
    warmup_epochs: Optional[float] = setting(
        None, within=(0.0, math.inf), key="scheduler.warmup_epochs"
    )
    min_lr: Optional[float] = setting(None, within=(0.0, math.inf), key="scheduler.min_lr")
    warmup_start_lr: Optional[float] = setting(
        None, within=(0.0, math.inf), key="scheduler.warmup_start_lr"
    )
    weight_decay: Optional[float] = setting(
        None, within=(0.0, math.inf), key="optimizer.weight_decay"
    )
    checkpoint_frequency: Optional[int] = setting(
        None, minimum=1, key="checkpoint.frequency", hint="It is the epochs between checkpoints."
    )
    check_val_every_n_epoch: Optional[int] = setting(
        None, minimum=1, key="check_val_every_n_epoch", hint="It is the epochs between validations."
    )
    accumulate_grad_batches: Optional[int] = setting(
        None, minimum=1, key="accumulate_grad_batches", hint="It is the batches per optimizer step."
    )
    # the linear probe's loss (timm's), and whether it trains the backbone too
    label_smoothing: Optional[float] = setting(None, within=(0.0, 1.0), key="label_smoothing")
    mixup: Optional[float] = setting(None, within=(0.0, math.inf), key="mixup")
    cutmix: Optional[float] = setting(None, within=(0.0, math.inf), key="cutmix")
    finetune: Optional[bool] = setting(None, key="finetune")
    precision: Any = setting(None, key="precision")
    # Lightning skips clipping at a value <= 0: a negative one would ask for clipping and get none
    gradient_clip_val: Optional[float] = setting(
        None, within=(0.0, math.inf), key="gradient_clip_val"
    )

    def checked(self, cfg: DictConfig) -> "TrainingSettings":
        """Finite learning rates > 0, batch limits that train something, True or False in each of
        :data:`SWITCHES`, a known precision."""
        read = KeyReader(cfg)
        for key, lr in (("optimizer.lr", self.lr), ("optimizer.classifier_lr", self.classifier_lr)):
            if lr is not None and not 0 < lr < math.inf:  # a number (the schema); not NaN either
                raise read.fail(key, f"must be a positive finite number, got {lr!r}.")
        for key in ("limit_train_batches", "limit_val_batches"):
            limit = read.value(key)
            if limit is not None and not (
                is_number(limit) and 0 <= limit and (isinstance(limit, int) or limit <= 1)
            ):
                wanted = "a batch count (an integer >= 0) or a fraction in [0, 1]"
                raise read.fail(key, f"must be {wanted}, got {limit!r}.")
        for key, value, give in (
            (
                "limit_train_batches",
                read.value("limit_train_batches"),
                "a batch count >= 1 or a fraction in (0, 1]",
            ),
            ("max_steps", self.max_steps, "-1 (no limit) or a step count >= 1"),
        ):
            if value == 0:
                nothing = "so nothing would train and no checkpoint would be written: remove it"
                raise read.fail(key, f"is 0, {nothing}, or give {give}.")
        steps = read.value("scheduler.lr_decay_steps")
        whole = isinstance(steps, Sequence) and not isinstance(steps, str) and len(steps) > 0
        if read.value("scheduler.name") == "step" and not (
            whole and all(isinstance(e, int) and not isinstance(e, bool) and e > 0 for e in steps)
        ):
            raise read.fail(
                "scheduler.lr_decay_steps",
                f"must list the epochs at which `scheduler.name: step` divides the lr by 10, got "
                f"{steps!r}: write e.g. scheduler.lr_decay_steps=[60,80] (without them the lr "
                "would stay constant).",
            )
        for key in SWITCHES:
            read.bool(key, default=False)
        if self.precision is not None:  # Lightning takes 32 and "32" alike
            KeyReader({"precision": str(self.precision)}).choice("precision", PRECISIONS)
        return self


# The top-level sections solo-learn reads (its parse_cfg, main scripts and shipped YAMLs)
SOLO_LEARN_SECTIONS = (
    *("accumulate_grad_batches", "augmentations", "augmentations_cfg", "auto_augment"),
    *("auto_resume", "auto_umap", "backbone", "checkpoint", "cutmix", "dali", "data"),
    *("debug_augmentations", "finetune", "knn_eval", "label_smoothing", "method", "method_kwargs"),
    *("mixup", "momentum", "name", "optimizer", "performance", "pretrain_method"),
    *("pretrained_feature_extractor", "resume_from_checkpoint", "scheduler", "seed", "wandb"),
    "wandb_cfg",
)
# the top-level keys our launchers read besides solo-learn's (docs/launchers.md)
OWN_TOP_LEVEL_KEYS = ("allow_pickle_checkpoint", "probe", "sem_tau")


@lru_cache(maxsize=None)
def trainer_arguments() -> tuple[str, ...]:
    """``Trainer.__init__``'s parameters, read from Lightning's source (importing it takes 5 s)."""
    spec = importlib.util.find_spec("lightning")
    source = Path(spec.origin).parent / "pytorch" / "trainer" / "trainer.py"
    tree = ast.parse(source.read_text())
    trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    init = next(n for n in trainer.body if getattr(n, "name", "") == "__init__")
    return tuple(a.arg for a in (*init.args.posonlyargs, *init.args.args, *init.args.kwonlyargs))


def known_top_level_keys() -> list[str]:
    """The top-level keys solo-learn, Lightning's ``Trainer`` or our launchers read."""
    return sorted({*trainer_arguments(), *SOLO_LEARN_SECTIONS, *OWN_TOP_LEVEL_KEYS})


# the keys solo-learn (its methods, args and main scripts) and our launchers read in its sections
SECTION_KEYS = {
    "auto_resume": ("enabled", "max_hours"),
    "auto_umap": ("dir", "enabled", "frequency"),
    "checkpoint": ("dir", "enabled", "frequency", "keep_prev"),
    "dali": ("device", "encode_indexes_into_labels"),
    "data": (
        *("augmentations", "dataset", "format", "fraction", "gpu", "no_labels", "num_classes"),
        *("num_large_crops", "num_small_crops", "num_workers", "train_path", "val_path"),
    ),
    "knn_eval": ("distance_func", "enabled", "k"),
    "optimizer": (
        *("batch_size", "classifier_lr", "exclude_bias_n_norm_wd", "kwargs", "layer_decay", "lr"),
        *("name", "weight_decay"),
    ),
    "performance": ("disable_channel_last", "foreach_substitutes", "step_graph"),
    "scheduler": (
        *("interval", "lr_decay_steps", "min_lr", "name", "warmup_epochs", "warmup_start_lr"),
    ),
    "wandb": ("enabled", "entity", "offline", "project", "watch_gradients"),
}


def check_key_typos(cfg: DictConfig, yaml: Optional[Callable[[], DictConfig]] = None) -> None:
    """Refuse a typo of a known key, or a key nothing reads that ``+`` added to ``yaml``."""
    absent = object()
    places: list[tuple[str, Sequence[str], Any]] = [("", known_top_level_keys(), cfg)]
    places += [(f"{name}.", keys, cfg.get(name)) for name, keys in SECTION_KEYS.items()]
    for prefix, known, section in places:
        for key in section if isinstance(section, DictConfig) else ():
            if key in known:
                continue
            close, fail = closest_name(key, known, cutoff=0.85), KeyReader(cfg).fail
            if close:
                ignored = "is not a key solo-learn or Lightning reads, so it would be ignored"
                raise fail(f"{prefix}{key}", f"{ignored}; did you mean `{prefix}{close}`?")
            if (
                yaml is not None
                and OmegaConf.select(yaml(), prefix + key, default=absent) is absent
            ):
                close = closest_name(key, known)
                hint = f"; did you mean `{prefix}{close}`?" if close else "."
                raise fail(
                    f"{prefix}{key}",
                    "is not a key solo-learn, Lightning or solo-diet reads, so `+`/`++` would add "
                    f"a key nothing reads: remove it or correct its name{hint}",
                )


def check_accelerator_present(cfg: DictConfig) -> None:
    """Refuse an accelerator other than auto, cpu or a CUDA GPU, and a GPU torch does not see."""
    import torch

    accelerator = str(OmegaConf.select(cfg, "accelerator", default="auto")).lower()
    if accelerator not in ("auto", "cpu", "gpu", "cuda"):
        raise KeyReader(cfg).fail(
            "accelerator",
            f"must be auto, cpu or gpu (solo-diet's launchers run on CPUs and CUDA GPUs), got "
            f"{accelerator!r}.",
        )
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"`accelerator: {accelerator}`, but torch sees no CUDA device: use accelerator=cpu "
            "and precision=32 here (in a compare spec: 'trainer=[accelerator=cpu,precision=32]')."
        )


def check_strategy_name(cfg: DictConfig) -> None:
    """Refuse a ``strategy`` Lightning does not register (its ValueError came mid-launch)."""
    strategy = OmegaConf.select(cfg, "strategy", default="auto")
    name = strategy.lower() if isinstance(strategy, str) else strategy
    if name == "auto":
        return
    from lightning.pytorch.strategies import StrategyRegistry

    known = StrategyRegistry.available_strategies()
    if name not in known:
        close = closest_name(name, known)
        hint = f"; did you mean {close!r}?" if close else "."
        raise KeyReader(cfg).fail(
            "strategy",
            "must be auto or a strategy Lightning registers (ddp, ddp_spawn, fsdp, deepspeed, "
            f"... {len(known)} in all), got {strategy!r}{hint}",
        )


FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max, without importing torch


def check_finite_numbers(cfg: DictConfig) -> None:
    """Refuse a NaN, an infinity or a number past float32's range anywhere in ``cfg``."""
    pending: list[tuple[str, Any]] = [("", OmegaConf.to_container(cfg, resolve=False))]
    while pending:
        key, node = pending.pop()
        if isinstance(node, float) and not abs(node) <= FLOAT32_MAX:
            raise KeyReader(cfg).fail(
                key, f"is {node}: every number of a run must be finite (within ±{FLOAT32_MAX:.3g})."
            )
        if isinstance(node, dict):
            pending += [(f"{key}.{k}".lstrip("."), v) for k, v in node.items()]
        elif isinstance(node, list):
            pending += [(f"{key}[{i}]", v) for i, v in enumerate(node)]


def check_cfg_before_parse(cfg: DictConfig) -> TrainingSettings:
    """Every launch's checks before ``parse_cfg``; returns the :class:`TrainingSettings`."""
    check_key_typos(cfg)
    check_finite_numbers(cfg)
    training = parse_section(TrainingSettings, cfg, "", "the launcher", strict=False).checked(cfg)
    check_data_paths(cfg)
    folder = OmegaConf.select(cfg, "checkpoint.dir")
    if OmegaConf.select(cfg, "checkpoint.enabled") is not False and folder not in (None, "None"):
        check_destination(folder, "`checkpoint.dir`")
    return training
