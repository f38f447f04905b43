"""Representation metrics (torch / numpy): clustering scores, collapse, RankMe, LiDAR, k-means."""

from solo_diet.core.metrics.clustering import (
    adjusted_mutual_info,
    adjusted_rand_index,
    chance_nmi,
    clustering_report,
    contingency_table,
    dimensional_collapse_report,
    embedding_spectrum,
    hungarian_accuracy,
    kmeans,
    many_to_one_accuracy,
    normalized_mutual_info,
)
from solo_diet.core.metrics.rank import lidar, rankme, singular_values
