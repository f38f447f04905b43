"""DIET as a solo-learn method: every image is its own class (seed 001 Eq. 2), or any label source."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import omegaconf
import torch
import torch.nn.functional as F
from solo.methods.base import BaseMethod
from torch import nn

from solo_diet.labels import label_source_from_kwargs
from solo_diet.losses import diet_loss, mse_diet_loss
from solo_diet.config import check_bool, check_choice, check_range, fill_default
from solo_diet.methods._common import (
    check_sample_indexes,
    fill_and_check_labels,
    fill_and_check_num_samples,
    fill_and_check_projector,
    online_probe_loss,
    projector_from_cfg,
)


class DIET(BaseMethod):
    """DIET: bias-free ``Linear(D, R)`` head over the (optionally projected) backbone output.

    ``R`` is the label source's number of ids (``solo_diet.labels``): N for ``index`` (the paper),
    the number of classes for ``class`` (supervised), classes + N for ``mix`` (semi-supervised DIET).

    Extra cfg settings (``method_kwargs``):
        num_samples (int): N, dataset size; set by ``solo-diet pretrain`` from the dataset.
        labels (str): ``index`` | ``class`` | ``mix`` | ``groups``: the target of each datum. Default index.
        labelled_fraction (float): fraction of the data whose class is kept (class/mix). Default 1.0.
        label_seed (int): seed of that subset. Default 0.
        groups_path (str): ``.npy``/``.pt``/``.txt`` index -> group id array (groups). Default None.
        loss (str): ``ce`` (label-smoothed cross-entropy, paper) or ``mse`` (MSE-DIET, seed 000 Eq. 5).
        label_smoothing (float): smoothing of the ``ce`` target, in [0, 1). Default 0.8.
        normalize (bool): L2-normalise what the head sees. Default False (paper's DIET).
        proj_layers (int): layers of the optional ReLU MLP projector; 0 = none (paper). Default 0.
        proj_hidden_dim (int): projector hidden width. Default 2048.
        proj_output_dim (int): projector output width (the head's input). Default 2048.
        proj_use_bn (bool): BatchNorm1d after each hidden projector layer. Default True.
    """

    uses_sample_indexes = True

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        kwargs = cfg.method_kwargs
        self.num_samples: int = kwargs.num_samples
        self.loss_name: str = kwargs.loss
        self.label_smoothing: float = kwargs.label_smoothing
        self.normalize: bool = kwargs.normalize
        self.label_source = label_source_from_kwargs(kwargs, cfg.data.num_classes)

        self.projector, head_dim = projector_from_cfg(self.features_dim, kwargs)
        self.head = nn.Linear(head_dim, self.label_source.num_rows, bias=False)

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fills DIET's ``method_kwargs`` defaults and checks every value."""
        cfg = super(DIET, DIET).add_and_assert_specific_cfg(cfg)

        fill_and_check_num_samples(cfg)
        fill_default(cfg, "method_kwargs.loss", "ce")
        fill_default(cfg, "method_kwargs.label_smoothing", 0.8)
        fill_default(cfg, "method_kwargs.normalize", False)
        fill_and_check_projector(cfg, default_layers=0, min_layers=0)
        fill_and_check_labels(cfg)

        check_choice(cfg, "method_kwargs.loss", ["ce", "mse"])
        check_range(cfg, "method_kwargs.label_smoothing", 0.0, 1.0)
        check_bool(cfg, "method_kwargs.normalize")
        return cfg

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """The head and projector train with the backbone's optimizer, lr and weight decay."""
        extra = [
            {"name": "projector", "params": self.projector.parameters()},
            {"name": "diet_head", "params": self.head.parameters()},
        ]
        return super().learnable_params + extra

    def _head_input(self, feats: torch.Tensor) -> torch.Tensor:
        z = self.projector(feats)
        return F.normalize(z, dim=-1) if self.normalize else z

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone features, online-probe logits and ``z``, the vector the DIET head sees."""
        out = super().forward(X)
        out["z"] = self._head_input(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> Dict[str, Any]:
        out = super().multicrop_forward(X)
        out["z"] = self._head_input(out["feats"])
        return out

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """DIET loss over every labelled view (target: its label id, by default its datum index) + online probe."""
        indexes, targets = batch[0], batch[2]
        check_sample_indexes(indexes, self.num_samples)

        out = super().training_step(batch, batch_idx)
        ids = self.label_source(indexes, targets).repeat(self.num_crops)
        logits = self.head(torch.cat(out["z"]))
        if self.label_source.has_unlabelled:
            labelled = ids >= 0
            logits, ids = logits[labelled], ids[labelled]
        if ids.numel() == 0:
            loss = logits.sum()
        elif self.loss_name == "ce":
            loss = diet_loss(logits, ids, self.label_smoothing)
        else:
            loss = mse_diet_loss(logits, ids)
        instance_acc = (logits.argmax(dim=1) == ids).float().sum() / max(ids.numel(), 1)

        self.log_dict(
            {"train_diet_loss": loss, "train_instance_acc": instance_acc}, on_epoch=True, sync_dist=True
        )
        return loss + online_probe_loss(targets, out["loss"])
