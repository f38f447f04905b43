"""The strategy our launchers build for ``strategy: ddp``.

solo-learn's recipes name ``ddp`` also for one GPU, and its methods log with ``sync_dist=True``.
Lightning's ``DDPStrategy`` reduces each such value, every step, by ``torch.distributed.barrier``
and a blocking ``all_reduce``; on NCCL the barrier waits for the whole GPU (the CUDA sync debug mode
does not see it, the host does). Over one process every reduction is the value itself, bit for bit
(a sum or mean of one), so :class:`OneProcessAwareDDP` returns it unreduced there and is
Lightning's ``DDPStrategy`` everywhere else (several processes, gradients, samplers, barriers).
"""

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
