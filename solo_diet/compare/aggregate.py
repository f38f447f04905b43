"""Seeds in a comparison: one aggregate per run (mean and standard deviation of every metric) and
which differences to the best run the seeds resolve: those beyond two pooled standard deviations
of the two runs' seeds (none with one seed per run). Pure Python: no solo-learn, no torch."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from solo_diet.config import is_number

# Metrics where higher is better: the report names the best run of each and marks resolved gaps.
RANKED_METRICS = (
    *("linear_acc1", "logreg_acc1", "knn_acc1", "sem_linear_acc1", "sem_knn_acc1"),
    *("kmeans_nmi", "kmeans_ami", "kmeans_acc", "codes_nmi", "codes_ami", "embedding_knn_acc1"),
)
# The columns ``<name>_<measure>`` of a representation a method declares (``ExtraRepresentation``):
# an embedding's measures (and ``<name>_linear_acc1`` where it has probe overrides), and a
# clustering by codes' scores ({clustering_report key: measure}).
EMBEDDING_MEASURES = ("knn_acc1", "rankme", "lidar")
CODE_MEASURES = {"nmi": "nmi", "ami": "ami", "codes_used": "used"}
# ... and those of them where higher is better.
RANKED_SUFFIXES = ("_linear_acc1", "_knn_acc1", "_nmi", "_ami")
NOT_AGGREGATED = ("run", "seed", "method", "checkpoint", "fingerprint", "job", "n_seeds")
MEAN_SEED = "mean"  # the `seed` of an aggregate row
# Columns that describe the training the metrics come from: averaged over the evaluated seeds only
# (a seed stopped early would pull the mean epochs below the budget every evaluated seed ran).
EVALUATED_SEEDS_ONLY = ("epochs",)


def ranked_metrics(columns: Sequence[str]) -> list[str]:
    """``RANKED_METRICS``, then the other ``columns`` ending in ``RANKED_SUFFIXES`` (those of the
    representations a method declares beyond the ones above; not ``kmeans_*``)."""
    extra = [
        c
        for c in columns
        if c not in RANKED_METRICS and c.endswith(RANKED_SUFFIXES) and not c.startswith("kmeans_")
    ]
    return [*RANKED_METRICS, *extra]


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1) of the non-NaN values; NaN where undefined."""
    finite = [float(v) for v in values if not math.isnan(float(v))]
    if not finite:
        return math.nan, math.nan
    mean = math.fsum(finite) / len(finite)
    if len(finite) < 2:
        return mean, math.nan
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in finite) / (len(finite) - 1))


def aggregate(results: Sequence[dict]) -> list[dict]:
    """One row per run, in order of first appearance: ``seed`` = ``"mean"``, every numeric
    column's mean over the run's seeds and its sample standard deviation (``<column>_std``);
    ``n_seeds`` counts the evaluated seeds, ``unfinished`` those stopped before their evaluation
    (they add only their costs, and their epochs where no seed of the run was evaluated)."""
    by_run: dict[str, list[dict]] = {}
    for result in results:
        by_run.setdefault(result["run"], []).append(result)
    rows = []
    for run, seeds in by_run.items():
        row: dict[str, Any] = {"run": run, "seed": MEAN_SEED, "method": seeds[0].get("method")}
        evaluated = [seed for seed in seeds if not seed.get("unfinished")]
        row["n_seeds"] = len(evaluated)
        if len(evaluated) < len(seeds):
            row["unfinished"] = len(seeds) - len(evaluated)
        columns = [k for k, v in seeds[0].items() if is_number(v) and k not in NOT_AGGREGATED]
        for column in columns:
            source = (evaluated or seeds) if column in EVALUATED_SEEDS_ONLY else seeds
            values = [r[column] for r in source if is_number(r.get(column))]
            row[column], row[f"{column}_std"] = _mean_std(values)
        rows.append(row)
    return rows


def pooled_std(std_a: float, n_a: int, std_b: float, n_b: int) -> float:
    """Pooled standard deviation of two groups of seeds (NaN with fewer than two in a group)."""
    if n_a < 2 or n_b < 2 or math.isnan(std_a) or math.isnan(std_b):
        return math.nan
    return math.sqrt(((n_a - 1) * std_a**2 + (n_b - 1) * std_b**2) / (n_a + n_b - 2))


def two_pooled_std(a: dict, b: dict, metric: str, b_metric: str = "") -> float:
    """Two pooled standard deviations of aggregate rows ``a`` (its ``metric``) and ``b`` (its
    ``b_metric``, default the same): the line a resolved gap crosses."""
    b_metric = b_metric or metric
    std_a, std_b = a.get(f"{metric}_std", math.nan), b.get(f"{b_metric}_std", math.nan)
    return 2 * pooled_std(std_a, a.get("n_seeds", 1), std_b, b.get("n_seeds", 1))


@dataclass(frozen=True)
class Ranking:
    """The best run of one metric (the first of those tied with it in ``tied``), the runs whose gap
    to it is resolved (more than two pooled standard deviations) and the runs whose gap is not."""

    metric: str
    best: str
    best_mean: float
    resolved: tuple[str, ...]
    unresolved: tuple[str, ...]
    tied: tuple[str, ...] = ()


def rank(rows: Sequence[dict], metric: str) -> Ranking | None:
    """The :class:`Ranking` of aggregate ``rows`` by ``metric`` (higher is better), or None."""
    scored = [r for r in rows if is_number(r.get(metric)) and not math.isnan(r[metric])]
    if not scored:
        return None
    best = max(scored, key=lambda r: r[metric])
    resolved, unresolved = [], []
    tied = tuple(r["run"] for r in scored if r is not best and r[metric] == best[metric])
    for row in scored:
        if row is best or row["run"] in tied:
            continue
        gap = best[metric] - row[metric]
        (resolved if gap > two_pooled_std(best, row, metric) else unresolved).append(row["run"])
    return Ranking(metric, best["run"], best[metric], tuple(resolved), tuple(unresolved), tied)


def verdict(ranking: Ranking) -> str:
    """The ranking in words, for the top of the report."""
    best = ", ".join((ranking.best, *ranking.tied))
    words = f"`{ranking.metric}`: best **{best}** ({ranking.best_mean:.2f})"
    if ranking.resolved:
        words += f"; below it by more than two pooled std: {', '.join(ranking.resolved)}"
    if ranking.unresolved:
        words += (
            f"; not resolved (within two pooled std, or one seed): {', '.join(ranking.unresolved)}"
        )
    return words + "."
