"""``budget.samples`` end to end: a one-view run (DIET) and a two-view run (SimCLR) of a tiny CPU
comparison train the same number of forward-backward samples, views counted, and the report says
which budget matched; a run's own ``budget`` and the budget's checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import run_compare
from solo_diet.compare.plan.jobs import plan_jobs
from solo_diet.compare.spec.load import load_spec
from solo_diet.compare.verdicts.claims import Trained
from solo_diet.core.errors import ConfigError
from solo_diet.launch.callbacks import read_epoch_rows
from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images

pytestmark = pytest.mark.solo

RUNS = "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr}]"
# 30 train images, batch 4, 2 batches an epoch: 8 images an epoch
SAMPLES = 32


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("images"))


def overrides(data_root: Path, out: Path, *extra: str) -> list[str]:
    return tiny_overrides(data_root, out) + ["reference_rows=[]", RUNS, *extra]


def test_one_and_two_view_runs_train_the_same_samples(data_root, tmp_path):
    out = tmp_path / "out"
    extra = ("budget.max_epochs=4", f"budget.samples={SAMPLES}")
    report = run_compare(SHIPPED_SPEC, overrides(data_root, out, *extra)).read_text()

    views = {"diet": 1, "simclr": 2}
    trained = {}
    for run, count in views.items():
        rows = read_epoch_rows(out / "runs" / run / "epochs.csv")
        trained[run] = sum(row["samples"] for row in rows) * count  # images x views
        assert len(rows) == SAMPLES // (8 * count)  # DIET 4 epochs, SimCLR 2
    assert trained == {"diet": SAMPLES, "simclr": SAMPLES}
    assert f"Budget (compute-matched: {SAMPLES} forward-backward samples, views counted)" in report
    assert "`diet`: 4 epochs (1 view per image, 32 samples" in report
    assert "`simclr`: 2 epochs (2 views per image, 32 samples" in report


def test_a_runs_own_budget_sets_its_epochs_and_intervals(data_root, tmp_path):
    runs = "runs=[{name: diet, config_name: diet, budget: {max_epochs: 2}},"
    runs += " {name: simclr, config_name: simclr, budget: {samples: 32}}]"
    spec = load_spec(SHIPPED_SPEC, overrides(data_root, tmp_path, "budget.max_epochs=6", runs))
    jobs = {job.name: job for job in plan_jobs(spec)}
    assert jobs["diet"].cfg.max_epochs == 2 and jobs["diet"].budget.matched == "epochs"
    assert jobs["simclr"].cfg.max_epochs == 2 and jobs["simclr"].budget.samples == 32
    assert jobs["simclr"].budget.matched == "samples"
    assert jobs["simclr"].cfg.checkpoint.frequency == 1  # a tenth of its own 2 epochs, rounded up
    # what the claims' verdicts weigh against a paper's steps: 2 batches of 4 an epoch
    assert jobs["diet"].budget.trained() == Trained(epochs=2, steps=4, samples=16)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["budget.samples=0"], r"`budget.samples` must be a positive integer, got 0"),
        (["budget.samples=400"], r"take 50 epochs .* above `budget.max_epochs` 2"),
        (
            ["budget.batch_size=31"],
            r"^`budget.batch_size` must leave one batch an epoch, got 31: .* holds 30 images, "
            r"batches of 31 per device on 1 device\(s\); lower it\.$",
        ),
        (
            ["budget.limit_train_batches=0.1"],
            r"^`budget.limit_train_batches` must leave one batch an epoch, got 0.1: .*; raise it",
        ),
        (
            ["budget.samples=3"],
            r"^`budget.samples` must be at least half an epoch of run 'diet' \(8 images x 1 views "
            r"= 8 samples\), got 3: raise it\.$",
        ),
        (
            ["runs=[{name: diet, config_name: diet, budget: {epochs: 3}}]"],
            r"run 'diet': `budget` must be a mapping with one of \['max_epochs', 'samples'\]",
        ),
        (
            ["runs=[{name: diet, config_name: diet, budget: {max_epochs: 3}}]"],
            r"`budget.max_epochs` 3 is above the spec's `budget.max_epochs` 2",
        ),
    ],
)
def test_bad_budgets_name_the_key(data_root, tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message):
        spec = load_spec(SHIPPED_SPEC, tiny_overrides(data_root, tmp_path) + extra)
        plan_jobs(spec)
