"""s-DIET head rows and their optimiser state outside ``nn.Parameter`` s (s-DIET paper, §5.1)."""

from solo_diet.core.sdiet.rowstore.store import MODES, RowStore, ShardedRowStore
from solo_diet.core.sdiet.rowstore.tables import (
    PLACEMENTS,
    HostSharing,
    RowShard,
    host_sharing,
    node_shard,
)
