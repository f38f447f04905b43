"""Torch-only modules (projectors, embedders), usable in any training loop."""

from solo_diet.core.nn.cplearn import (
    CPLearnProjector,
    code_temperature,
    logit_range,
    rademacher_codes,
)
from solo_diet.core.nn.layers import mlp_projector
from solo_diet.core.nn.sem import SimplicialEmbedding, simplex_softmax, simplex_statistics
