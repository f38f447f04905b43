"""Plain Lightning pieces (no solo-learn): a module with known losses, batches in solo-learn's
layout."""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule
from torch.utils.data import DataLoader

LOSSES = {(0, 0): 1.0, (0, 1): 2.0, (1, 0): 4.0, (1, 1): 7.0}  # (epoch, batch) -> loss


class KnownLosses(LightningModule):
    """Returns the loss of ``LOSSES`` for each (epoch, batch), so the logged mean is known."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        return self.weight.sum() * 0 + LOSSES[(self.current_epoch, batch_idx)]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def solo_batches(batches: int, size: int) -> DataLoader:
    """Batches in solo-learn's layout ``[indexes, [views], targets]``."""

    def collate(indexes: list[int]) -> list:
        count = len(indexes)
        return [torch.tensor(indexes), [torch.zeros(count, 3, 4, 4)], torch.zeros(count).long()]

    return DataLoader(range(batches * size), batch_size=size, collate_fn=collate)
