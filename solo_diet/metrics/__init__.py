"""Evaluation metrics for learned representations and code assignments (torch / numpy only):
clustering scores and collapse diagnostics, RankMe and LiDAR, k-means."""

from solo_diet.metrics.clustering import (
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
from solo_diet.metrics.rank import lidar, rankme, singular_values

__all__ = [
    "contingency_table",
    "normalized_mutual_info",
    "adjusted_mutual_info",
    "adjusted_rand_index",
    "hungarian_accuracy",
    "many_to_one_accuracy",
    "chance_nmi",
    "clustering_report",
    "embedding_spectrum",
    "dimensional_collapse_report",
    "singular_values",
    "rankme",
    "lidar",
    "kmeans",
]
