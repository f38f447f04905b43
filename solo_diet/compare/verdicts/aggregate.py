"""Seeds: each run's mean and standard deviation of every metric, and the gaps the seeds resolve."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from solo_diet.core.settings import is_number

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
MIN_SEEDS = 3  # fewer: a gap must also cross the floor of `floored`
# Columns that describe the training the metrics come from: averaged over the evaluated seeds only
# (a seed stopped early would pull the mean epochs below the budget every evaluated seed ran).
EVALUATED_SEEDS_ONLY = ("epochs",)


def ranked_metrics(columns: Sequence[str]) -> list[str]:
    """``RANKED_METRICS``, then the other ``columns`` ending in ``RANKED_SUFFIXES``."""
    extra = [
        c
        for c in columns
        if c not in RANKED_METRICS and c.endswith(RANKED_SUFFIXES) and not c.startswith("kmeans_")
    ]
    return [*RANKED_METRICS, *extra]


def has_value(row: dict | None, metric: str) -> bool:
    """Whether ``row`` (None: no row) has a number, not NaN, at ``metric``."""
    return row is not None and is_number(row.get(metric)) and not math.isnan(row[metric])


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    finite = [float(v) for v in values if not math.isnan(float(v))]
    if not finite:
        return math.nan, math.nan
    mean = math.fsum(finite) / len(finite)
    if len(finite) < 2:
        return mean, math.nan
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in finite) / (len(finite) - 1))


def aggregate(results: Sequence[dict]) -> list[dict]:
    """One row per run (``seed``: ``"mean"``): each numeric column's mean and ``_std``."""
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


def two_pooled_std(a: dict, b: dict, metric: str, b_metric: str = "") -> float:
    """Two pooled standard deviations of aggregate rows ``a`` and ``b``; NaN under two seeds."""
    std_a, std_b = a.get(f"{metric}_std", math.nan), b.get(f"{b_metric or metric}_std", math.nan)
    n_a, n_b = a.get("n_seeds", 1), b.get("n_seeds", 1)
    if n_a < 2 or n_b < 2 or math.isnan(std_a) or math.isnan(std_b):
        return math.nan
    return 2 * math.sqrt(((n_a - 1) * std_a**2 + (n_b - 1) * std_b**2) / (n_a + n_b - 2))


@dataclass(frozen=True)
class Gap:
    """``better``'s mean minus ``other``'s, two pooled std and ``line``, the threshold to cross."""

    better: str
    other: str
    gap: float
    two_std: float
    line: float

    @property
    def sign(self) -> int:
        """1: resolved above, -1: resolved below, 0: not resolved."""
        return (self.gap > self.line) - (-self.gap > self.line)

    def spread(self) -> str:
        """How the threshold was set, in words."""
        if math.isnan(self.two_std):
            return "one seed"
        if math.isnan(self.line):
            return f"fewer than {MIN_SEEDS} seeds"
        floor = f", floor {self.line:.2f}" if self.line > self.two_std else ""
        return f"2 pooled std {self.two_std:.2f}{floor}"

    def short(self) -> str:
        """``diet -1.57 (2 pooled std 0.08)``: a verdict line's item."""
        return f"{self.better} {self.gap:+.2f} ({self.spread()})"


def by_sign(gaps: Sequence[Gap], words: dict[int, str]) -> list[str]:
    """``<words>: <gaps>`` for each sign of ``words`` that some of ``gaps`` have."""
    parts = [(said, [g.short() for g in gaps if g.sign == sign]) for sign, said in words.items()]
    return [f"{said}: {', '.join(items)}" for said, items in parts if items]


def floored(two_std: float, seeds: int, metric: str, means: Sequence[float], val_images) -> float:
    """``two_std``, raised with fewer than ``MIN_SEEDS`` seeds to two standard errors of a top-1."""
    if seeds >= MIN_SEEDS or math.isnan(two_std):
        return two_std
    if not metric.endswith("acc1") or not val_images:
        return math.nan
    p = min(max(math.fsum(means) / (100 * len(means)), 0.0), 1.0)
    return max(two_std, 200 * math.sqrt(p * (1 - p) / val_images))


def gap(
    a: dict, metric: str, b: dict | None = None, b_metric: str = "", value=None, val_images=None
) -> Gap:
    """Row ``a``'s ``metric`` against row ``b``'s ``b_metric`` or ``value``, with its threshold."""
    mean, n = a.get(metric, math.nan), a.get("n_seeds", 1)
    if b is None:
        two_std, other = 2 * a.get(f"{metric}_std", math.nan) if n >= 2 else math.nan, f"{value:g}"
    else:
        two_std = two_pooled_std(a, b, metric, b_metric)
        other, value = b["run"], b.get(b_metric or metric, math.nan)
        n = min(n, b.get("n_seeds", 1))  # the seeds of the smaller side
    line = floored(two_std, n, metric, (mean, value), val_images)
    return Gap(a["run"], other, mean - value, two_std, line)


@dataclass(frozen=True)
class Ranking:
    """The best run of one metric (and those tied with it) and each other run's :class:`Gap`."""

    metric: str
    best: str
    best_mean: float
    gaps: tuple[Gap, ...]
    tied: tuple[str, ...] = ()

    @property
    def resolved(self) -> tuple[str, ...]:
        return tuple(g.better for g in self.gaps if g.sign)


def rank(rows: Sequence[dict], metric: str, val_images: int | None = None) -> Ranking | None:
    """The :class:`Ranking` of aggregate ``rows`` by ``metric`` (higher is better), or None."""
    scored = [r for r in rows if has_value(r, metric)]
    if not scored:
        return None
    best = max(scored, key=lambda r: r[metric])
    tied = tuple(r["run"] for r in scored if r is not best and r[metric] == best[metric])
    gaps = tuple(
        gap(row, metric, best, val_images=val_images)
        for row in scored
        if row is not best and row["run"] not in tied
    )
    return Ranking(metric, best["run"], best[metric], gaps, tied)


def verdict(ranking: Ranking) -> str:
    """The ranking in words, each gap with its threshold, for the top of the report."""
    best = ", ".join((ranking.best, *ranking.tied))
    words = {-1: "below it by more than the threshold", 0: "not resolved"}  # gaps to the best
    parts = [f"best **{best}** ({ranking.best_mean:.2f})", *by_sign(ranking.gaps, words)]
    return f"`{ranking.metric}`: {'; '.join(parts)}."
