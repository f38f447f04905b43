"""DIET-CF as a solo-learn method: DIET's MSE with the optimal ridge head solved in closed form
for each (global) batch, ``min_{W,b} (1/N)||z W^T + 1 b^T - Y||^2 + lam ||W||^2`` (Birth-of-SSL
paper, Lemma 1, Eq. 2); ``Y`` from a label source (``solo_diet.core.labels``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import omegaconf
import torch

from solo_diet.core.errors import ConfigError
from solo_diet.core.losses import closed_form_head_loss
from solo_diet.core.settings import setting
from solo_diet.methods.index_method import LabelledProjectionKwargs, LabelledProjectionMethod


@dataclass(frozen=True)
class DIETCFKwargs(LabelledProjectionKwargs):
    """DIET-CF's ``method_kwargs`` (:class:`DIETCF`), besides the shared ones."""

    lam: float = setting(0.1, within=(0.0, math.inf))

    def checked(self, cfg: omegaconf.DictConfig) -> "DIETCFKwargs":
        """``lam = 0`` makes the loss constant once K >= rows - 1."""
        super().checked(cfg)
        if self.lam == 0.0:
            raise ConfigError(
                "`method_kwargs.lam` must be > 0, got 0: with lam = 0 the optimal head fits the "
                "batch exactly once proj_output_dim >= rows - 1, and the loss is constant."
            )
        return self


class DIETCF(LabelledProjectionMethod):
    """Closed-form ridge head over the batch (module docstring).

    Keys, parsed once into ``self.hp``: :class:`DIETCFKwargs` ``lam``; from :class:`IndexKwargs`
    ``num_samples``, ``labels``, ``labelled_fraction``, ``label_seed``, ``groups_path``,
    ``proj_layers``, ``proj_hidden_dim``, ``proj_output_dim``, ``proj_use_bn``.
    solo-learn's ``BaseMethod`` reads the rest: ``backbone``, ``optimizer``, ``scheduler``,
    ``data`` (the crops, ``num_classes`` for the online probe), ``knn_eval``, ``max_epochs``."""

    registered_as = "diet_cf"
    contract = replace(LabelledProjectionMethod.contract, kwargs=DIETCFKwargs)
    hp: DIETCFKwargs
    loss_logged_as = "train_cf_loss"

    def views_loss(self, views: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        """The closed-form-head loss over every view of the global batch."""
        return closed_form_head_loss(torch.cat(views), ids, self.hp.lam)
