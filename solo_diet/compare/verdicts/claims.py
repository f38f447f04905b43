"""A spec's ``claims`` checked against the seeds like the † marks (docs/compare.md, "Claims")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Optional, Sequence

from solo_diet.compare.run.record import seed_curves
from solo_diet.compare.spec.settings import Spec
from solo_diet.compare.verdicts.aggregate import aggregate, gap, has_value
from solo_diet.compare.verdicts.paper_budget import Claim, Trained, budget_note, budget_verdict

# which probe a claim's verdict reads (by the column's ending: `sem_linear_acc1` is solo-learn's
# probe too), said in its line
PROBE_WORDS = {
    "logreg_acc1": "converged logistic-regression probe on frozen features",
    "linear_acc1": "solo-learn's LinearModel probe, SGD for the `linear` config's epochs",
}


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
