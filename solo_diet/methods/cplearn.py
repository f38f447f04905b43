"""CPLearn as a solo-learn method (Sansone et al., ICML 2025)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence

import omegaconf
import torch
from solo.methods.base import BaseMethod
from solo.utils.misc import omegaconf_select

from solo_diet.core.errors import ConfigError
from solo_diet.core.losses import cplearn_diagnostics, cplearn_loss_terms
from solo_diet.core.metrics import clustering_report
from solo_diet.core.nn import CPLearnProjector
from solo_diet.core.settings import is_number, setting
from solo_diet.methods._common import SOLO_LEARN_SEED, online_probe_loss
from solo_diet.methods.checkpoint import PretrainedCheckpoint
from solo_diet.methods.contract import Contract, DeclaredKwargs, ExtraRepresentation


@dataclass(frozen=True)
class CPLearnKwargs:
    """CPLearn's ``method_kwargs`` (docs/methods/cplearn.md)."""

    proj_hidden_dim: int = setting(2048, minimum=1, hint="It is f, the rows of the code matrix W.")
    proj_output_dim: int = setting(16384, minimum=2, hint="It is c, the number of codes.")
    beta: float = setting(1.0, within=(0.0, math.inf))
    eps: float = 1e-8
    activation: str = setting("tanh", choices=("tanh", "l2"))
    prior: str = setting("reverse_kl", choices=("reverse_kl", "forward_ce"))
    symmetric: bool = True
    gather_marginal: bool = False
    codes_seed: int = setting(
        minimum=0, derive=lambda cfg: omegaconf_select(cfg, "seed", SOLO_LEARN_SEED)
    )

    def checked(self, cfg: omegaconf.DictConfig) -> "CPLearnKwargs":
        """``eps`` below 1/c, and exactly two views."""
        if not (is_number(self.eps) and 0.0 < self.eps < 1.0 / self.proj_output_dim):
            raise ConfigError(
                "`method_kwargs.eps` must be in (0, 1/proj_output_dim) = (0, "
                f"{1.0 / self.proj_output_dim:.3g}), got {self.eps!r}; the paper uses 1e-8."
            )
        crops = tuple(omegaconf_select(cfg, f"data.num_{s}_crops") for s in ("large", "small"))
        if crops != (2, 0):
            raise ConfigError(
                f"CPLearn compares exactly two views: needs data.num_large_crops=2 and "
                f"data.num_small_crops=0, got {crops[0]} and {crops[1]}; use two augmentation "
                f"pipelines with num_crops: 1 (or one with num_crops: 2) and no small crops."
            )
        return self


class ForwardOutput(torch.nn.Module):
    """Output ``key`` of a model's forward, or with ``argmax`` its argmax code id."""

    def __init__(self, method_model: torch.nn.Module, key: str, argmax: bool = False):
        super().__init__()
        self.method_model, self.key, self.argmax = method_model, key, argmax

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = self.method_model(images)[self.key]
        return out.argmax(1, keepdim=True) if self.argmax else out


def cplearn_representations(
    checkpoint: PretrainedCheckpoint, settings: Mapping[str, Any]
) -> list[ExtraRepresentation]:
    """Contract hook ``extra_evaluations``: the argmax codes and the embedding H."""
    model = checkpoint.method()
    return [
        ExtraRepresentation("codes", ForwardOutput(model, "z", argmax=True), kind="codes"),
        ExtraRepresentation("embedding", ForwardOutput(model, "h")),
    ]


class CPLearn(DeclaredKwargs, BaseMethod):
    """Backbone -> ``Linear -> BN -> tanh | scaled L2`` -> frozen Rademacher codes / tau.

    Keys, parsed once into ``self.hp``: :class:`CPLearnKwargs` ``proj_hidden_dim`` (f),
    ``proj_output_dim`` (c), ``beta``, ``eps``, ``activation``, ``prior``, ``symmetric``,
    ``gather_marginal``, ``codes_seed`` (default: ``seed``).
    solo-learn's ``BaseMethod`` reads the rest: ``backbone``, ``optimizer``, ``scheduler``,
    ``data`` (the crops, ``num_classes`` for the online probe), ``knn_eval``, ``max_epochs``."""

    registered_as = "cplearn"
    contract = Contract(
        kwargs=CPLearnKwargs,
        extra_evaluations=cplearn_representations,
        smoke_kwargs={"proj_hidden_dim": 16, "proj_output_dim": 32},
    )
    hp: CPLearnKwargs

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        hp = self.hp
        loss_keys = ("beta", "prior", "symmetric", "gather_marginal")
        self.loss_options: Dict[str, Any] = {key: getattr(hp, key) for key in loss_keys}
        self.projector = CPLearnProjector(
            self.features_dim,
            hp.proj_hidden_dim,
            hp.proj_output_dim,
            activation=hp.activation,
            eps=hp.eps,
            codes_seed=hp.codes_seed,
        )
        self._val_codes: List[torch.Tensor] = []
        self._val_targets: List[torch.Tensor] = []

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """The projector's Linear and BN (the code matrix W is a frozen buffer)."""
        return super().learnable_params + [
            {"name": "projector", "params": self.projector.parameters()}
        ]

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone ``feats``, probe ``logits``, embedding ``h`` and float32 code logits ``z``."""
        out = super().forward(X)
        out["h"], out["z"] = self.projector(out["feats"])
        return out

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """The CPLearn loss of the two views' code logits + online probe; logs collapse monitors."""
        out = super().training_step(batch, batch_idx)
        z_a, z_b = out["z"]
        terms = cplearn_loss_terms(z_a, z_b, **self.loss_options)
        logs = {**terms, **cplearn_diagnostics(z_a, z_b)}
        self.log_dict(
            {f"train_cplearn_{k}": v for k, v in logs.items()}, on_epoch=True, sync_dist=True
        )
        return terms["loss"] + online_probe_loss(batch[2], out["loss"])

    def base_validation_step(self, X: torch.Tensor, targets: torch.Tensor) -> Dict:
        """solo-learn's validation step, keeping each sample's argmax code for online clustering."""
        out = super().base_validation_step(X, targets)
        self._val_codes.append(out["z"].argmax(dim=1).detach())
        self._val_targets.append(targets.detach())
        return out

    def on_validation_epoch_end(self):
        """Logs ``val_cluster_*`` of the argmax codes over the whole validation split."""
        if self._val_codes and not self.trainer.sanity_checking:
            codes = self.all_gather(torch.cat(self._val_codes)).flatten().cpu()
            targets = self.all_gather(torch.cat(self._val_targets)).flatten().cpu()
            labelled = targets >= 0
            if bool(labelled.any()):
                report = clustering_report(targets[labelled], codes[labelled])
                self.log_dict({f"val_cluster_{k}": v for k, v in report.items()}, sync_dist=True)
        self._val_codes.clear()
        self._val_targets.clear()
        super().on_validation_epoch_end()
