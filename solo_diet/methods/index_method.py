"""The base of the index-based methods: label source, optional projector, kwargs and contract."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Dict, List, Optional, Sequence

import omegaconf
import torch
from solo.methods.base import BaseMethod
from solo.utils.misc import concat_all_gather_no_grad, gather, omegaconf_select
from torch import nn

from solo_diet.core.errors import ConfigError
from solo_diet.core.labels import LABEL_DEFAULTS, LabelSource, check_range, label_source_from_kwargs
from solo_diet.core.nn import mlp_projector
from solo_diet.core.settings import core_errors_named, setting
from solo_diet.methods._common import online_probe_loss
from solo_diet.methods.contract import Contract, DeclaredKwargs

# the core arguments of the label source and sampler check, and the keys that set them
INDEX_ARGUMENT_KEYS = {
    "kwargs": "method_kwargs",
    "source": "method_kwargs.labels",
    "labelled_fraction": "method_kwargs.labelled_fraction",
    "groups": "method_kwargs.groups_path",
    "groups_path": "method_kwargs.groups_path",
    "num_samples": "method_kwargs.num_samples",
    "rows_per_step": "method_kwargs.rows_per_step",
    "num_classes": "data.num_classes",
    "has_labels": "data.no_labels",
}


@dataclass(frozen=True)
class IndexKwargs:
    """The ``method_kwargs`` every index-based method shares (docs/methods/diet.md)."""

    num_samples: int = setting(
        None,
        minimum=1,
        hint="It is the number of training samples (after data.fraction); `solo-diet pretrain` "
        "fills it.",
    )
    labels: str = LABEL_DEFAULTS["labels"]
    labelled_fraction: float = LABEL_DEFAULTS["labelled_fraction"]
    label_seed: int = LABEL_DEFAULTS["label_seed"]
    groups_path: Optional[str] = LABEL_DEFAULTS["groups_path"]
    proj_layers: int = setting(3, minimum=1)
    proj_hidden_dim: int = setting(2048, minimum=1)
    proj_output_dim: int = setting(2048, minimum=1)
    proj_use_bn: bool = True


@dataclass(frozen=True)
class LabelledProjectionKwargs(IndexKwargs):
    """:class:`IndexKwargs`, where ``labels=index`` needs two views per datum."""

    def checked(self, cfg: omegaconf.DictConfig) -> "LabelledProjectionKwargs":
        """``labels=index`` with at least two views per datum."""
        num_views = cfg.data.num_large_crops + omegaconf_select(cfg, "data.num_small_crops", 0)
        if self.labels == "index" and num_views < 2:
            raise ConfigError(
                f"`method_kwargs.labels=index` needs >= 2 views per datum, got {num_views} (one "
                "view learns no invariance: Birth-of-SSL paper, Prop. 1): set "
                "`data.num_large_crops=2` (and augmentations[].num_crops), or another label source."
            )
        return self


def check_sample_indexes(indexes: torch.Tensor, num_samples: int) -> None:
    """Refuse dataset indices outside ``[0, num_samples)`` (on a GPU: a device assert)."""
    fix = (
        "The head has one row per training sample: launch with `solo-diet pretrain` (it sets "
        "num_samples from the real dataset), or set it to len(train_dataset) after "
        "data.fraction; with DALI, set dali.encode_indexes_into_labels=True."
    )
    device_key = "method_kwargs.num_samples; launch with solo-diet pretrain"  # < 255 characters
    with core_errors_named(INDEX_ARGUMENT_KEYS):
        check_range(indexes, 0, num_samples, "dataset index", "num_samples", fix, device_key)


class IndexMethod(DeclaredKwargs, BaseMethod):
    """Backbone -> optional ReLU MLP projector -> ``z`` (``z_dim`` wide), and a ``label_source``
    mapping each sample to its label id.

    Keys, parsed once into ``self.hp``: :class:`IndexKwargs` ``num_samples``, ``labels``,
    ``labelled_fraction``, ``label_seed``, ``groups_path``, ``proj_layers``, ``proj_hidden_dim``,
    ``proj_output_dim``, ``proj_use_bn``.
    solo-learn's ``BaseMethod`` reads the rest: ``backbone``, ``optimizer``, ``scheduler``,
    ``data`` (the crops, ``num_classes`` for the online probe), ``knn_eval``, ``max_epochs``."""

    contract = Contract(
        uses_sample_indexes=True,
        kwargs=IndexKwargs,
        views=1,
        smoke_kwargs={"proj_hidden_dim": 16, "proj_output_dim": 8},
    )
    hp: IndexKwargs

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        hp = self.hp
        has_labels = not omegaconf_select(cfg, "data.no_labels", False)
        try:  # a bad label source is a ConfigError naming its key
            with core_errors_named(INDEX_ARGUMENT_KEYS):
                self.label_source: LabelSource = label_source_from_kwargs(
                    asdict(hp), omegaconf_select(cfg, "data.num_classes", None), has_labels
                )
        except ValueError as error:  # an unreadable groups file, too
            raise error if isinstance(error, ConfigError) else ConfigError(str(error)) from error
        self.projector: nn.Module = nn.Identity()
        self.z_dim: int = self.features_dim
        if hp.proj_layers > 0:
            self.projector = mlp_projector(
                self.features_dim,
                hp.proj_hidden_dim,
                hp.proj_output_dim,
                hp.proj_layers,
                hp.proj_use_bn,
            )
            self.z_dim = hp.proj_output_dim

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """solo-learn's parameter groups and the projector's (the backbone's optimizer)."""
        projector = {"name": "projector", "params": self.projector.parameters()}
        return super().learnable_params + [projector]

    def head_input(self, feats: torch.Tensor) -> torch.Tensor:
        """``z``: the projector output (subclasses may normalise it)."""
        return self.projector(feats)

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """solo-learn's outputs (``feats``, ``logits``) and ``z``."""
        out = super().forward(X)
        return {**out, "z": self.head_input(out["feats"])}

    def multicrop_forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """As :meth:`forward`, for solo-learn's small crops."""
        out = super().multicrop_forward(X)
        return {**out, "z": self.head_input(out["feats"])}


class LabelledProjectionMethod(IndexMethod):
    """An index-based method comparing the views by label id. Keys: :class:`IndexMethod`'s."""

    hp: LabelledProjectionKwargs
    loss_logged_as: str  # the name the subclass's loss is logged under
    contract = replace(
        IndexMethod.contract,
        kwargs=LabelledProjectionKwargs,
        views=2,
        smoke_kwargs={"proj_hidden_dim": 16, "proj_output_dim": 12},
    )

    def views_loss(self, views: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        """The loss of every view's ``z`` (all DDP ranks) and the label ids of ``cat(views)``."""
        raise NotImplementedError

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """The loss: :meth:`views_loss` over every view of the global batch + online probe."""
        out = super().training_step(batch, batch_idx)
        ids = concat_all_gather_no_grad(self.label_source(batch[0], batch[2]))
        loss = self.views_loss([gather(z) for z in out["z"]], ids.repeat(len(out["z"])))
        self.log(self.loss_logged_as, loss, on_epoch=True, sync_dist=True)
        return loss + online_probe_loss(batch[2], out["loss"])
