"""DIET as a solo-learn method: every image is its own class (DIET paper, Eq. 2)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Sequence

import omegaconf
import torch
import torch.nn.functional as F
from torch import nn

from solo_diet.core.losses import diet_loss, mse_diet_loss
from solo_diet.core.settings import setting
from solo_diet.methods._common import online_probe_loss
from solo_diet.methods.index_method import IndexKwargs, IndexMethod, check_sample_indexes


@dataclass(frozen=True)
class DIETKwargs(IndexKwargs):
    """DIET's ``method_kwargs`` besides :class:`IndexKwargs` (docs/methods/diet.md)."""

    proj_layers: int = setting(0, minimum=0, hint="0 means no projector.")
    loss: str = setting("ce", choices=("ce", "mse"))
    label_smoothing: float = setting(0.8, within=(0.0, 1.0))
    normalize: bool = False


class DIET(IndexMethod):
    """DIET: a bias-free ``Linear(D, R)`` head over the (optionally projected) backbone output, R
    the label source's number of ids (N for ``index``, the paper).

    Keys, parsed once into ``self.hp``: :class:`DIETKwargs` ``proj_layers`` (0: no projector),
    ``loss``, ``label_smoothing``, ``normalize``; from :class:`IndexKwargs` ``num_samples``,
    ``labels``, ``labelled_fraction``, ``label_seed``, ``groups_path``, ``proj_hidden_dim``,
    ``proj_output_dim``, ``proj_use_bn``.
    solo-learn's ``BaseMethod`` reads the rest: ``backbone``, ``optimizer``, ``scheduler``,
    ``data`` (the crops, ``num_classes`` for the online probe), ``knn_eval``, ``max_epochs``."""

    registered_as = "diet"
    contract = replace(IndexMethod.contract, kwargs=DIETKwargs)
    hp: DIETKwargs

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        self.head = nn.Linear(self.z_dim, self.label_source.num_rows, bias=False)

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """solo-learn's parameter groups and the head's, trained with the backbone's optimizer."""
        return super().learnable_params + [{"name": "diet_head", "params": self.head.parameters()}]

    def head_input(self, feats: torch.Tensor) -> torch.Tensor:
        """``z``: the projector output, L2-normalised with ``normalize``."""
        z = self.projector(feats)
        return F.normalize(z, dim=-1) if self.hp.normalize else z

    def head_logits(self, z: torch.Tensor) -> torch.Tensor:
        """``W_H z`` in float32 whatever the autocast (bf16 would round the R-way logits)."""
        with torch.autocast(device_type=z.device.type, enabled=False):
            return self.head(z.to(self.head.weight.dtype))

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """DIET loss over every labelled view + online probe; returns the loss."""
        indexes, targets = batch[0], batch[2]
        check_sample_indexes(indexes, self.hp.num_samples)
        out = super().training_step(batch, batch_idx)
        ids = self.label_source(indexes, targets).repeat(self.num_crops)
        logits = self.head_logits(torch.cat(out["z"]))
        if self.label_source.has_unlabelled:
            labelled = ids >= 0
            logits, ids = logits[labelled], ids[labelled]
        if ids.numel() == 0:
            loss = logits.sum()
        elif self.hp.loss == "ce":
            loss = diet_loss(logits, ids, self.hp.label_smoothing)
        else:
            loss = mse_diet_loss(logits, ids)
        instance_acc = (logits.argmax(dim=1) == ids).float().sum() / max(ids.numel(), 1)

        logs = {"train_diet_loss": loss, "train_instance_acc": instance_acc}
        self.log_dict(logs, on_epoch=True, sync_dist=True)
        return loss + online_probe_loss(targets, out["loss"])
