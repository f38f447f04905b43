"""A spec's ``claims``: what a paper says of some runs, checked against the comparison's seeds
like the report's † marks (docs/compare.md, "Claims"); below its source's budget a claim reads
"budget-limited", never "did not hold" (:mod:`.paper_budget`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from omegaconf import DictConfig, ListConfig

from solo_diet.compare.aggregate import aggregate, is_number, two_pooled_std
from solo_diet.compare.paper_budget import Trained, budget_note, budget_verdict, check_paper_budget
from solo_diet.compare.record import seed_curves
from solo_diet.compare.spec_checks import Spec
from solo_diet.config import ConfigError

CLAIM_KEYS = (
    *("text", "metric", "better", "than", "than_metric", "at_least", "epoch", "paper_budget"),
    *("definition", "ours"),
)
HELD, REVERSED, OPEN = "held", "reversed", "not resolved"
# which probe a claim's verdict reads (by the column's ending: `sem_linear_acc1` is solo-learn's
# probe too), said in its line
PROBE_WORDS = {
    "logreg_acc1": "converged logistic-regression probe on frozen features",
    "linear_acc1": "solo-learn's LinearModel probe, SGD for the `linear` config's epochs",
}


@dataclass(frozen=True)
class Comparison:
    """``better``'s mean minus the other side's (a run's mean, or the ``at_least`` value) and two
    pooled standard deviations (two of ``better``'s own against a value; NaN with one seed)."""

    better: str
    other: str
    gap: float
    two_std: float

    @property
    def outcome(self) -> str:
        if math.isnan(self.two_std):
            return OPEN
        if self.gap > self.two_std:
            return HELD
        return REVERSED if -self.gap > self.two_std else OPEN

    def words(self) -> str:
        spread = "one seed" if math.isnan(self.two_std) else f"2 pooled std {self.two_std:.2f}"
        return f"{self.better} − {self.other} = {self.gap:+.2f} ({spread}: {self.outcome})"


def check_claims(spec: DictConfig, spec_path: str | Path) -> None:
    """Each claim has a text, a metric, ``better`` runs and one of ``than`` (runs, optionally read
    on ``than_metric``) or ``at_least``; ``epoch`` is within the budget. A metric no result has
    shows in the report as ``not checked``."""
    claims = spec.claims
    if not isinstance(claims, ListConfig):
        raise ConfigError(f"{spec_path}: `claims` must be a list ([] for none), got {claims}.")
    names = [run.get("name") for run in spec.runs if isinstance(run, DictConfig)]
    for i, claim in enumerate(claims):
        where, key_of = f"{spec_path}: `claims[{i}]`", f"{spec_path}: `claims[{i}]."
        if not isinstance(claim, DictConfig) or not set(claim) <= set(CLAIM_KEYS):
            raise ConfigError(f"{where} must be a mapping with keys from {list(CLAIM_KEYS)}.")
        if not isinstance(claim.get("text"), str) or not isinstance(claim.get("metric"), str):
            raise ConfigError(f"{where} needs `text` (the paper's words) and `metric` (a column).")
        for key in ("better", "than"):
            runs = claim.get(key)
            if runs is not None and (
                not isinstance(runs, ListConfig) or not runs or not set(runs) <= set(names)
            ):
                raise ConfigError(
                    f"{key_of}{key}` must be a non-empty list of {names}, got {runs}."
                )
        if claim.get("better") is None or (claim.get("than") is None) == (
            claim.get("at_least") is None
        ):
            raise ConfigError(f"{where} needs `better` and exactly one of `than` or `at_least`.")
        if claim.get("at_least") is not None and not is_number(claim.at_least):
            raise ConfigError(f"{key_of}at_least` must be a number, got {claim.at_least}.")
        than_metric = claim.get("than_metric")
        if than_metric is not None and (
            not isinstance(than_metric, str) or claim.get("than") is None or claim.get("epoch")
        ):
            raise ConfigError(
                f"{key_of}than_metric` is a result column read for the `than` runs (a claim "
                f"with `than` and without `epoch`), got {than_metric}."
            )
        epoch = claim.get("epoch")
        if epoch is not None and not (
            isinstance(epoch, int) and 1 <= epoch <= spec.budget.max_epochs
        ):
            raise ConfigError(
                f"{key_of}epoch` must be an epoch count in 1..{spec.budget.max_epochs}, got "
                f"{epoch}."
            )
        try:
            check_paper_budget(spec, i)
        except ConfigError as err:
            raise ConfigError(f"{spec_path}: {err}") from None


def _rows_at_epoch(results: Sequence[dict], out: Path, column: str, epoch: int) -> list[dict]:
    """Per job, ``column`` of its ``epochs.csv`` in the last logged epoch within the first
    ``epoch`` epochs (NaN when none was logged)."""
    rows = []
    for result in results:
        curve = seed_curves([out / result["job"]], column) if "job" in result else {}
        within = [index for index in curve if index + 1 <= epoch]
        value = curve[max(within)][0] if within else math.nan
        rows.append({"run": result["run"], "method": result.get("method"), column: value})
    return rows


def _compare(
    better: dict,
    metric: str,
    other: Optional[dict] = None,
    other_metric: str = "",
    value: Any = None,
) -> Comparison:
    """``better``'s ``metric`` against ``other``'s ``other_metric`` (or the same), or ``value``."""
    mean = better.get(metric, math.nan)
    std, n = better.get(f"{metric}_std", math.nan), better.get("n_seeds", 1)
    if other is None:  # against a value: two of the run's own standard deviations
        two_std = 2 * std if n >= 2 else math.nan
        return Comparison(better["run"], f"{value:g}", mean - value, two_std)
    other_metric = other_metric or metric
    names = (better["run"], other["run"])
    if other_metric != metric:  # name each side's column
        names = (f"{names[0]} ({metric})", f"{names[1]} ({other_metric})")
    gap = mean - other.get(other_metric, math.nan)
    return Comparison(*names, gap, two_pooled_std(better, other, metric, other_metric))


def _probes_read(*metrics: str) -> list[str]:
    """The words of each probe the ``metrics`` read, once each, in order."""
    words = [next((w for k, w in PROBE_WORDS.items() if m.endswith(k)), None) for m in metrics]
    return list(dict.fromkeys(w for w in words if w is not None))


def _has_value(row: Optional[dict], metric: str) -> bool:
    return row is not None and is_number(row.get(metric)) and not math.isnan(row[metric])


def _overall(outcomes: Sequence[str]) -> str:
    if all(o == HELD for o in outcomes):
        return "held"
    if REVERSED in outcomes:
        return "did not hold"
    return "partly held (the rest not resolved)" if HELD in outcomes else "not resolved"


def _trained(spec: Spec, claim: DictConfig, trained: Mapping[str, Trained]) -> dict[str, Trained]:
    """What each run of the claim trained (its schedule's length, also for a claim read after
    ``epoch`` epochs: a cosine schedule's epoch 50 of 500 is not its epoch 50 of 5000)."""
    names = [*claim.better, *(r for r in claim.get("than") or [] if r not in claim.better)]
    return {run: trained.get(run, Trained(spec.budget.max_epochs)) for run in names}


def claim_lines(
    spec: Spec,
    results: Sequence[dict],
    out: Path,
    trained: Optional[Mapping[str, Trained]] = None,
) -> list[str]:
    """One line per claim: its verdict, every pair's gap against two pooled std and, with
    ``paper_budget``, what was run against what the source ran; ``trained``: each run's training
    (default: the spec's epochs)."""
    lines = []
    for claim in spec.claims:
        ran = _trained(spec, claim, trained or {})
        epoch = claim.get("epoch")
        rows = _rows_at_epoch(results, out, claim.metric, epoch) if epoch else results
        by_run = {row["run"]: row for row in aggregate(rows)}
        than_metric = claim.get("than_metric") or claim.metric
        missing = [run for run in claim.better if not _has_value(by_run.get(run), claim.metric)] + [
            run for run in claim.get("than") or [] if not _has_value(by_run.get(run), than_metric)
        ]
        metric = f"`{claim.metric}`" + (f" after {epoch} epochs" if epoch else "")
        if than_metric != claim.metric:
            metric += f" against `{than_metric}`"
        metric += "".join(f"; {words}" for words in _probes_read(claim.metric, than_metric))
        if missing:
            note = budget_note(claim, "not checked", ran, spec.budget.batch_size)
            lines.append(
                f"- **not checked**: {claim.text} ({metric}): no value for {missing}.{note}"
            )
            continue
        if claim.get("than") is not None:
            pairs = [
                _compare(by_run[a], claim.metric, by_run[b], than_metric)
                for a in claim.better
                for b in claim.than
            ]
        else:
            pairs = [_compare(by_run[a], claim.metric, value=claim.at_least) for a in claim.better]
        verdict = _overall([pair.outcome for pair in pairs])
        details = "; ".join(pair.words() for pair in pairs)
        shown = budget_verdict(claim, verdict, ran)
        note = budget_note(claim, verdict, ran, spec.budget.batch_size)
        lines.append(f"- **{shown}**: {claim.text} ({metric}): {details}.{note}")
    return lines
