"""Graph-VICReg as a solo-learn method: VICReg over the label graph of any label source
(Birth-of-SSL paper, Cor. 1); with the datum index and two views it is solo-learn's VICReg.
``label_norm_power`` is our knob for label imbalance (the paper gives no rule)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from solo_diet.core.losses import graph_vicreg_loss, label_graph
from solo_diet.core.settings import setting
from solo_diet.methods.index_method import LabelledProjectionKwargs, LabelledProjectionMethod


@dataclass(frozen=True)
class GraphVICRegKwargs(LabelledProjectionKwargs):
    """Graph-VICReg's ``method_kwargs`` (:class:`GraphVICReg`), besides the shared ones."""

    sim_loss_weight: float = setting(25.0, within=(0.0, math.inf))
    var_loss_weight: float = setting(25.0, within=(0.0, math.inf))
    cov_loss_weight: float = setting(1.0, within=(0.0, math.inf))
    label_norm_power: float = setting(1.0, within=(0.0, 1.0), high_inclusive=True)


class GraphVICReg(LabelledProjectionMethod):
    """VICReg with positives ``G_ij = 1[id_i = id_j] / n_c^p`` and degree-weighted
    variance/covariance.

    Keys, parsed once into ``self.hp``: :class:`GraphVICRegKwargs` ``sim_loss_weight``,
    ``var_loss_weight``, ``cov_loss_weight``, ``label_norm_power`` (p); from :class:`IndexKwargs`
    ``num_samples``, ``labels``, ``labelled_fraction``, ``label_seed``, ``groups_path``,
    ``proj_layers``, ``proj_hidden_dim``, ``proj_output_dim``, ``proj_use_bn``.
    solo-learn's ``BaseMethod`` reads the rest: ``backbone``, ``optimizer``, ``scheduler``,
    ``data`` (the crops, ``num_classes`` for the online probe), ``knn_eval``, ``max_epochs``."""

    registered_as = "graph_vicreg"
    contract = replace(LabelledProjectionMethod.contract, kwargs=GraphVICRegKwargs)
    hp: GraphVICRegKwargs
    loss_logged_as = "train_graph_vicreg_loss"

    def views_loss(self, views: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
        """Graph-VICReg over every view of the global batch."""
        hp = self.hp
        return graph_vicreg_loss(
            views,
            label_graph(ids, hp.label_norm_power),
            sim_loss_weight=hp.sim_loss_weight,
            var_loss_weight=hp.var_loss_weight,
            cov_loss_weight=hp.cov_loss_weight,
        )
