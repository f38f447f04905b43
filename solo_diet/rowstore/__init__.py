"""s-DIET head rows and their optimiser state, kept outside ``nn.Parameter`` s (s-DIET paper, §5.1,
Listing 1).

- :mod:`~solo_diet.rowstore.tables`: the table, placed on ``cpu``, ``gpu`` or ``disk`` (shared);
- :mod:`~solo_diet.rowstore.transfers`: the worker thread and side stream that copy rows;
- :mod:`~solo_diet.rowstore.sharing`: one store per host for its DDP processes, or a part per node;
- :mod:`~solo_diet.rowstore.store`: :class:`RowStore`, loading, stepping and storing rows;
- :mod:`~solo_diet.rowstore.shards`: :class:`ShardedRowStore`, each node's rows only.
"""

from solo_diet.rowstore.shards import ShardedRowStore
from solo_diet.rowstore.sharing import HostSharing, RowShard, host_sharing, node_shard
from solo_diet.rowstore.store import MODES, RowStore
from solo_diet.rowstore.tables import PLACEMENTS, RowTables
from solo_diet.rowstore.transfers import TransferQueue

__all__ = [
    "MODES",
    "PLACEMENTS",
    "HostSharing",
    "RowShard",
    "RowStore",
    "RowTables",
    "ShardedRowStore",
    "TransferQueue",
    "host_sharing",
    "node_shard",
]
