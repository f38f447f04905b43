"""Quasi-orthogonal code dictionaries (CPLearn paper, §3.3, Eq. 5 and Fig. 3).

``W in {-1, +1}^{f x c}`` with i.i.d. Rademacher entries: every column has norm ``sqrt(f)`` and two
distinct columns have a cosine of mean 0 and variance ``1/f`` whatever ``c`` (Eq. 5), so
``W^T W / f`` has ones on its diagonal and off-diagonal entries centred on 0 with spread
``1/sqrt(f)``.
"""

from __future__ import annotations

import torch


def code_cosines(codes: torch.Tensor) -> torch.Tensor:
    """``W^T W / f``: the ``(c, c)`` cosines between the ``c`` codes (columns) of ``W`` (``f x c``),
    all of norm ``sqrt(f)``."""
    return codes.T @ codes / codes.shape[0]


def cosine_statistics(cosines: torch.Tensor) -> dict[str, float]:
    """Diagonal range and off-diagonal mean and standard deviation of a square cosine matrix."""
    diagonal = cosines.diagonal()
    off = cosines[~torch.eye(cosines.shape[0], dtype=torch.bool)]
    return {
        "diagonal_min": diagonal.min().item(),
        "diagonal_max": diagonal.max().item(),
        "off_diagonal_mean": off.mean().item(),
        "off_diagonal_std": off.std().item(),
    }
