"""A claim's source budget and definition, and the verdict they allow.

Every claim of a spec carries ``paper_budget`` (what its source trained: ``epochs``, optionally
``than_epochs`` for the runs it was compared against, and ``batch_size``) and ``definition`` (the
source's own reading of the claim, in its words, or ours labelled ``ours: true``). A claim checked
below its source's budget never reads "did not hold": it reads ``budget-limited (X of Y epochs)``
with the gaps it had, and "held" only says at how much of the budget it held. Only a claim
checked at its source's budget and definition can fail ("did not hold"); a reading of ours that
fails at that budget is "not met, a reading of ours".
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from omegaconf import DictConfig

from solo_diet.config import ConfigError

PAPER_BUDGET_KEYS = ("epochs", "than_epochs", "batch_size")
# what the gaps of a claim that did not hold were, in words that decide nothing
AT_THIS_BUDGET = {
    "did not hold": "reversed (one or more)",
    "not resolved": "not resolved",
    "partly held (the rest not resolved)": "partly resolved",
    "not checked": "not measured",
}


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_paper_budget(claim: DictConfig, key_of: str) -> None:
    """``paper_budget``: a mapping of positive integers, ``epochs`` required, ``than_epochs`` only
    with ``than``; ``definition``: text; ``ours``: a boolean."""
    budget = claim.get("paper_budget")
    if (
        not isinstance(budget, DictConfig)
        or "epochs" not in budget
        or not set(budget) <= set(PAPER_BUDGET_KEYS)
        or not all(_positive_int(v) for v in budget.values())
    ):
        raise ConfigError(
            f"{key_of}paper_budget` must be the source's budget, a mapping of positive integers "
            f"with `epochs` and optionally {list(PAPER_BUDGET_KEYS[1:])} (e.g. `paper_budget: "
            f"{{epochs: 5000}}`); got {budget}."
        )
    if "than_epochs" in budget and claim.get("than") is None:
        raise ConfigError(
            f"{key_of}paper_budget.than_epochs` is the budget of the `than` runs; this claim has "
            "none (remove it, or compare with `than`)."
        )
    if not isinstance(claim.get("definition"), str) or not claim.definition.strip():
        raise ConfigError(
            f"{key_of}definition` must be the source's own reading of the claim (its words, with "
            f"figure or table), or ours with `ours: true`; got {claim.get('definition')}."
        )
    if not isinstance(claim.get("ours", False), bool):
        raise ConfigError(
            f"{key_of}ours` must be true (the reading is ours, not the paper's) or false; got "
            f"{claim.get('ours')}."
        )


def paper_epochs(claim: DictConfig, run: str) -> int:
    """The source's epochs for ``run``: ``than_epochs`` for a ``than`` run where given."""
    budget = claim.paper_budget
    if run in (claim.get("than") or []) and run not in claim.better:
        return int(budget.get("than_epochs", budget.epochs))
    return int(budget.epochs)


def below_budget(claim: DictConfig, ran: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """``(run, epochs run, paper's epochs)`` of the claim's runs trained below the paper."""
    runs = [*claim.better, *(r for r in claim.get("than") or [] if r not in claim.better)]
    pairs = [(run, ran[run], paper_epochs(claim, run)) for run in runs if run in ran]
    return [(run, done, paper) for run, done, paper in pairs if done < paper]


def _limits(below: list[tuple[str, int, int]]) -> str:
    if len({(done, paper) for _, done, paper in below}) == 1:
        _, done, paper = below[0]
        return f"{done} of {paper} epochs"
    return ", ".join(f"{run} {done} of {paper} epochs" for run, done, paper in below)


def budget_verdict(claim: DictConfig, verdict: str, ran: Mapping[str, int]) -> str:
    """The verdict with the budget: ``budget-limited (X of Y epochs)`` for a claim that did not
    hold below the paper's budget, ``held (at X of Y epochs)`` for one that held there."""
    if claim.get("paper_budget") is None:
        return verdict
    below = below_budget(claim, ran)
    if not below:
        shown = "not met" if claim.get("ours") and verdict == "did not hold" else verdict
    elif verdict == "held":
        shown = f"held (at {_limits(below)})"
    else:
        shown = f"budget-limited ({_limits(below)})"
    return f"{shown}, a reading of ours" if claim.get("ours") else shown


def budget_note(
    claim: DictConfig, verdict: str, ran: Mapping[str, int], batch_size: Optional[int]
) -> str:
    """The end of the claim's line: what was run against what the source ran, at what
    definition, and, when budget-limited, what the gaps read at this budget."""
    if claim.get("paper_budget") is None:
        return ""
    budget = claim.paper_budget
    runs = ", ".join(f"{run} {epochs}" for run, epochs in ran.items())
    paper = f"{budget.epochs} epochs"
    if "than_epochs" in budget:
        better = ", ".join(claim.better)
        paper = f"{budget.epochs} epochs ({better}), {budget.than_epochs} (the rest)"
    if "batch_size" in budget:
        paper += f", batch {budget.batch_size}"
    below = below_budget(claim, ran)
    at = (
        f"below the source's budget: at this budget the gaps were {AT_THIS_BUDGET[verdict]}, "
        "which does not decide the claim"
        if below and verdict in AT_THIS_BUDGET
        else ("below the source's budget" if below else "at the source's budget")
    )
    whose = "a reading of ours" if claim.get("ours") else "the source's definition"
    ran_words = "Budgets (some runs have no value)" if verdict == "not checked" else "Ran"
    return (
        f" {ran_words}: {runs} epochs, batch {batch_size}; the source ran {paper} ({at}). "
        f"Checked as {whose}: {claim.definition.strip()}"
    )
