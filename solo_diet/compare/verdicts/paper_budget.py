"""A claim's source budget and how its verdict names it (docs/compare.md, "Claims")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from solo_diet.core.settings import setting

EXAMPLE = (
    "(e.g. `paper_budget: {epochs: 5000, steps: 977000, batch_size: 256}`: steps or samples are "
    "the paper's for those epochs)"
)


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


@dataclass(frozen=True)
class PaperBudget:
    """A claim's ``paper_budget``: the source's epochs and steps or samples for them."""

    epochs: int = setting(None, minimum=1, hint=EXAMPLE)
    than_epochs: Optional[int] = setting(None, minimum=1)
    batch_size: Optional[int] = setting(None, minimum=1)
    steps: Optional[int] = setting(None, minimum=1)
    samples: Optional[int] = setting(None, minimum=1)


@dataclass(frozen=True)
class Claim:
    """One of a spec's ``claims``: ``better`` runs against ``than`` runs or ``at_least``."""

    text: str
    metric: str
    better: tuple[str, ...]
    than: tuple[str, ...] = ()
    than_metric: Optional[str] = None
    at_least: Optional[float] = None
    epoch: Optional[int] = None
    paper_budget: Optional[PaperBudget] = None
    definition: str = ""
    ours: bool = False


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
