"""Toy index-based method: every image is its own class, plain cross-entropy at a temperature."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Sequence

import omegaconf
import torch
import torch.nn.functional as F
from torch import nn

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import setting
from solo_diet.methods._common import online_probe_loss
from solo_diet.methods.checkpoint import PretrainedCheckpoint
from solo_diet.methods.contract import ExtraRepresentation
from solo_diet.methods.index_method import IndexKwargs, IndexMethod, check_sample_indexes


class ProjectedFeatures(nn.Module):
    """Images -> ``z`` of a pretrained model (compare measures it as the ``z_*`` columns)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)["z"]


def projected_features(
    checkpoint: PretrainedCheckpoint, settings: Mapping[str, Any]
) -> list[ExtraRepresentation]:
    """Contract hook ``extra_evaluations``: compare also measures ``z``, the projector output."""
    return [ExtraRepresentation("z", ProjectedFeatures(checkpoint.method()))]


@dataclass(frozen=True)
class ToyKwargs(IndexKwargs):
    """The toy's ``method_kwargs``: IndexMethod's (one projector layer by default, 0 allowed) and
    its temperature. Each field's default and check; a key that is no field is refused."""

    proj_layers: int = setting(1, minimum=0, hint="0 means no projector.")
    temperature: float = setting(1.0, within=(1e-6, math.inf))

    def checked(self, cfg: omegaconf.DictConfig) -> "ToyKwargs":
        """What the fields cannot say alone: the toy trains on dataset indexes only."""
        if self.labels != "index":
            raise ConfigError(
                f"`method_kwargs.labels` must be `index` for the toy method, got {self.labels!r}: "
                "set `method_kwargs.labels=index`."
            )
        return self


class ToyIndexMethod(IndexMethod):
    """Bias-free ``Linear(z_dim, N)`` head over ``z``; the target of an image is its dataset index.

    Keys: ``self.hp`` (:class:`ToyKwargs`): ``temperature`` (float, > 0, default 1.0: the logits
    are divided by it) and ``proj_layers`` (1 by default) of its own; the others from
    :class:`IndexMethod`.
    """

    registered_as = "toy_index"  # the name configs use: `method: toy_index`
    # IndexMethod's contract (sample indexes, one view) with the toy's kwargs; compare measures z
    # too, and the suite's smoke runs build the toy with a 16-wide z at temperature 0.5
    contract = replace(
        IndexMethod.contract,
        kwargs=ToyKwargs,
        extra_evaluations=projected_features,
        smoke_kwargs={"proj_output_dim": 16, "temperature": 0.5},
    )

    hp: ToyKwargs

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)  # hp, label_source, projector, z_dim
        self.head = nn.Linear(self.z_dim, self.label_source.num_rows, bias=False)

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """The head trains with the backbone's optimizer (IndexMethod adds the projector)."""
        return super().learnable_params + [{"name": "toy_head", "params": self.head.parameters()}]

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """Cross-entropy of every view against its dataset index + solo-learn's online probe."""
        indexes, targets = batch[0], batch[2]
        check_sample_indexes(indexes, self.hp.num_samples)
        out = super().training_step(batch, batch_idx)  # z of every view (IndexMethod.forward)
        ids = self.label_source(indexes, targets).repeat(self.num_crops)
        logits = self.head(torch.cat(out["z"])) / self.hp.temperature
        loss = F.cross_entropy(logits, ids)
        self.log("train_toy_loss", loss, on_epoch=True, sync_dist=True)
        # solo-learn's online-probe loss, 0 on a batch without labelled samples (NaN otherwise)
        return loss + online_probe_loss(targets, out["loss"])
