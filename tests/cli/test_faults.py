"""Fault probes a new user could run, repeated on the real launchers: unsafe run names, a pickled
checkpoint under ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, a full disk during a save, a checkpoint
without its args.json, and a comparison's parent killed with ``kill -9`` while its workers
train."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from tests._helpers import NEEDS_SOLO, ROOT

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from tests._helpers.cli import LINEAR, PRETRAIN, cli, last_line, linear_overrides, overrides
from tests._helpers.compare import SHIPPED_SPEC, write_tiny_images
from tests._helpers.compare import tiny_overrides as compare_overrides

pytestmark = [pytest.mark.solo, pytest.mark.slow]

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """5 classes of 32 px images: 6 each in train/, 3 in val/."""
    return write_tiny_images(tmp_path_factory.mktemp("data"))


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("command", ["pretrain", "linear"])
@pytest.mark.parametrize("name", ["../escape", "/ABS/x", "n" * 300, "..", "a b"])
def test_an_unsafe_run_name_is_one_line_and_writes_nothing(data, tmp_path, capsys, command, name):
    out = tmp_path / "out"
    name = name.replace("/ABS", str(tmp_path / "ABS"))
    if command == "pretrain":
        argv = PRETRAIN + overrides(data, out)
    else:
        argv = LINEAR + linear_overrides(data, out) + [f"pretrained_feature_extractor={data}"]
    code, _, err = cli(argv + [f"name='{name}'"], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "`name`" in err and "must be 1 to 100 letters, digits" in err
    assert files_under(tmp_path) == [], "nothing is written before the name is checked"


def test_a_newline_in_a_run_name_is_refused(data, tmp_path):
    from solo_diet.core.errors import ConfigError
    from solo_diet.launch.common import compose_cfg
    from solo_diet.launch.pretrain import run_pretrain

    cfg = compose_cfg(PRETRAIN[2], "diet", overrides(data, tmp_path))
    cfg.name = "foo\n"
    with pytest.raises(ConfigError, match=r"`name` 'foo\\n' must be 1 to 100"):
        run_pretrain(cfg)
    assert files_under(tmp_path) == []


class _MakesAFile:
    """Unpickled, it creates ``path`` (the code a crafted checkpoint would run)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def pickled(checkpoint: Path, marker: Path) -> None:
    """Rewrite ``checkpoint`` with an object whose unpickling creates ``marker``."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state["payload"] = _MakesAFile(marker)
    torch.save(state, checkpoint)


def test_a_pickled_checkpoint_runs_no_code_and_is_skipped(data, tmp_path, capsys, monkeypatch):
    from solo_diet.launch.checkpointing import AtomicCheckpointIO
    from solo_diet.methods.checkpoint import UnsafeCheckpoint, checkpoint_problem

    argv = PRETRAIN + overrides(data, tmp_path, epochs=2) + ["++checkpoint.keep_prev=True"]
    assert cli(argv, capsys)[0] == 0
    first, final = sorted(tmp_path.glob("diet/*/*.ckpt"))
    marker = tmp_path / "code-ran"
    pickled(final, marker)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

    assert "only pickle can rebuild (io.open)" in checkpoint_problem(final)
    with pytest.raises(UnsafeCheckpoint):
        AtomicCheckpointIO().load_checkpoint(final)  # what Lightning's resume calls
    assert not marker.exists()

    # a pickled final checkpoint is no finished run: skipped in one line, resumed from the first
    code, out, err = cli(argv, capsys)
    assert code == 0, err
    assert not marker.exists(), "the checkpoint's code ran"
    skipped = [line for line in out.splitlines() if line.startswith("skipping checkpoint")]
    assert skipped == [
        f"skipping checkpoint {final}: it does not load (it holds objects only pickle can rebuild "
        "(io.open), and unpickling runs any code the file carries; if you trust its source, "
        "`++allow_pickle_checkpoint=True` (pretrain and linear) loads it)."
    ]
    assert f"Resuming from previous checkpoint that matches specifications: '{first}'" in out
    assert "nothing to train" not in out
    assert checkpoint_problem(Path(last_line(out).removeprefix("last checkpoint: "))) is None

    # the only checkpoint pickled: the run says it starts over
    (only,) = [p for p in tmp_path.glob("diet/*/*.ckpt") if "ep=1" in p.name]
    first.unlink()
    pickled(only, marker)
    code, out, err = cli(argv, capsys)
    assert code == 0 and not marker.exists(), err
    assert "none of the 1 checkpoint(s) loads: the run starts over from epoch 0." in out


def test_a_full_disk_during_a_save_is_one_line_and_leaves_the_previous_checkpoint(
    tmp_path, capsys, monkeypatch
):
    import solo_diet.core.atomic as atomic
    from solo_diet.launch.checkpointing import AtomicCheckpointIO
    from solo_diet.launch.errors import DiskFull, run_guarded

    path = tmp_path / "run" / "diet-ep=0.ckpt"
    AtomicCheckpointIO().save_checkpoint({"epoch": 0}, path)
    before = path.read_bytes()
    real = atomic._temporary_beside

    def on_a_full_disk(target: Path, binary: bool):  # the kernel's own ENOSPC: /dev/full
        temporary, handle = real(target, binary)
        handle.close()
        return temporary, open("/dev/full", "wb")

    monkeypatch.setattr(atomic, "_temporary_beside", on_a_full_disk)
    big = {"epoch": 1, "weights": torch.zeros(1 << 20)}
    with pytest.raises(DiskFull) as full:
        AtomicCheckpointIO().save_checkpoint(big, path)
    assert full.value.__cause__.errno == errno.ENOSPC
    assert path.read_bytes() == before and [p.name for p in path.parent.iterdir()] == [path.name]

    def save() -> int:
        AtomicCheckpointIO().save_checkpoint(big, path)
        return 0

    capsys.readouterr()
    assert run_guarded("pretrain", save) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"solo-diet pretrain: no space left on the device of {path.parent} (")
    assert "MiB free) while saving diet-ep=0.ckpt" in line and line.endswith("checkpoint.")


def test_a_disk_full_at_the_second_save_ends_in_one_line_and_the_rerun_resumes(
    data, tmp_path, capsys, monkeypatch
):
    import solo_diet.core.atomic as atomic

    real, saves = atomic._temporary_beside, []

    def second_save_on_a_full_disk(target: Path, binary: bool):
        temporary, handle = real(target, binary)
        if target.suffix == ".ckpt":
            saves.append(target.name)
            if len(saves) == 2:  # the kernel's own ENOSPC from then on
                handle.close()
                return temporary, open("/dev/full", "wb")
        return temporary, handle

    monkeypatch.setattr(atomic, "_temporary_beside", second_save_on_a_full_disk)
    argv = PRETRAIN + overrides(data, tmp_path, epochs=2)
    code, _, err = cli(argv, capsys)
    (line,) = err.strip().splitlines()
    assert code == 1 and line.startswith("solo-diet pretrain: no space left on the device of ")
    (kept,) = tmp_path.glob("diet/*/*.ckpt")
    assert "ep=0" in kept.name and not list(tmp_path.rglob(".*.tmp"))

    monkeypatch.setattr(atomic, "_temporary_beside", real)
    code, out, err = cli(argv, capsys)
    assert code == 0, err
    assert f"Resuming from previous checkpoint that matches specifications: '{kept}'" in out


@pytest.mark.parametrize("command, lock", [("pretrain", ".run.lock"), ("compare", ".compare.lock")])
def test_a_disk_full_at_the_first_write_is_one_line(
    data, tmp_path, capsys, monkeypatch, command, lock
):
    import solo_diet.compare.run.job  # noqa: F401  (binds the real write_holder before the patch)
    import solo_diet.core.lock as locks

    def no_space(descriptor: int, command: str) -> None:  # the lock's holder line: a first write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(locks, "write_holder", no_space)
    if command == "pretrain":
        argv = PRETRAIN + overrides(data, tmp_path)
    else:
        argv = ["compare", str(SHIPPED_SPEC), *compare_overrides(data, tmp_path / "out")]
    code, _, err = cli(argv, capsys)
    (line,) = err.strip().splitlines()
    assert code == 1, err
    assert line.startswith(f"solo-diet {command}: no space left on the device of {tmp_path}")
    assert f"MiB free) while saving {lock}: free some space" in line


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_killed_compare_leaves_no_worker_and_a_rerun_finishes(data, tmp_path):
    out = tmp_path / "cmp"
    argv = [
        sys.executable,
        "-m",
        "solo_diet.cli.main",
        "compare",
        str(SHIPPED_SPEC),
        *compare_overrides(data, out),
        "budget.max_epochs=3",
        "parallel.workers=2",
        "reference_rows=[]",
        "runs=[{name: diet, config_name: diet}, {name: byol, config_name: byol}]",
    ]
    parent = subprocess.Popen(argv, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not list(out.glob("runs/*/pretrain/**/*.ckpt")):
            assert parent.poll() is None, "the comparison ended before its first checkpoint"
            time.sleep(0.2)
        workers = descendants(parent.pid)
        assert workers, "the jobs run in worker processes"
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(map(alive, workers)):
            time.sleep(0.2)
        assert not [pid for pid in workers if alive(pid)], "workers outlived their parent"
    finally:
        parent.kill()
        parent.wait()
    plans = lambda: list(Path(tempfile.gettempdir()).glob(f"solo-diet-plan-{parent.pid}-*"))  # noqa: E731
    assert plans(), "what a killed parent leaves"

    rerun = subprocess.run(argv, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "which no longer runs" in rerun.stdout + rerun.stderr
    for run in ("diet", "byol"):
        assert (out / "runs" / run / "result.json").is_file()
    assert not plans() and not list(out.rglob(".*.tmp"))


def test_a_rerun_stops_a_worker_that_still_holds_one_of_its_jobs(tmp_path):
    from solo_diet.compare.run.job import job_lock, stop_orphans

    run_dir = tmp_path / "runs" / "diet"
    run_dir.mkdir(parents=True)
    holder = f"""
import sys, time
from pathlib import Path
from solo_diet.compare.run.job import job_lock
with job_lock(Path({str(run_dir)!r}), "diet"):
    print("held", flush=True)
    time.sleep(600)
"""
    orphan = subprocess.Popen(
        [sys.executable, "-c", holder],
        env=ENV,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as a worker runs
    )
    try:
        assert orphan.stdout.readline() == "held\n"
        said: list[str] = []
        stop_orphans([run_dir, tmp_path / "runs" / "byol"], say=said.append)
        assert orphan.wait(timeout=10) == -signal.SIGKILL
        assert said == [
            f"stopping PID {orphan.pid}, a worker of a comparison that no longer runs, still "
            f"running the job in {run_dir}"
        ]
        with job_lock(run_dir, "diet", say=said.append):
            assert len(said) == 1  # free at once
    finally:
        orphan.kill()
        orphan.wait()


def test_linear_without_args_json_names_how_to_give_the_backbone(data, tmp_path, capsys):
    assert cli(PRETRAIN + overrides(data, tmp_path), capsys)[0] == 0
    (checkpoint,) = tmp_path.glob("diet/*/*.ckpt")
    (checkpoint.parent / "args.json").unlink()
    probe = LINEAR + linear_overrides(data, tmp_path / "probe")
    probe += [f"pretrained_feature_extractor={checkpoint}"]
    code, _, err = cli(probe, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "++backbone.name=<name> ++pretrain_method=<method>" in err
    backbone = ["++backbone.name=cp_resnet8", "++backbone.kwargs.width=8", "++pretrain_method=diet"]
    code, out, err = cli(probe + backbone, capsys)
    assert code == 0, err
    assert "linear probe top-1 on the backbone representation" in out
