"""A spec's ``claims``: what a paper says of some runs, checked against the comparison's seeds
like the report's † marks (docs/compare.md, "Claims"): held, did not hold or not resolved, below
its source's budget at the budget it ran (:mod:`.paper_budget`)."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path
from typing import Mapping, Optional, Sequence

from omegaconf import DictConfig, ListConfig

from solo_diet.compare.aggregate import Gap, aggregate, gap, is_number
from solo_diet.compare.paper_budget import (
    Claim,
    Trained,
    budget_note,
    budget_verdict,
    check_paper_budget,
)
from solo_diet.compare.record import seed_curves
from solo_diet.compare.spec_checks import Spec
from solo_diet.config import ConfigError

CLAIM_KEYS = tuple(field.name for field in fields(Claim))
HELD, REVERSED, OPEN = "held", "reversed", "not resolved"
# which probe a claim's verdict reads (by the column's ending: `sem_linear_acc1` is solo-learn's
# probe too), said in its line
PROBE_WORDS = {
    "logreg_acc1": "converged logistic-regression probe on frozen features",
    "linear_acc1": "solo-learn's LinearModel probe, SGD for the `linear` config's epochs",
}


def _words(pair: Gap, names: tuple[str, str]) -> str:
    outcome = {1: HELD, -1: REVERSED, 0: OPEN}[pair.sign]
    return f"{names[0]} − {names[1]} = {pair.gap:+.2f} ({pair.spread()}: {outcome})"


def parse_claims(spec: DictConfig, spec_path: str | Path) -> tuple[Claim, ...]:
    """The spec's claims, typed: each has a text, a metric, ``better`` runs and one of ``than``
    (runs, optionally read on ``than_metric``) or ``at_least``; ``epoch`` is within the budget. A
    metric no result has shows in the report as ``not checked``."""
    claims = spec.claims
    if not isinstance(claims, ListConfig):
        raise ConfigError(f"{spec_path}: `claims` must be a list ([] for none), got {claims}.")
    names = [run.get("name") for run in spec.runs if isinstance(run, DictConfig)]
    parsed = []
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
            paper_budget, source = check_paper_budget(spec, i)
        except ConfigError as err:
            raise ConfigError(f"{spec_path}: {err}") from None
        given = {key: claim.get(key) for key in ("text", "metric", "than_metric", "at_least")}
        runs = {key: tuple(claim.get(key) or ()) for key in ("better", "than")}
        parsed.append(Claim(**given, **runs, epoch=epoch, paper_budget=paper_budget, **source))
    return tuple(parsed)


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


def _compare(claim: Claim, by_run: dict, val_images: Optional[int]) -> list[tuple[int, str]]:
    """Each pair's outcome (:attr:`Gap.sign`) and words: every ``better`` run against every
    ``than`` run (``than_metric`` for those, each side's column named where it differs) or
    against ``at_least``."""
    metric, than_metric = claim.metric, claim.than_metric or claim.metric
    pairs = []
    for a in claim.better:
        for b in claim.than or [None]:
            other = by_run[b] if b else None
            pair = gap(by_run[a], metric, other, than_metric, claim.at_least, val_images)
            names = (pair.better, pair.other)
            if than_metric != metric:
                names = (f"{names[0]} ({metric})", f"{names[1]} ({than_metric})")
            pairs.append((pair.sign, _words(pair, names)))
    return pairs


def _probes_read(*metrics: str) -> list[str]:
    """The words of each probe the ``metrics`` read, once each, in order."""
    words = [next((w for k, w in PROBE_WORDS.items() if m.endswith(k)), None) for m in metrics]
    return list(dict.fromkeys(w for w in words if w is not None))


def _has_value(row: Optional[dict], metric: str) -> bool:
    return row is not None and is_number(row.get(metric)) and not math.isnan(row[metric])


def _overall(signs: Sequence[int]) -> str:
    """``held`` when every pair held, ``did not hold`` when one reversed, else ``not resolved``."""
    if all(sign == 1 for sign in signs):
        return "held"
    return "did not hold" if -1 in signs else "not resolved"


def _trained(spec: Spec, claim: Claim, trained: Mapping[str, Trained]) -> dict[str, Trained]:
    """What each run of the claim trained (its schedule's length, also for a claim read after
    ``epoch`` epochs: a cosine schedule's epoch 50 of 500 is not its epoch 50 of 5000)."""
    names = [*claim.better, *(r for r in claim.than if r not in claim.better)]
    return {run: trained.get(run, Trained(spec.budget.max_epochs)) for run in names}


def claim_lines(
    spec: Spec,
    results: Sequence[dict],
    out: Path,
    trained: Optional[Mapping[str, Trained]] = None,
    val_images: Optional[int] = None,
) -> list[str]:
    """One line per claim: its verdict, every pair's gap against its threshold (two pooled std,
    floored with few seeds: ``val_images``) and, with ``paper_budget``, what was run against what
    the source ran; ``trained``: each run's training (default: the spec's epochs)."""
    lines = []
    for claim in spec.claims:
        ran = _trained(spec, claim, trained or {})
        epoch = claim.epoch
        rows = _rows_at_epoch(results, out, claim.metric, epoch) if epoch else results
        by_run = {row["run"]: row for row in aggregate(rows)}
        than_metric = claim.than_metric or claim.metric
        metric = f"`{claim.metric}`" + (f" after {epoch} epochs" if epoch else "")
        if than_metric != claim.metric:
            metric += f" against `{than_metric}`"
        metric += "".join(f"; {words}" for words in _probes_read(claim.metric, than_metric))
        note = budget_note(claim, "not checked", ran, spec.budget.batch_size)
        absent = [m for m in (claim.metric, than_metric) if not any(_has_value(r, m) for r in rows)]
        if absent:
            lines.append(
                f"- **not checked (these results have no `{absent[0]}`)**: {claim.text} "
                f"({metric}).{note}"
            )
            continue
        missing = [run for run in claim.better if not _has_value(by_run.get(run), claim.metric)] + [
            run for run in claim.than if not _has_value(by_run.get(run), than_metric)
        ]
        if missing:
            lines.append(
                f"- **not checked**: {claim.text} ({metric}): no value for {missing}.{note}"
            )
            continue
        pairs = _compare(claim, by_run, val_images)
        verdict = _overall([sign for sign, _ in pairs])
        details = "; ".join(words for _, words in pairs)
        shown = budget_verdict(claim, verdict, ran)
        note = budget_note(claim, verdict, ran, spec.budget.batch_size)
        lines.append(f"- **{shown}**: {claim.text} ({metric}): {details}.{note}")
    return lines
