"""compare's overall time left: a reference row weighs one evaluation, measured in epochs on the
first run job that ends (synthetic clock, no solo-learn needed)."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from solo_diet.compare.plan.budgets import RunBudget
from solo_diet.compare.plan.jobs import Job
from solo_diet.compare.run.runner import JobsProgress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def jobs(out: Path) -> list[Job]:
    cfg = OmegaConf.create({"method": "diet"})
    run = Job("diet", "runs/diet", out / "runs/diet", cfg, budget=RunBudget(10, 1, None, "", ""))
    rows = [Job(r, f"references/{r}", out / r, cfg, reference=r) for r in ("a", "b", "c")]
    return [run, *rows]


def finish(job: Job, pretrain_wall_s: float, evaluation_wall_s: float) -> None:
    job.run_dir.mkdir(parents=True)
    times = {"pretrain_wall_s": pretrain_wall_s, "evaluation_wall_s": evaluation_wall_s}
    (job.run_dir / "result.json").write_text(json.dumps(times))


def left(line: str) -> str:
    return line.rpartition("elapsed, about ")[2]


def test_reference_rows_left_weigh_the_evaluation_the_first_run_measured(tmp_path):
    """10 epochs in 10 s, then a 40 s evaluation: each reference row left is another 40 s (two
    epochs' weight said 0:25 left for the three)."""
    clock, said = Clock(), []
    planned = jobs(tmp_path)
    progress = JobsProgress(planned, say=said.append, clock=clock)
    progress.step(1)
    clock.now += 50
    finish(planned[0], 10.0, 40.0)
    progress.step(2)
    clock.now += 40
    progress.step(3)
    assert [left(line) for line in said[1:]] == ["2:00 left", "1:20 left"]
    assert progress.evaluation_epochs == 40.0


def test_the_fan_out_measures_the_first_run_that_ends(tmp_path, capsys):
    clock, said = Clock(), []
    planned = jobs(tmp_path)
    progress = JobsProgress(planned, say=said.append, clock=clock)
    clock.now += 50
    finish(planned[0], 10.0, 40.0)
    progress.say("run 'diet': done in 50 s")
    progress.say("run 'diet': done in 50 s")  # said once
    assert said == ["[compare] 1 of 4 jobs ended; 0:50 elapsed, about 2:00 left"]
    assert "[compare] run 'diet': done in 50 s" in capsys.readouterr().out
