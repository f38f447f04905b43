"""report.md's verdict lines from results, no training: reference rows judged by the runs' rule,
the few-seeds floor stated and applied, a report without a reference row saying so first, the
budget line naming only the runs that ran, and ``notes.md`` under the claims."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from solo_diet.compare.plan.budgets import RunBudget
from solo_diet.compare.report import curves as plots
from solo_diet.compare.report.markdown import write_report
from solo_diet.compare.spec.load import load_spec
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

VAL_IMAGES = 15  # the tiny data: 5 classes of 3 val images


def rows(run: str, values: list[float], seeded: bool = True) -> list[dict]:
    return [
        {"run": run, "seed": seed if seeded else None, "method": run, "linear_acc1": value}
        for seed, value in enumerate(values)
    ]


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "plots_available", lambda: False)
    root = write_tiny_images(tmp_path / "images")
    runs = "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]"
    return load_spec(SHIPPED_SPEC, [*tiny_overrides(root, tmp_path / "out"), runs, "seeds=[0,1]"])


def test_reference_rows_are_read_by_the_runs_rule_with_the_floor_of_two_seeds(spec, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.md").write_text("> A note of this report.\n")
    results = rows("diet", [20.5, 21.0]) + rows("simclr", [80.0, 80.0])
    results += rows("random_init", [19.0, 23.0]) + rows("raw_pixels", [20.0], seeded=False)
    budget = RunBudget(2, 1, 8, "epochs", "the spec's budget", 2)
    budgets = {"diet": budget, "simclr": budget, "vicreg": budget}
    lines = write_report(spec, results, out, budgets=budgets).read_text().splitlines()

    def floor(a: float, b: float) -> float:
        p = (a + b) / 200
        return 200 * math.sqrt(p * (1 - p) / VAL_IMAGES)

    # raw_pixels, which no seed changes: two of each run's own std, floored with two seeds
    diet_std = 2 * math.sqrt(0.125)
    assert (
        f"- `linear_acc1` of `raw_pixels`: 20.00; above it: simclr +60.00 (2 pooled std 0.00, "
        f"floor {floor(80, 20):.2f}); not resolved: diet +0.75 (2 pooled std {diet_std:.2f}, "
        f"floor {floor(20.75, 20):.2f})." in lines
    )
    # random_init, seeded: two pooled std of the two rows' seeds
    pooled = 2 * math.sqrt((0.125 + 8.0) / 2)
    assert (
        f"- `linear_acc1` of `random_init`: 21.00 ± 2.83; above it: simclr +59.00 (2 pooled std "
        f"4.00, floor {floor(80, 21):.2f}); not resolved: diet -0.25 (2 pooled std "
        f"{pooled:.2f}, floor {floor(20.75, 21):.2f})." in lines
    )
    assert any("two standard errors of the accuracy on the 15 val images" in li for li in lines)
    assert "> A note of this report." in lines
    [budget_line] = [li for li in lines if li.startswith("Budget (epoch-matched)")]
    assert "`diet`" in budget_line and "`simclr`" in budget_line and "vicreg" not in budget_line


def test_a_report_without_its_reference_rows_says_so_first(spec, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    results = rows("diet", [20.5, 21.0]) + rows("simclr", [80.0, 80.0])
    lines = write_report(spec, results, out).read_text().splitlines()
    assert lines[2] == (
        "**Reference rows missing**: `random_init`, `raw_pixels` have no result here (left out by "
        "`only=`, or not run yet): no run is read against them."
    )
    lines = write_report(replace(spec, reference_rows=()), results, out).read_text().splitlines()
    assert lines[2].startswith("**No reference rows** (`reference_rows: []`)")
