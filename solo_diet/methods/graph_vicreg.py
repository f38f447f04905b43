"""Graph-VICReg as a solo-learn method: VICReg over the label graph of any label source
(Birth-of-SSL paper, Cor. 1).

Positive pairs are the views sharing an id (``solo_diet.labels``); with the datum index and two
views this is solo-learn's VICReg exactly. ``label_norm_power`` is our knob for the label imbalance
the Birth-of-SSL paper's abstract mentions (it gives no rule).
"""

from __future__ import annotations

from typing import Any, Sequence

import omegaconf
import torch

from solo_diet.config import check_range, fill_default
from solo_diet.losses import graph_vicreg_loss, label_graph
from solo_diet.methods._common import online_probe_loss
from solo_diet.methods.index_method import LabelledProjectionMethod


class GraphVICReg(LabelledProjectionMethod):
    """VICReg with positives ``G_ij = 1[id_i = id_j] / n_c^p`` and degree-weighted
    variance/covariance.

    Extra cfg settings (``method_kwargs``), besides
    :class:`~solo_diet.methods.index_method.IndexMethod`'s:
        sim_loss_weight (float): weight of the invariance term. Default 25.0.
        var_loss_weight (float): weight of the std hinge. Default 25.0.
        cov_loss_weight (float): weight of the off-diagonal covariance. Default 1.0.
        label_norm_power (float): p in [0, 1]: 0 weights each sample by its group size n_c (raw
            labels), 1 weights every sample equally (class-normalised, the regular case). No effect
            on the index graph (all groups have the same size). Default 1.0.
    """

    registered_as = "graph_vicreg"
    contract = LabelledProjectionMethod.contract

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        kwargs = cfg.method_kwargs
        self.sim_loss_weight: float = kwargs.sim_loss_weight
        self.var_loss_weight: float = kwargs.var_loss_weight
        self.cov_loss_weight: float = kwargs.cov_loss_weight
        self.label_norm_power: float = kwargs.label_norm_power

    @classmethod
    def add_and_assert_specific_cfg(cls, cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fills the VICReg weights and ``label_norm_power`` and checks them."""
        cfg = super().add_and_assert_specific_cfg(cfg)
        fill_default(cfg, "method_kwargs.sim_loss_weight", 25.0)
        fill_default(cfg, "method_kwargs.var_loss_weight", 25.0)
        fill_default(cfg, "method_kwargs.cov_loss_weight", 1.0)
        fill_default(cfg, "method_kwargs.label_norm_power", 1.0)
        for key in ("sim_loss_weight", "var_loss_weight", "cov_loss_weight"):
            check_range(cfg, f"method_kwargs.{key}", 0.0, float("inf"))
        check_range(cfg, "method_kwargs.label_norm_power", 0.0, 1.0, high_inclusive=True)
        return cfg

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """Graph-VICReg over all views of the global batch + online probe."""
        out = super().training_step(batch, batch_idx)
        views, ids = self.gathered_views_and_ids(out, batch)
        loss = graph_vicreg_loss(
            views,
            label_graph(ids, self.label_norm_power),
            sim_loss_weight=self.sim_loss_weight,
            var_loss_weight=self.var_loss_weight,
            cov_loss_weight=self.cov_loss_weight,
        )
        self.log("train_graph_vicreg_loss", loss, on_epoch=True, sync_dist=True)
        return loss + online_probe_loss(batch[2], out["loss"])
