"""The overall progress line of ``demo`` and ``compare`` (step k of n, elapsed, time left) and what
install.sh says at each step, with pip replaced by a recorder (no solo-learn needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from solo_diet.launch.callbacks import OverallProgress, clock_text

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_follows_the_share_of_the_weight_done():
    clock, said = Clock(), []
    progress = OverallProgress("demo", [1, 8, 1], say=said.append, clock=clock)
    progress.step(1, "data")
    clock.now += 10  # 1 of 10 weight units in 10 s: 90 s left
    progress.step(2, "pretraining")
    clock.now += 40  # and half of the second step: 5 of 10 in 50 s
    progress.step(2, "pretraining, epoch 4/8", fraction=0.5)
    assert said == [
        "[demo] step 1 of 3: data; 0:00 elapsed, time left known after the first step",
        "[demo] step 2 of 3: pretraining; 0:10 elapsed, about 1:30 left",
        "[demo] step 2 of 3: pretraining, epoch 4/8; 0:50 elapsed, about 0:50 left",
    ]


def test_work_done_before_this_process_does_not_count_as_its_speed():
    clock, said = Clock(), []
    progress = OverallProgress("demo", [2, 2], say=said.append, clock=clock)
    progress.skip(1)  # a finished step rerun: no time spent here
    clock.now += 30
    progress.step(2, "probe", fraction=0.5)  # 1 unit in 30 s, 1 unit left
    assert said == ["[demo] step 2 of 2: probe; 0:30 elapsed, about 0:30 left"]


def test_the_steps_after_the_first_set_the_rate():
    """compare's first job also pays the start-up (imports, data): from the second on, the rate
    is measured from the end of the first."""
    clock, said = Clock(), []
    progress = OverallProgress("compare", [1, 1, 1, 1], say=said.append, clock=clock)
    clock.now += 30  # the first job: 10 s of work and 20 s of start-up
    progress.step(2, "b")
    clock.now += 10
    progress.step(3, "c")
    left = [line.rpartition("elapsed, about ")[2] for line in said]
    assert left == ["1:30 left", "0:20 left"]


def test_jobs_ending_in_any_order_count_their_own_weight():
    clock, said = Clock(), []
    progress = OverallProgress("compare", [6, 2, 2], say=said.append, clock=clock)
    clock.now += 20
    progress.ended([2], "jobs ended")  # 2 of 10 in 20 s
    assert said == ["[compare] 1 of 3 jobs ended; 0:20 elapsed, about 1:20 left"]
    assert clock_text(3725) == "1:02:05"


class Fit:
    """What the epoch callback reads of a Lightning Trainer."""

    def __init__(self, max_epochs: int, bar: bool) -> None:
        self.current_epoch, self.max_epochs, self.is_global_zero = 0, max_epochs, True
        self.progress_bar_callback = object() if bar else None


def test_the_demo_time_left_comes_from_measured_epochs_on_lines_of_their_own():
    clock, said = Clock(), []
    progress = OverallProgress("demo", [1, 4, 1], say=said.append, clock=clock, from_epochs=True)
    progress.step(1, "data")
    clock.now += 2  # the data step says nothing of an epoch's time
    progress.step(2, "pretraining")
    fit, callback = Fit(4, bar=True), progress.epoch_callback(2, "pretraining")
    callback.on_train_start(fit, None)
    clock.now += 30  # one epoch in 30 s: 3 epochs and 1 unit left
    callback.on_train_epoch_end(fit, None)
    assert said == [
        "[demo] step 1 of 3: data; 0:00 elapsed, time left known after the first epoch",
        "[demo] step 2 of 3: pretraining; 0:02 elapsed, time left known after the first epoch",
        "\n[demo] step 2 of 3: pretraining, epoch 1/4; 0:32 elapsed, about 2:00 left",
    ]


def test_the_time_left_settles_by_the_second_epoch_without_the_start_up():
    """A fit whose first epoch pays 60 s of start-up over its 20 s of work: by the second epoch
    the time left is the true one (the remaining epochs at 20 s and the last step's 2 units)."""
    clock, said = Clock(), []
    progress = OverallProgress("demo", [1, 10, 2], say=said.append, clock=clock, from_epochs=True)
    fit, callback = Fit(10, bar=False), progress.epoch_callback(2, "pretraining")
    callback.on_train_start(fit, None)
    for epoch, seconds in enumerate([80, 20, 20]):
        fit.current_epoch = epoch
        clock.now += seconds
        callback.on_train_epoch_end(fit, None)
    left = [line.rpartition("elapsed, about ")[2] for line in said]
    assert left == ["14:40 left", "3:20 left", "3:00 left"]  # (9 + 2) x 80 s, then x 20 s


def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A $PYTHON that records its arguments instead of installing."""
    log = tmp_path / "python-calls.txt"
    python = tmp_path / "python"
    python.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> {log}\n'
        'case "$2" in *sys.prefix*) echo /venv ;; '
        "*METHODS*) echo 'install.sh: solo-diet 0 registered in solo-learn' ;; esac\n"
    )
    python.chmod(0o755)
    return python, log


def run_install(tmp_path: Path, **env: str) -> tuple[list[str], str, Path]:
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(ROOT / "install.sh", repo / "install.sh")
    python, log = fake_python(tmp_path)
    environ = {k: v for k, v in os.environ.items() if k != "SOLO_LEARN_SRC"}
    done = subprocess.run(
        ["bash", str(repo / "install.sh")],
        env={**environ, "PYTHON": str(python), **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines(), log.read_text(), repo


def test_install_says_each_step_and_copies_the_shared_source(tmp_path):
    shared = tmp_path / "shared" / "solo-learn"
    shared.mkdir(parents=True)
    (shared / "setup.py").write_text("")
    lines, calls, repo = run_install(tmp_path)
    assert [line.partition(":")[0] for line in lines] == [
        *(f"install.sh [{k}/6]" for k in range(1, 7)),
        "install.sh",
    ]
    assert lines[0].startswith("install.sh [1/6]: torch==2.14.1 torchvision==0.29.1 into /venv")
    assert f"from {repo / '.solo-learn'} (a writable copy of {shared};" in lines[2]
    assert (repo / ".solo-learn" / "setup.py").is_file()
    assert f"-e {repo / '.solo-learn'}" in calls and "/opt/solo-learn" not in calls


def test_install_uses_solo_learn_src_and_says_so(tmp_path):
    source = tmp_path / "my-solo-learn"
    source.mkdir()
    lines, calls, repo = run_install(tmp_path, SOLO_LEARN_SRC=str(source))
    assert lines[2].startswith(f"install.sh [3/6]: solo-learn main, editable, from {source} (")
    assert "(SOLO_LEARN_SRC;" in lines[2] and not (repo / ".solo-learn").exists()
    assert f"-e {source}" in calls
