"""``solo-diet compare`` with its jobs in 2 CPU worker processes: a failed job, logs, and a resume
in which the jobs finish out of order."""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from solo_diet.compare import run_compare
from solo_diet.compare.run.runner import JobsFailed
from solo_diet.core.errors import ConfigError
from tests._helpers.compare import (
    SHIPPED_SPEC,
    interrupt_after_first_epoch,
    tiny_overrides,
    write_tiny_images,
)

pytestmark = pytest.mark.solo

RUNS = "{name: diet, config_name: diet}, {name: simclr, config_name: simclr}"
# passes every check before training, then torch refuses the projector's width in the worker
BROKEN = "{name: broken, config_name: simclr, overrides: [method_kwargs.proj_hidden_dim=-1]}"


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return write_tiny_images(tmp_path_factory.mktemp("images"))


def overrides(data_root: Path, output_dir: Path, runs: str) -> list[str]:
    return tiny_overrides(data_root, output_dir) + [
        "reference_rows=[raw_pixels]",
        "parallel.workers=2",
        f"runs=[{runs}]",
    ]


def report_runs(out: Path) -> list[str]:
    with (out / "results.csv").open() as f:
        return [row["run"] for row in csv.DictReader(f)]


@pytest.mark.slow
def test_two_workers_a_failure_then_an_out_of_order_resume(data_root, tmp_path, capsys):
    out = tmp_path / "cmp"
    with pytest.raises(JobsFailed, match=r"1 of the 4 jobs started failed: run 'broken' \(exit"):
        run_compare(SHIPPED_SPEC, overrides(data_root, out, f"{RUNS}, {BROKEN}"))

    terminal = capsys.readouterr().out
    broken_log = out / "runs" / "broken" / "job.log"
    assert "run 'broken': FAILED with exit status 1" in terminal and str(broken_log) in terminal
    assert "Traceback" in broken_log.read_text() and "negative dimension" in broken_log.read_text()
    assert terminal.count(": started (log: ") == 4 and terminal.count(": done in ") == 3
    assert "offline linear probe" not in terminal  # the jobs' own output is in their logs
    diet_log = (out / "runs" / "diet" / "job.log").read_text()
    assert "run 'diet': offline linear probe" in diet_log
    # a line per epoch in place of the pretraining's progress bar; the probe's is off too
    assert "epoch 1: " in diet_log and " samples/s, loss " in diet_log
    assert "Epoch 0:" not in diet_log and "it/s" not in diet_log
    assert report_runs(out) == ["diet", "simclr", "raw_pixels"]
    partial = "**Partial**: left out of every table and verdict, as they have no result yet: "
    assert partial + "run 'broken' (failed)." in (out / "report.md").read_text()

    # diet, the first job, was interrupted after its first epoch; simclr finished its pretraining
    # but lost its result (so it only evaluates); raw_pixels' result stands, so it is not started
    diet = out / "runs" / "diet"
    interrupt_after_first_epoch(diet)
    (out / "runs" / "simclr" / "result.json").unlink()

    report = run_compare(SHIPPED_SPEC, overrides(data_root, out, RUNS))

    # which of the two ends first is up to the workers' start-up; what holds either way: the
    # interrupted job resumes, the pretrained one only evaluates, the finished one never starts
    terminal = capsys.readouterr().out
    finished = {line.split(":")[0] for line in terminal.splitlines() if ": done in " in line}
    assert finished == {"[compare] run 'diet'", "[compare] run 'simclr'"}
    assert terminal.count(": started (log: ") == 2
    assert "reference 'raw_pixels': already evaluated" in terminal
    assert "resuming after epoch 0" in (diet / "job.log").read_text()
    simclr_call = (out / "runs" / "simclr" / "job.log").read_text().split("### ")[-1]
    assert "run 'simclr': pretraining already finished" in simclr_call
    assert "epoch 1: " not in simclr_call  # evaluated, not trained again
    assert report_runs(out) == ["diet", "simclr", "raw_pixels"]
    assert "| diet | diet |" in report.read_text()


@pytest.mark.slow
def test_only_some_jobs_in_workers_then_the_rest_into_the_same_output_dir(data_root, tmp_path):
    from solo_diet.cli.main import main

    out = tmp_path / "cmp"  # the command starts its worker before its own imports
    assert (
        main(["compare", str(SHIPPED_SPEC), *overrides(data_root, out, RUNS), "only=[diet]"]) == 0
    )
    assert report_runs(out) == ["diet"] and not (out / "runs" / "simclr").exists()
    header = (out / "runs" / "diet" / "job.log").read_text().splitlines()[0]
    assert header.endswith(", its task 1)") and "start-up" not in header
    text = (out / "report.md").read_text()
    assert "as they have no result yet: run 'simclr', reference 'raw_pixels'." in text
    assert (out / "spec.yaml").is_file() and not list(
        Path(tempfile.gettempdir()).glob(f"solo-diet-plan-{os.getpid()}-*")
    )
    diet_result = (out / "runs" / "diet" / "result.json").read_text()

    report = run_compare(
        SHIPPED_SPEC, overrides(data_root, out, RUNS) + ["only=[simclr,raw_pixels]"]
    )

    assert report_runs(out) == ["diet", "simclr", "raw_pixels"]  # every finished job of the spec
    assert (out / "runs" / "diet" / "result.json").read_text() == diet_result
    assert (out / "runs" / "diet" / "job.log").read_text().count("### ") == 1  # started once
    assert "| simclr | simclr |" in report.read_text() and "**Partial**" not in report.read_text()

    # one run changed: its result is stale, left out and named, the others stand
    lr = "{name: simclr, config_name: simclr, overrides: [optimizer.lr=0.5]}"
    changed = overrides(data_root, out, f"{{name: diet, config_name: diet}}, {lr}")
    text = run_compare(SHIPPED_SPEC, changed, report_only=True).read_text()
    stale = "(stale: trained with another config)"
    assert f"as they have no result yet: run 'simclr' {stale}." in text
    assert report_runs(out) == ["diet", "raw_pixels"]  # a reference row has no training recipe

    # every run changed (the spec given without the overrides it ran with): the report stays,
    # and the error names the spec the runs recorded, which rebuilds it
    changed = overrides(data_root, out, RUNS) + ["budget.max_epochs=5"]
    with pytest.raises(ConfigError, match=rf"{out / 'spec.yaml'} --report-only$"):
        run_compare(SHIPPED_SPEC, changed, report_only=True)
    assert (out / "report.md").read_text() == text
    run_compare(out / "spec.yaml", report_only=True)
    assert report_runs(out) == ["diet", "simclr", "raw_pixels"]


def test_failed_jobs_end_the_command_with_status_1_and_one_line(data_root, tmp_path, capsys):
    from solo_diet.cli.main import main

    argv = ["compare", str(SHIPPED_SPEC), *overrides(data_root, tmp_path / "cmp", BROKEN)]
    assert main(argv + ["reference_rows=[]", "parallel.workers=1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("solo-diet compare: 1 of the 1 jobs started failed: run 'broken' (")
    assert "rerun the same command to retry the failed ones." in err[-1]


def test_without_matplotlib_the_report_says_there_are_no_plots(data_root, tmp_path, monkeypatch):
    from solo_diet.compare.report import curves as plots
    from solo_diet.compare.report.markdown import NO_PLOTS

    monkeypatch.setattr(plots, "plots_available", lambda: False)
    out = tmp_path / "cmp"
    with pytest.raises(JobsFailed):
        run_compare(SHIPPED_SPEC, overrides(data_root, out, BROKEN) + ["parallel.workers=1"])
    assert NO_PLOTS in (out / "report.md").read_text() and not list(out.glob("*.png"))
