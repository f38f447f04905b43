"""DIET-CF as a solo-learn method: DIET's MSE with the optimal ridge head in closed form (seed 002 Lemma 1).

The head is never stored: for each (global) batch, ``min_{W,b} (1/N)||z W^T + 1 b^T - Y||^2 + lam ||W||^2``
is solved exactly, so only ``lam`` is left (spec §1.2, §2.A). ``Y`` comes from a label source
(``solo_diet.labels``): the datum index (SSL, needs >= 2 views per datum), the class, a mix or groups.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import omegaconf
import torch
from solo.methods.base import BaseMethod
from solo.utils.misc import concat_all_gather_no_grad, gather, omegaconf_select

from solo_diet.labels import label_source_from_kwargs
from solo_diet.losses import closed_form_head_loss
from solo_diet.config import ConfigError, fill_default
from solo_diet.methods._common import (
    fill_and_check_labels,
    fill_and_check_num_samples,
    fill_and_check_projector,
    online_probe_loss,
    projector_from_cfg,
)


class LabelledProjectionMethod(BaseMethod):
    """Backbone -> ReLU MLP projector -> ``z``, plus a label source mapping the batch to ids.

    Shared by ``diet_cf`` and ``graph_vicreg``. Extra cfg settings (``method_kwargs``):
        num_samples (int): N, dataset size; set by ``solo-diet pretrain`` from the dataset.
        labels (str): ``index`` | ``class`` | ``mix`` | ``groups`` (see ``solo_diet.labels``). Default index.
        labelled_fraction (float): fraction of the data whose class is kept (class/mix). Default 1.0.
        label_seed (int): seed of that subset. Default 0.
        groups_path (str): ``.npy``/``.pt``/``.txt`` index -> group id array (groups). Default None.
        proj_layers (int): layers of the projector. Default 3.
        proj_hidden_dim (int): projector hidden width. Default 2048.
        proj_output_dim (int): K, width of ``z``. Default 2048.
        proj_use_bn (bool): BatchNorm1d after each hidden projector layer. Default True.
    """

    uses_sample_indexes = True

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        kwargs = cfg.method_kwargs
        self.projector, _ = projector_from_cfg(self.features_dim, kwargs)
        self.label_source = label_source_from_kwargs(kwargs, cfg.data.num_classes)

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fills the projector and label-source defaults and checks them (a bad source fails here)."""
        cfg = super(LabelledProjectionMethod, LabelledProjectionMethod).add_and_assert_specific_cfg(cfg)
        fill_and_check_num_samples(cfg)
        fill_and_check_projector(cfg, default_layers=3, min_layers=1)
        fill_and_check_labels(cfg)
        num_views = cfg.data.num_large_crops + omegaconf_select(cfg, "data.num_small_crops", 0)
        if cfg.method_kwargs.labels == "index" and num_views < 2:
            raise ConfigError(
                f"`method_kwargs.labels=index` needs >= 2 views per datum in the batch, got {num_views}: with one "
                "view each index is its own singleton and the loss learns no invariance (only the spectrum of z, "
                "spec §1.7). Set `data.num_large_crops=2` (and augmentations[].num_crops), or another label source."
            )
        return cfg

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """The projector trains with the backbone's optimizer."""
        return super().learnable_params + [{"name": "projector", "params": self.projector.parameters()}]

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone features, online-probe logits and ``z``, the projector output."""
        out = super().forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> Dict[str, Any]:
        out = super().multicrop_forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def gathered_views_and_ids(self, out: Dict[str, Any], batch: Sequence[Any]) -> tuple[list, torch.Tensor]:
        """Each view's ``z`` over all DDP ranks and the label ids of ``cat(views)`` (view-major)."""
        ids = concat_all_gather_no_grad(self.label_source(batch[0], batch[2]))
        return [gather(z) for z in out["z"]], ids.repeat(len(out["z"]))


class DIETCF(LabelledProjectionMethod):
    """Closed-form ridge head over the batch (seed 002 eq. 2), any label source.

    Extra cfg settings (``method_kwargs``), besides :class:`LabelledProjectionMethod`'s:
        lam (float): ridge lambda > 0 of the head, the loss's one knob. Default 0.1.
    """

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        self.lam: float = cfg.method_kwargs.lam

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fills ``lam`` and checks it (``lam = 0`` makes the loss constant once K >= rows - 1)."""
        cfg = super(DIETCF, DIETCF).add_and_assert_specific_cfg(cfg)
        fill_default(cfg, "method_kwargs.lam", 0.1)
        lam = cfg.method_kwargs.lam
        if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not lam > 0:
            raise ConfigError(
                f"`method_kwargs.lam` must be a number > 0, got {lam!r}: with lam = 0 the optimal head fits the "
                "batch exactly once proj_output_dim >= rows - 1, and the loss is constant."
            )
        return cfg

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """Closed-form-head loss over all views of the global batch + online probe."""
        out = super().training_step(batch, batch_idx)
        views, ids = self.gathered_views_and_ids(out, batch)
        loss = closed_form_head_loss(torch.cat(views), ids, self.lam)
        self.log("train_cf_loss", loss, on_epoch=True, sync_dist=True)
        return loss + online_probe_loss(batch[2], out["loss"])

