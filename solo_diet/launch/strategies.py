"""The strategy our launchers build for ``strategy: ddp``: over one process Lightning's
``DDPStrategy`` still reduces every value logged with ``sync_dist=True`` through a barrier that
waits for the whole GPU, where the reduction of one value is the value itself
(docs/data-path.md)."""

from __future__ import annotations

from typing import Any, Optional, Union

from lightning.pytorch.strategies.ddp import DDPStrategy
from torch import Tensor
from torch.distributed import ReduceOp


class OneProcessAwareDDP(DDPStrategy):
    """Lightning's ``DDPStrategy``; ``reduce`` over a world of one process is the identity."""

    def reduce(
        self,
        tensor: Any,
        group: Optional[Any] = None,
        reduce_op: Optional[Union[ReduceOp, str]] = "mean",
    ) -> Any:
        if self.world_size == 1 and isinstance(tensor, Tensor):
            return tensor
        return super().reduce(tensor, group, reduce_op)
