"""Torch-only modules (projectors, embedders), usable in any training loop."""

from solo_diet.nn.cplearn import CPLearnProjector, code_temperature, logit_range, rademacher_codes
from solo_diet.nn.projector import mlp_projector
from solo_diet.nn.sem import SimplicialEmbedding, simplex_softmax, simplex_statistics

__all__ = [
    "CPLearnProjector",
    "code_temperature",
    "logit_range",
    "rademacher_codes",
    "mlp_projector",
    "SimplicialEmbedding",
    "simplex_softmax",
    "simplex_statistics",
]
