"""A spec's ``claims`` checked against the seeds like the † marks, each verdict naming the source's
budget it was reached at (docs/compare.md, "Claims")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from solo_diet.compare.run.record import seed_curves
from solo_diet.compare.spec.settings import Claim, Spec
from solo_diet.compare.verdicts.aggregate import aggregate, gap, has_value

# which probe a claim's verdict reads (by the column's ending: `sem_linear_acc1` is solo-learn's
# probe too), said in its line
PROBE_WORDS = {
    "logreg_acc1": "converged logistic-regression probe on frozen features",
    "linear_acc1": "solo-learn's LinearModel probe, SGD for the `linear` config's epochs",
}


@dataclass(frozen=True)
class Trained:
    """What a run trained: epochs and, where its data was counted, steps and images drawn."""

    epochs: int
    steps: Optional[int] = None
    samples: Optional[int] = None


@dataclass(frozen=True)
class Below:
    """A run trained below its source: epochs and, where both are known, steps (samples)."""

    run: str
    epochs: int
    paper_epochs: int
    count: Optional[int]  # the run's steps (samples), where counted and the source named them
    paper_count: Optional[int]

    def words(self, unit: str) -> str:
        text = f"{self.epochs} of {self.paper_epochs} epochs"
        if self.count is None or self.paper_count is None:
            return text
        share = 100 * self.count / self.paper_count
        share_text = f"{share:.0f}" if share >= 10 else f"{share:.2g}"
        return (
            f"{text}; {_short(self.count)} of the paper's {_short(self.paper_count)} {unit}, "
            f"{share_text} %"
        )


def _short(count: int) -> str:
    rounded = float(f"{count:.3g}")
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if rounded >= size:
            return f"{rounded / size:g}{suffix}"
    return f"{rounded:g}"


def _unit(claim: Claim) -> Optional[str]:  # the count the source named besides its epochs
    return next((u for u in ("steps", "samples") if getattr(claim.paper_budget, u)), None)


def below_budget(claim: Claim, ran: Mapping[str, Trained]) -> list[Below]:
    """The runs of ``ran`` below the source's budget, in epochs or steps (samples)."""
    unit, budget = _unit(claim), claim.paper_budget
    below = []
    for run, trained in ran.items():
        than_only = run in claim.than and run not in claim.better
        epochs = (budget.than_epochs or budget.epochs) if than_only else budget.epochs
        count = paper_count = None
        if unit and getattr(trained, unit) is not None:
            count = getattr(trained, unit)
            paper_count = round(getattr(budget, unit) * epochs / budget.epochs)
        item = Below(run, trained.epochs, epochs, count, paper_count)
        if item.epochs < item.paper_epochs or (count is not None and count < paper_count):
            below.append(item)
    return below


def budget_verdict(claim: Claim, verdict: str, ran: Mapping[str, Trained]) -> str:
    """The verdict with the budget it was reached at, where below the source's."""
    if claim.paper_budget is None:
        return verdict
    shown = "not met" if claim.ours and verdict == "did not hold" else verdict
    below, unit = below_budget(claim, ran), _unit(claim) or "steps"
    if below and verdict != "not checked":  # one budget, or each run's
        joint = "; " if any(item.count is not None for item in below) else ", "
        each = {item.words(unit) for item in below}
        each = each if len(each) == 1 else [f"{item.run} {item.words(unit)}" for item in below]
        shown = f"{shown} (at {joint.join(each)})"
    return f"{shown}, a reading of ours" if claim.ours else shown


def budget_note(
    claim: Claim, verdict: str, ran: Mapping[str, Trained], batch_size: Optional[int]
) -> str:
    """The end of the claim's line: what was run against what the source ran, and its definition."""
    if claim.paper_budget is None:
        return ""
    budget = claim.paper_budget
    runs = ", ".join(f"{run} {trained.epochs}" for run, trained in ran.items())
    unit = _unit(claim)
    counted = f"{getattr(budget, unit):,} {unit}" if unit else ""
    paper = f"{budget.epochs} epochs" + (f" ({counted})" if counted else "")
    if budget.than_epochs is not None:
        better = ", ".join(claim.better) + (f"; {counted}" if counted else "")
        paper = f"{budget.epochs} epochs ({better}), {budget.than_epochs} (the rest)"
    if budget.batch_size is not None:
        paper += f", batch {budget.batch_size}"
    below = below_budget(claim, ran)
    there = "this reading at the source's" if claim.ours else "the paper's claim at its"
    at = (
        f"below the source's budget: {there} budget is not checked"
        if below
        else "at the source's budget"
    )
    whose = "a reading of ours" if claim.ours else "the source's definition"
    ran_words = "Budgets (some runs have no value)" if verdict == "not checked" else "Ran"
    return (
        f" {ran_words}: {runs} epochs, batch {batch_size}; the source ran {paper} ({at}). "
        f"Checked as {whose}: {claim.definition.strip()}"
    )


def _rows_at_epoch(results: Sequence[dict], out: Path, column: str, epoch: int) -> list[dict]:
    rows = []  # per job, its epochs.csv's column in the last logged epoch within ``epoch``
    for result in results:
        curve = seed_curves([out / result["job"]], column) if "job" in result else {}
        within = [index for index in curve if index + 1 <= epoch]
        value = curve[max(within)][0] if within else math.nan
        rows.append({"run": result["run"], "method": result.get("method"), column: value})
    return rows


def _compare(claim: Claim, by_run: dict, val_images: Optional[int]) -> tuple[str, str]:
    """The verdict and the words of each ``better`` run against each ``than`` or ``at_least``."""
    metric, than_metric = claim.metric, claim.than_metric or claim.metric
    signs, pairs = set(), []
    for a in claim.better:
        for b in claim.than or [None]:
            other = by_run[b] if b else None
            pair = gap(by_run[a], metric, other, than_metric, claim.at_least, val_images)
            names = (pair.better, pair.other)
            if than_metric != metric:
                names = (f"{names[0]} ({metric})", f"{names[1]} ({than_metric})")
            outcome = {1: "held", -1: "reversed", 0: "not resolved"}[pair.sign]
            signs.add(pair.sign)
            pairs.append(f"{names[0]} − {names[1]} = {pair.gap:+.2f} ({pair.spread()}: {outcome})")
    verdict = "held" if signs == {1} else "did not hold" if -1 in signs else "not resolved"
    return verdict, "; ".join(pairs)


def claim_lines(
    spec: Spec,
    results: Sequence[dict],
    out: Path,
    trained: Optional[Mapping[str, Trained]] = None,
    val_images: Optional[int] = None,
) -> list[str]:
    """One line per claim: its verdict, each pair's gap and threshold, and its budget note."""
    lines = []
    for claim in spec.claims:
        # each run's schedule's length, also for a claim read after `epoch` epochs
        names = [*claim.better, *(r for r in claim.than if r not in claim.better)]
        ran = {run: (trained or {}).get(run, Trained(spec.budget.max_epochs)) for run in names}
        epoch = claim.epoch
        rows = _rows_at_epoch(results, out, claim.metric, epoch) if epoch else results
        by_run = {row["run"]: row for row in aggregate(rows)}
        than_metric = claim.than_metric or claim.metric
        metric = f"`{claim.metric}`" + (f" after {epoch} epochs" if epoch else "")
        if than_metric != claim.metric:
            metric += f" against `{than_metric}`"
        probes = [
            next((w for k, w in PROBE_WORDS.items() if m.endswith(k)), None)
            for m in (claim.metric, than_metric)
        ]
        metric += "".join(f"; {words}" for words in dict.fromkeys(w for w in probes if w))
        absent = [m for m in (claim.metric, than_metric) if not any(has_value(r, m) for r in rows)]
        missing = [run for run in claim.better if not has_value(by_run.get(run), claim.metric)]
        missing += [run for run in claim.than if not has_value(by_run.get(run), than_metric)]
        verdict = shown = "not checked"
        if absent:
            shown, details = f"not checked (these results have no `{absent[0]}`)", ""
        elif missing:
            details = f": no value for {missing}"
        else:
            verdict, details = _compare(claim, by_run, val_images)
            shown, details = budget_verdict(claim, verdict, ran), f": {details}"
        note = budget_note(claim, verdict, ran, spec.budget.batch_size)
        lines.append(f"- **{shown}**: {claim.text} ({metric}){details}.{note}")
    return lines
