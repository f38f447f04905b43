"""A spec's ``claims``: each pair judged against two pooled standard deviations of the seeds, the
claim's overall verdict, and the checks of the ``claims`` key (pure Python, no solo-learn)."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
from omegaconf import OmegaConf

from solo_diet.compare.spec.load import parse_claims
from solo_diet.compare.spec.settings import BudgetSettings, Claim, PaperBudget
from solo_diet.compare.verdicts.claims import Below, Trained, claim_lines
from solo_diet.core.errors import ConfigError


def parse(claims: list, max_epochs: int = 10):
    """``parse_claims`` of the ``claims`` as written, for three runs."""
    runs = ("diet", "simclr", "vicreg")
    return parse_claims(OmegaConf.create(claims), runs, max_epochs, Path("spec.yaml"))


def typed(claim: dict) -> Claim:
    """A claim as the spec holds it, unchecked (most here lack the source's budget the checks
    ask for)."""
    paper_budget = claim.get("paper_budget")
    return Claim(
        **claim
        | {"better": tuple(claim["better"]), "than": tuple(claim.get("than", ()))}
        | {"paper_budget": PaperBudget(**paper_budget) if paper_budget else None}
    )


def spec_with(claims: list, max_epochs: int = 10, batch_size: Optional[int] = None):
    """What ``claim_lines`` reads of a typed spec: its claims and budget."""
    budget = BudgetSettings(max_epochs=max_epochs, batch_size=batch_size)
    return SimpleNamespace(claims=tuple(typed(c) for c in claims), budget=budget)


def results(accuracies: dict[str, list[float]]) -> list[dict]:
    return [
        {"run": run, "seed": seed, "method": run, "linear_acc1": value, "job": f"runs/{run}/{seed}"}
        for run, values in accuracies.items()
        for seed, value in enumerate(values)
    ]


LINEAR_MODEL = "solo-learn's LinearModel probe, SGD for the `linear` config's epochs"


def two_pooled_std(a: list[float], b: list[float]) -> float:
    return 2 * math.sqrt((statistics.variance(a) + statistics.variance(b)) / 2)


def test_each_pair_is_held_reversed_or_not_resolved_by_two_pooled_std(tmp_path):
    accuracies = {
        "diet": [70.0, 71.0, 72.0],
        "simclr": [60.0, 61.0, 62.0],
        "vicreg": [71.0, 73.0, 75.0],
    }
    claim = {"text": "DIET beats the others", "metric": "linear_acc1", "better": ["diet"]}
    spec = spec_with([{**claim, "than": ["simclr", "vicreg"]}])
    [line] = claim_lines(spec, results(accuracies), tmp_path)

    spread = two_pooled_std(accuracies["diet"], accuracies["simclr"])
    # one pair held, one not resolved: the claim is not resolved (its pairs say which held)
    assert line.startswith("- **not resolved**: DIET beats the others")
    assert f"diet − simclr = +10.00 (2 pooled std {spread:.2f}: held)" in line
    spread = two_pooled_std(accuracies["diet"], accuracies["vicreg"])
    assert f"diet − vicreg = -2.00 (2 pooled std {spread:.2f}: not resolved)" in line

    reversed_ = {"diet": [60.0, 60.5, 61.0], "simclr": [70.0, 70.5, 71.0], "vicreg": [50.0] * 3}
    [line] = claim_lines(spec, results(reversed_), tmp_path)
    assert line.startswith("- **did not hold**:") and "diet − simclr = -10.00" in line
    assert "diet − vicreg = +10.50 (2 pooled std 0.71: held)" in line

    one_seed = {"diet": [80.0], "simclr": [60.0], "vicreg": [50.0]}
    [line] = claim_lines(spec, results(one_seed), tmp_path)
    assert line.startswith("- **not resolved**:") and "+20.00 (one seed: not resolved)" in line


def test_at_least_uses_two_of_the_runs_own_std_and_missing_runs_are_named(tmp_path):
    accuracies = {"diet": [70.0, 72.0, 74.0], "simclr": [60.0, 60.0, 60.0]}
    spec = spec_with(
        [
            {"text": "reaches 60", "metric": "linear_acc1", "better": ["diet"], "at_least": 60},
            {"text": "reaches 71", "metric": "linear_acc1", "better": ["diet"], "at_least": 71},
            {
                "text": "beats vicreg",
                "metric": "linear_acc1",
                "better": ["diet"],
                "than": ["vicreg"],
            },
        ]
    )
    held, open_, missing = claim_lines(spec, results(accuracies), tmp_path)
    assert (
        held
        == f"- **held**: reaches 60 (`linear_acc1`; {LINEAR_MODEL}): diet − 60 = +12.00 (2 pooled "
        "std 4.00: held)."
    )
    assert open_.startswith("- **not resolved**: reaches 71") and "+1.00" in open_
    assert missing == (
        f"- **not checked**: beats vicreg (`linear_acc1`; {LINEAR_MODEL}): no value for ['vicreg']."
    )


def test_than_metric_reads_another_column_of_the_other_runs(tmp_path):
    """The SEM paper's protocol: the twin's SEM-representation probe against the baseline's
    backbone probe; the pooled std mixes the two columns' seed spreads."""
    sem_probe, backbone_probe = [99.2, 99.3, 99.1], [98.9, 98.95, 98.85]
    rows = results({"diet": [90.0, 90.0, 90.0], "simclr": backbone_probe})
    for row, value in zip([r for r in rows if r["run"] == "diet"], sem_probe):
        row["sem_linear_acc1"] = value
    claim = {"text": "SEM helps", "metric": "sem_linear_acc1", "better": ["diet"]}
    spec = spec_with([{**claim, "than": ["simclr"], "than_metric": "linear_acc1"}])
    [line] = claim_lines(spec, rows, tmp_path)

    spread = two_pooled_std(sem_probe, backbone_probe)
    assert line == (
        f"- **held**: SEM helps (`sem_linear_acc1` against `linear_acc1`; {LINEAR_MODEL}): diet "
        f"(sem_linear_acc1) − simclr (linear_acc1) = +0.30 (2 pooled std {spread:.2f}: held)."
    )


def test_a_claim_on_the_converged_probe_says_so(tmp_path):
    rows = results({"diet": [70.0, 71.0, 72.0], "simclr": [60.0, 61.0, 62.0]})
    for row in rows:
        row["logreg_acc1"] = row.pop("linear_acc1")
    claim = {"text": "DIET wins", "metric": "logreg_acc1", "better": ["diet"], "than": ["simclr"]}
    [line] = claim_lines(spec_with([claim]), rows, tmp_path)
    assert line.startswith(
        "- **held**: DIET wins (`logreg_acc1`; converged logistic-regression probe on frozen "
        "features): diet − simclr = +10.00"
    )
    spec = spec_with([{**claim, "than": ["vicreg"], "than_metric": "linear_acc1"}])
    [line] = claim_lines(spec, rows, tmp_path)
    assert line.startswith("- **not checked (these results have no `linear_acc1`)**: DIET wins")


def test_a_claim_on_a_metric_the_results_lack_is_not_checked_never_read_on_another(tmp_path):
    """Results computed on solo-learn's probe only: a claim on the converged one says so and
    reads no other column."""
    claim = {"text": "DIET wins", "metric": "logreg_acc1", "better": ["diet"], "than": ["simclr"]}
    spec = spec_with([{**claim, **PAPER}])
    rows = results({"diet": [70.0, 71.0, 72.0], "simclr": [60.0, 61.0, 62.0]})
    [line] = claim_lines(spec, rows, tmp_path)
    assert line.startswith(
        "- **not checked (these results have no `logreg_acc1`)**: DIET wins (`logreg_acc1`; "
        "converged logistic-regression probe on frozen features). Budgets (some runs have no "
        "value): diet 10, simclr 10 epochs"
    )
    assert "diet − simclr" not in line and "+10.00" not in line


def test_an_epoch_claim_reads_the_last_logged_value_within_that_many_epochs(tmp_path):
    curves = {"diet": [[10.0, 50.0, 90.0], [12.0, 52.0, 92.0]], "simclr": [[11.0, 30.0, 95.0]] * 2}
    for run, seeds in curves.items():
        for seed, values in enumerate(seeds):
            folder = tmp_path / "runs" / run / str(seed)
            folder.mkdir(parents=True)
            with (folder / "epochs.csv").open("w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow(["epoch", "val_acc1"])
                writer.writerows([[1, values[0]], [2, ""], [4, values[1]], [9, values[2]]])
    claim = {"text": "faster", "metric": "val_acc1", "better": ["diet"], "than": ["simclr"]}
    accuracies = {"diet": [0.0, 0.0], "simclr": [0.0, 0.0]}
    # two seeds: each gap must also cross the floor of 2000 val images (2.2 and 1.1 points)
    spec = spec_with([{**claim, "epoch": 5}, {**claim, "epoch": 10}])
    [early, late] = claim_lines(spec, results(accuracies), tmp_path, val_images=2000)
    assert early.startswith(
        "- **held**: faster (`val_acc1` after 5 epochs): diet − simclr = +21.00"
    )
    assert late.startswith("- **did not hold**: faster (`val_acc1` after 10 epochs)")
    assert "-4.00" in late
    [early, _] = claim_lines(spec, results(accuracies), tmp_path)  # no val images counted
    assert early.startswith("- **not resolved**:") and "(fewer than 3 seeds: not resolved)" in early


@pytest.mark.parametrize(
    "claim, message",
    [
        ({"text": "x", "metric": "m", "better": ["diet"]}, "exactly one of `than` or `at_least`"),
        (
            {"text": "x", "metric": "m", "better": ["diet"], "than": ["simclr"], "at_least": 1},
            "exactly one of `than` or `at_least`",
        ),
        (
            {"text": "x", "metric": "m", "better": ["dino"], "than": ["simclr"]},
            r"`claims\[0\]\.better` must be a non-empty list",
        ),
        ({"text": "x", "metric": "m", "better": ["diet"], "than": []}, r"`claims\[0\]\.than`"),
        (
            {"text": "x", "metric": "m", "better": ["diet", "simclr"], "than": ["simclr"]},
            r"^spec.yaml: `claims\[0\]\.than` must not name a `better` run, got \[.simclr.\] in",
        ),
        ({"text": "x", "metric": "m", "better": ["diet"], "at_least": "high"}, "a finite number"),
        ({"text": "x", "metric": "m", "better": ["diet"], "at_least": float("nan")}, "finite"),
        ({"text": "x", "metric": "m", "better": ["diet"], "at_least": 1, "epoch": True}, "epoch"),
        ({"metric": "m", "better": ["diet"], "at_least": 1}, "needs `text`"),
        ({"text": "x", "metric": "m", "better": ["diet"], "at_least": 1, "epoch": 11}, r"1\.\.10"),
        ({"text": "x", "metric": "m", "better": ["diet"], "at_least": 1, "runs": 1}, "keys from"),
        (
            {"text": "x", "metric": "m", "better": ["diet"], "at_least": 1, "than_metric": "n"},
            r"`claims\[0\]\.than_metric` is a result column read for the `than` runs",
        ),
    ],
)
def test_bad_claims_name_the_key(claim, message):
    with pytest.raises(ConfigError, match=message):
        parse([claim])
    parse([])


PAPER = {"paper_budget": {"epochs": 5000}, "definition": "DIET paper, Tab. 5: linear probe"}


def test_a_run_may_be_on_both_sides_only_on_two_columns():
    sem = {"text": "x", "metric": "sem_linear_acc1", "better": ["diet"], "than": ["diet"]}
    (claim,) = parse([sem | {"than_metric": "linear_acc1"} | PAPER])
    assert claim.better == claim.than == ("diet",)


SIX_CASES = {
    "held": {"diet": [70.0, 70.5, 71.0], "simclr": [60.0, 60.5, 61.0]},
    "did not hold": {"diet": [60.0, 60.5, 61.0], "simclr": [70.0, 70.5, 71.0]},
    "not resolved": {"diet": [60.0, 65.0, 70.0], "simclr": [61.0, 65.5, 69.0]},
}


@pytest.mark.parametrize("outcome", SIX_CASES)
@pytest.mark.parametrize("epochs", [300, 5000])
def test_one_rule_below_and_at_the_papers_budget(tmp_path, outcome, epochs):
    """The same outcome either side of the paper's budget; below it, stated at the budget run and
    the paper's claim at its budget named not checked."""
    claim = {"text": "parity", "metric": "linear_acc1", "better": ["diet"], "than": ["simclr"]}
    spec = spec_with([{**claim, **PAPER}], max_epochs=epochs, batch_size=256)
    [verdict] = claim_lines(spec, results(SIX_CASES[outcome]), tmp_path)
    below = epochs < 5000
    head = f"{outcome} (at 300 of 5000 epochs)" if below else outcome
    assert verdict.startswith(f"- **{head}**: parity (`linear_acc1`; {LINEAR_MODEL}): diet − ")
    where = (
        "below the source's budget: the paper's claim at its budget is not checked"
        if below
        else "at the source's budget"
    )
    assert verdict.endswith(
        f"Ran: diet {epochs}, simclr {epochs} epochs, batch 256; the source ran 5000 epochs "
        f"({where}). Checked as the source's definition: DIET paper, Tab. 5: linear probe"
    )
    assert "budget-limited" not in verdict


def test_than_epochs_and_a_reading_of_ours_are_named(tmp_path):
    claim = {
        "text": "beats",
        "metric": "linear_acc1",
        "better": ["diet"],
        "than": ["simclr"],
        "paper_budget": {"epochs": 5000, "than_epochs": 1000, "batch_size": 1024},
        "definition": "codes used >= 1000",
        "ours": True,
    }
    spec = spec_with([claim], max_epochs=5000)
    accuracies = {"diet": [60.0, 60.5, 61.0], "simclr": [60.0, 60.5, 61.0]}
    ran = {"diet": Trained(5000), "simclr": Trained(300)}
    [verdict] = claim_lines(spec, results(accuracies), tmp_path, ran)
    assert verdict.startswith(
        "- **not resolved (at 300 of 1000 epochs), a reading of ours**: beats"
    )
    assert "(below the source's budget: this reading at the source's budget is not checked)" in (
        verdict
    )
    failed = {"diet": [50.0, 50.5, 51.0], "simclr": [60.0, 60.5, 61.0]}
    [verdict] = claim_lines(spec, results(failed), tmp_path, ran)
    assert verdict.startswith("- **not met (at 300 of 1000 epochs), a reading of ours**: beats")
    assert "the source ran 5000 epochs (diet), 1000 (the rest), batch 1024" in verdict
    assert verdict.endswith("Checked as a reading of ours: codes used >= 1000")


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"paper_budget": None}, r"`claims\[0\]\.paper_budget\.epochs` must be a positive"),
        ({"paper_budget": {"steps": 10}}, r"`claims\[0\]\.paper_budget\.epochs` must be a"),
        ({"paper_budget": 5}, r"`claims\[0\]\.paper_budget` must be a mapping"),
        ({"paper_budget": {"epochs": 0}}, r"`claims\[0\]\.paper_budget\.epochs` must be a"),
        ({"paper_budget": {"epochs": 5, "steps": 0}}, r"paper_budget\.steps` must be a positive"),
        (
            {"paper_budget": {"epochs": 5, "step": 9}},
            r"paper_budget\.step` is not a setting of `paper_budget`",
        ),
        ({"paper_budget": {"epochs": 5, "steps": 9, "samples": 9}}, r"both given: name one"),
        ({"paper_budget": {"epochs": 5, "than_epochs": 5}}, r"than_epochs` is the budget of"),
        ({"definition": None}, r"`claims\[0\]\.definition` must be the source's own reading"),
        ({"ours": "yes"}, r"`claims\[0\]\.ours` must be True or False"),
    ],
)
def test_bad_paper_budgets_name_the_key(extra, message):
    claim = {"text": "x", "metric": "m", "better": ["diet"], "at_least": 1, **PAPER}
    parse([claim])
    with pytest.raises(ConfigError, match=message):
        parse([{**claim, **extra}])


def test_a_reading_of_ours_at_the_papers_budget_is_not_met_never_did_not_hold(tmp_path):
    claim = {"text": "wide", "metric": "linear_acc1", "better": ["diet"], "at_least": 90, **PAPER}
    spec = spec_with([{**claim, "ours": True}], max_epochs=5000)
    [verdict] = claim_lines(
        spec, results({"diet": [60.0, 60.5, 61.0]}), tmp_path, {"diet": Trained(5000)}
    )
    assert verdict.startswith("- **not met, a reading of ours**: wide")
    assert "did not hold" not in verdict and "Checked as a reading of ours" in verdict


def test_epochs_on_a_smaller_dataset_state_the_share_of_the_papers_steps(tmp_path):
    # the CPLearn paper's ResNet-8: 200 epochs of CIFAR-10 at batch 64; ours 200 of 8 000 images
    claim = {"text": "codes", "metric": "linear_acc1", "better": ["cp"], "at_least": 10}
    budget = {"epochs": 200, "steps": 156250, "batch_size": 64}
    spec = spec_with([{**claim, "paper_budget": budget, "definition": "Tab. 9"}], max_epochs=200)
    ran = {"cp": Trained(200, steps=25000, samples=1_600_000)}
    [verdict] = claim_lines(spec, results({"cp": [60.0, 60.5, 61.0]}), tmp_path, ran)
    # equal epochs, 16 % of the steps: below the source's budget, never "at" it
    assert verdict.startswith(
        "- **held (at 200 of 200 epochs; 25k of the paper's 156k steps, 16 %)**: codes"
    )
    assert "the source ran 200 epochs (156,250 steps), batch 64 (below the source's" in verdict

    failed = {"cp": [5.0, 5.5, 6.0]}
    [verdict] = claim_lines(spec, results(failed), tmp_path, ran)
    assert verdict.startswith("- **did not hold (at 200 of 200 epochs; 25k of the paper's 156k")

    # the paper's samples, a than run's scaled to its than_epochs; steps not counted: epochs only
    budget = {"epochs": 5000, "than_epochs": 1000, "samples": 250_000_000}
    claim = {"text": "beats", "metric": "linear_acc1", "better": ["diet"], "than": ["simclr"]}
    spec = spec_with([{**claim, "paper_budget": budget, "definition": "Tab. 2"}])
    ran = {"diet": Trained(500, 15500, 3_968_000), "simclr": Trained(1000, 31000, 7_936_000)}
    accuracies = {"diet": [70.0, 70.5, 71.0], "simclr": [60.0, 60.5, 61.0]}
    [verdict] = claim_lines(spec, results(accuracies), tmp_path, ran)
    assert verdict.startswith(
        "- **held (at diet 500 of 5000 epochs; 3.97M of the paper's 250M samples, 1.6 %; simclr "
        "1000 of 1000 epochs; 7.94M of the paper's 50M samples, 16 %)**: beats"
    )
    assert "the source ran 5000 epochs (diet; 250,000,000 samples), 1000 (the rest) (" in verdict
    ran = {"diet": Trained(500), "simclr": Trained(1000)}
    [verdict] = claim_lines(spec, results(accuracies), tmp_path, ran)
    assert verdict.startswith("- **held (at 500 of 5000 epochs)**: beats")


def test_step_counts_read_in_three_significant_digits():
    below = Below("run", 1, 2, 999_999, 1_757_813)
    assert below.words("steps") == "1 of 2 epochs; 1M of the paper's 1.76M steps, 57 %"
    assert (
        Below("run", 5, 5, 9, 1000).words("samples")
        == "5 of 5 epochs; 9 of the paper's 1k samples, 0.9 %"
    )
