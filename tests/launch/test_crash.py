"""Crash-safe runs, by fault injection on the real launchers: a cut newest checkpoint beside a good
one, a cut final checkpoint, an old checkpoint past ``auto_resume.max_hours``, ``kill -9`` at a
random step or inside a checkpoint's save, SIGTERM then a rerun in the same run folder, corrupt
checkpoints given to ``linear``, two comparisons into one output folder, a comparison killed while
writing its report, and unsafe run names."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from tests._helpers import SCRIPTS, requires_solo
from tests._helpers.cli import (
    LINEAR,
    PRETRAIN,
    cli,
    last_line,
    linear_overrides,
    overrides,
)
from tests._helpers.compare import SHIPPED_SPEC, write_tiny_images
from tests._helpers.compare import tiny_overrides as compare_overrides

pytestmark = [pytest.mark.solo, requires_solo()]

REPO = SCRIPTS.parent
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """5 classes of 32 px images: 6 each in train/, 3 in val/."""
    return write_tiny_images(tmp_path_factory.mktemp("data"))


def progress_of(checkpoint: Path) -> tuple[int, int]:
    loaded = torch.load(checkpoint, map_location="cpu", weights_only=False)
    return loaded["epoch"], loaded["global_step"]


def cut(path: Path) -> None:
    """What a kill or a full disk in the middle of a save leaves."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def run_folder(out: Path) -> Path:
    (folder,) = (out / "diet").iterdir()  # one run folder, whatever happened
    return folder


def test_a_cut_newest_checkpoint_beside_a_good_one_resumes_from_the_good_one(
    data, tmp_path, capsys
):
    argv = PRETRAIN + overrides(data, tmp_path, epochs=2) + ["++checkpoint.keep_prev=True"]
    assert cli(argv, capsys)[0] == 0
    folder = run_folder(tmp_path)
    good, newest = sorted(folder.glob("*.ckpt"))
    uninterrupted = progress_of(newest)
    os.utime(good, (time.time() + 60, time.time() + 60))  # newer file: order is by epoch
    cut(newest)

    code, out, err = cli(argv, capsys)
    assert code == 0, err
    assert f"skipping checkpoint {newest}: it does not load (it is cut short or damaged" in out
    assert f"Resuming from previous checkpoint that matches specifications: '{good}'" in out
    assert "nothing to train" not in out
    assert run_folder(tmp_path) == folder  # the run went on in its folder
    assert progress_of(newest) == uninterrupted  # epoch 1 trained again, saved whole


def test_a_cut_final_checkpoint_is_not_success(data, tmp_path, capsys):
    from solo_diet.launch.common import already_finished
    from solo_diet.launch.launch_checks import TrainingSettings

    argv = PRETRAIN + overrides(data, tmp_path, epochs=1)
    assert cli(argv, capsys)[0] == 0
    (final,) = run_folder(tmp_path).glob("*.ckpt")
    uninterrupted = progress_of(final)
    assert already_finished(final, TrainingSettings(max_epochs=1))
    assert not already_finished(final, TrainingSettings(max_epochs=2))
    cut(final)
    assert not already_finished(final, TrainingSettings(max_epochs=1))

    code, out, err = cli(argv, capsys)
    assert code == 0, err
    assert "nothing to train" not in out and f"skipping checkpoint {final}" in out
    # nothing loads, so the run started over (in a new run folder) and ended whole
    retrained = Path(last_line(out).removeprefix("last checkpoint: "))
    assert retrained != final and progress_of(retrained) == uninterrupted


def test_a_checkpoint_older_than_max_hours_is_said_to_start_over(data, tmp_path, capsys):
    argv = PRETRAIN + overrides(data, tmp_path, epochs=1)
    assert cli(argv, capsys)[0] == 0
    (final,) = run_folder(tmp_path).glob("*.ckpt")
    old = time.time() - 39.5 * 3600
    os.utime(final, (old, old))
    code, out, _ = cli(argv + ["++auto_resume.max_hours=41"], capsys)
    assert code == 0 and f"nothing to train: {final} already holds the last" in out
    code, out, _ = cli(argv, capsys)
    assert code == 0 and "nothing to train" not in out
    assert (
        f"auto-resume: {final} was written 39.5 h ago, more than auto_resume.max_hours=36, so this"
        " run starts over; pass ++auto_resume.max_hours=41 to resume from it." in out
    )


class SigtermAtEpoch:
    """A callback that sends SIGTERM to this process when epoch ``epoch`` starts."""

    def __new__(cls, epoch: int):
        from lightning.pytorch.callbacks import Callback

        class _Send(Callback):
            def on_train_epoch_start(self, trainer, pl_module):
                if trainer.current_epoch == epoch:
                    os.kill(os.getpid(), signal.SIGTERM)

        return _Send()


def test_a_resume_after_sigterm_goes_on_in_the_same_run_folder(data, tmp_path, capsys):
    from solo_diet.launch.common import compose_cfg
    from solo_diet.launch.errors import run_guarded
    from solo_diet.launch.pretrain import run_pretrain

    argv = overrides(data, tmp_path, epochs=3)
    cfg = compose_cfg(str(SCRIPTS / "pretrain" / "custom"), "diet", argv)
    stopped = run_guarded(
        "pretrain", lambda: run_pretrain(cfg, extra_callbacks=[SigtermAtEpoch(1)])
    )
    assert stopped == 143
    folder = run_folder(tmp_path)
    (first,) = folder.glob("*.ckpt")

    code, out, err = cli(PRETRAIN + argv, capsys)
    assert code == 0, err
    assert f"Resuming from previous checkpoint that matches specifications: '{first}'" in out
    final = Path(last_line(out).removeprefix("last checkpoint: "))
    assert run_folder(tmp_path) == folder and final.parent == folder
    assert sorted(p.name for p in folder.iterdir()) == [".run.lock", "args.json", final.name]
    assert final.name == first.name.replace("-ep=0.ckpt", "-ep=2.ckpt")
    assert json.loads((folder / "args.json").read_text())["max_epochs"] == 3


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from lightning.pytorch.callbacks import Callback
    from solo_diet.launch.common import compose_cfg
    from solo_diet.launch.errors import run_guarded
    from solo_diet.launch.pretrain import run_pretrain

    mode, at, config_path, *argv = sys.argv[1:]
    at = int(at)

    class KillAtStep(Callback):
        def on_train_batch_start(self, trainer, *args):
            if mode == "step" and trainer.global_step == at:
                os.kill(os.getpid(), signal.SIGKILL)

    real_fsync, saves = os.fsync, []

    def fsync(descriptor):  # kill -9 inside the at-th checkpoint save, its bytes written
        name = os.readlink(f"/proc/self/fd/{descriptor}")
        if mode == "save" and ".ckpt." in name and name.endswith(".tmp"):
            saves.append(name)
            if len(saves) == at:
                os.kill(os.getpid(), signal.SIGKILL)
        real_fsync(descriptor)

    os.fsync = fsync
    cfg = compose_cfg(config_path, "diet", argv)
    sys.exit(run_guarded("pretrain", lambda: run_pretrain(cfg, extra_callbacks=[KillAtStep()])))
    """
)
EPOCHS, BATCHES = 3, 2


@pytest.fixture(scope="module")
def uninterrupted_progress(data, tmp_path_factory) -> tuple[int, int]:
    from solo_diet.cli.main import main

    out = tmp_path_factory.mktemp("uninterrupted")
    assert main(PRETRAIN + overrides(data, out, epochs=EPOCHS, batches=BATCHES)) == 0
    (final,) = run_folder(out).glob("*.ckpt")
    return progress_of(final)


@pytest.mark.parametrize("repeat", [0, 1, 2])
def test_kill_9_at_a_random_step_then_a_rerun_ends_as_an_uninterrupted_run(
    data, tmp_path, capsys, uninterrupted_progress, repeat
):
    total_steps = uninterrupted_progress[1]
    assert total_steps == EPOCHS * BATCHES
    draw = random.Random(repeat)
    mode = ["step", "save", "step"][repeat]
    # a step of any epoch; or the save of epoch 1 or later, the previous checkpoint beside it
    at = draw.randrange(1, total_steps) if mode == "step" else draw.randrange(2, EPOCHS + 1)
    argv = overrides(data, tmp_path, epochs=EPOCHS, batches=BATCHES)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, mode, str(at), str(SCRIPTS / "pretrain" / "custom"), *argv],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, (mode, at, killed.stderr[-3000:])

    saved = sorted(tmp_path.glob("diet/*/*.ckpt"))  # none when killed in the first epoch
    code, out, err = cli(PRETRAIN + argv, capsys)
    assert code == 0, (mode, at, err)
    (final,) = tmp_path.glob("diet/*/*.ckpt")
    assert progress_of(final) == uninterrupted_progress, (mode, at)
    if saved:  # resumed: in the same folder, the killed save's temporary file gone
        assert final.parent == saved[0].parent and f"'{saved[-1]}'" in out
        names = sorted(p.name for p in final.parent.iterdir())
        assert names == [".run.lock", "args.json", final.name]
    else:  # started over: the killed run's folder (its args.json only) removed
        assert list(tmp_path.glob("diet/*")) == [final.parent]


@pytest.fixture(scope="module")
def finished_run(data, tmp_path_factory) -> Path:
    from solo_diet.cli.main import main

    out = tmp_path_factory.mktemp("finished")
    assert main(PRETRAIN + overrides(data, out)) == 0
    (checkpoint,) = run_folder(out).glob("*.ckpt")
    return checkpoint


@pytest.mark.parametrize("kind", ["empty", "cut", "text", "garbage"])
def test_a_corrupt_checkpoint_given_to_linear_is_one_line(
    data, finished_run, tmp_path, capsys, kind
):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(finished_run.parent / "args.json", folder / "args.json")
    checkpoint = folder / "diet-ep=0.ckpt"
    whole = finished_run.read_bytes()
    contents = {
        "empty": b"",
        "cut": whole[: len(whole) * 2 // 3],
        "text": b"epoch 0, loss 4.2\nthese are my notes\n",
        "garbage": random.Random(0).randbytes(4096),
    }
    checkpoint.write_bytes(contents[kind])
    argv = (
        LINEAR + linear_overrides(data, tmp_path) + [f"pretrained_feature_extractor={checkpoint}"]
    )
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    line = last_line(err)
    assert line.startswith(
        f"solo-diet linear: `pretrained_feature_extractor`: checkpoint {checkpoint} does not load: "
    )
    reason = {
        "empty": "the file is empty",
        "cut": "it is cut short or damaged",
        "text": "it is not a torch checkpoint",
        "garbage": "it is not a torch checkpoint",
    }
    assert reason[kind] in line and line.endswith("resumes from its newest checkpoint that loads).")


def test_resume_from_a_corrupt_checkpoint_is_one_line(data, tmp_path, capsys):
    checkpoint = tmp_path / "diet-ep=0.ckpt"
    checkpoint.write_bytes(b"")
    argv = PRETRAIN + overrides(data, tmp_path) + [f"+resume_from_checkpoint={checkpoint}"]
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert last_line(err).startswith(
        f"solo-diet pretrain: `resume_from_checkpoint`: checkpoint {checkpoint} does not load: the "
        "file is empty."
    )


# --- solo-diet compare -------------------------------------------------------------------------


def one_run_spec(data_root: Path, out: Path) -> list[str]:
    return compare_overrides(data_root, out) + [
        "runs=[{name: diet, config_name: diet}]",
        "budget.max_epochs=1",
    ]


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_one_compare_per_output_dir_and_a_report_killed_mid_write_stays_whole(
    data, tmp_path, capsys
):
    from solo_diet.compare.run.job import LOCK_FILE

    out = tmp_path / "cmp"
    out.mkdir()
    lock = out / LOCK_FILE
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "started": "earlier"}
    lock.write_text(json.dumps(stale))  # what a kill -9 of a comparison leaves

    argv = ["compare", str(SHIPPED_SPEC), *one_run_spec(data, out)]
    first = subprocess.Popen(
        [sys.executable, "-m", "solo_diet.cli.main", *argv],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 300
        while first.poll() is None and time.time() < deadline:
            text = lock.read_text()
            if text and json.loads(text)["pid"] == first.pid:
                break
            time.sleep(0.2)
        first.send_signal(signal.SIGSTOP)  # holds the lock while the second one starts
        try:
            code, _, err = cli(argv, capsys)
        finally:
            first.send_signal(signal.SIGCONT)
        stdout, stderr = first.communicate(timeout=600)
    finally:
        first.kill()
    assert code == 2 and "Traceback" not in err
    assert last_line(err).startswith(
        f"solo-diet compare: `output_dir` {out} is in use by `solo-diet compare` PID {first.pid} "
        f"on {socket.gethostname()}"
    )
    assert first.returncode == 0, stderr[-3000:]
    assert f"taking over the lock {lock} of `solo-diet compare` PID {stale['pid']}" in stdout
    assert lock.read_text() == ""  # free again

    report = out / "report.md"
    before = report.read_bytes()
    assert before.count(b"| diet |") >= 1
    kill_in_report = textwrap.dedent(
        """
        import os, signal, sys
        real_fsync = os.fsync
        def fsync(descriptor):  # kill -9 once the new report's bytes are written, before rename
            if ".report.md." in os.readlink(f"/proc/self/fd/{descriptor}"):
                os.kill(os.getpid(), signal.SIGKILL)
            real_fsync(descriptor)
        os.fsync = fsync
        from solo_diet.cli.main import main
        sys.exit(main(sys.argv[1:]))
        """
    )
    killed = subprocess.run(
        [sys.executable, "-c", kill_in_report, *argv, "--report-only"],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert report.read_bytes() == before


@pytest.mark.parametrize(
    "name", ["evil\n", "x" * 101, "..", ".", "../escape", "a/b", "/abs", "", "tab\there"]
)
def test_unsafe_run_names_are_refused(data, tmp_path, name):
    from omegaconf import OmegaConf

    from solo_diet.compare import load_spec
    from solo_diet.core.errors import ConfigError

    spec = OmegaConf.load(SHIPPED_SPEC)  # as a mapping: its paths made absolute
    for key in ("config_path", "linear.config_path", "evaluation.lidar_augmentations"):
        OmegaConf.update(spec, key, str(SHIPPED_SPEC.parent / OmegaConf.select(spec, key)))
    spec.runs = [{"name": name, "config_name": "diet"}]
    with pytest.raises(ConfigError, match="must be 1 to 100 letters, digits"):
        load_spec(spec, [f"output_dir={tmp_path}", f"data.root={data}"])


def test_a_long_run_name_on_the_command_line_is_one_line(data, tmp_path, capsys):
    argv = [
        "compare",
        str(SHIPPED_SPEC),
        f"output_dir={tmp_path}",
        f"data.root={data}",
        f"runs=[{{name: {'n' * 300}, config_name: diet}}]",
    ]
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "must be 1 to 100 letters, digits" in err
