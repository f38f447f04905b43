"""Torch-only losses (pure functions), usable in any training loop."""

from solo_diet.core.losses.birth import (
    closed_form_head_loss,
    closed_form_head_loss_from_targets,
    graph_vicreg_loss,
    label_graph,
    label_onehot,
    label_targets,
)
from solo_diet.core.losses.cplearn import cplearn_diagnostics, cplearn_loss, cplearn_loss_terms
from solo_diet.core.losses.sdiet import (
    diet_loss,
    mse_diet_loss,
    sdiet_batch_cross_entropy,
    sdiet_multi_batch_cross_entropy,
)
