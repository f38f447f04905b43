"""s-DIET head rows and their optimiser state outside ``nn.Parameter`` s (s-DIET paper, §5.1)."""

from solo_diet.rowstore.shards import ShardedRowStore
from solo_diet.rowstore.store import MODES, RowStore
from solo_diet.rowstore.tables import PLACEMENTS, HostSharing, RowShard, host_sharing, node_shard
