"""The run faults of a hostile user's probe, through the command line, each one line with exit 2:
a run that diverges (and a NaN or infinite setting, and a fit that trains nothing) writes no
checkpoint; linear refuses a diverged backbone; a dataset root or unlike val classes are refused
before training; a second pretrain into a run folder in use is refused naming the first, whose
lock a rerun takes over once it is killed; compare refuses a NaN/inf run setting before any job."""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests._helpers import NEEDS_SOLO, SCRIPTS

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

from tests._helpers.cli import LINEAR, PRETRAIN, cli, last_line, linear_overrides, overrides
from tests._helpers.compare import SHIPPED_SPEC, write_tiny_images
from tests._helpers.compare import tiny_overrides as compare_overrides

pytestmark = [pytest.mark.solo, pytest.mark.slow]

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(
        filter(None, [str(SCRIPTS.parent), os.environ.get("PYTHONPATH")])
    ),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """5 classes of 32 px images: 6 each in train/, 3 in val/."""
    return write_tiny_images(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def checkpoint(data, tmp_path_factory) -> Path:
    """A finished one-epoch pretraining's checkpoint."""
    from solo_diet.cli.main import main

    out = tmp_path_factory.mktemp("pretrained")
    assert main(PRETRAIN + overrides(data, out)) == 0
    (path,) = out.glob("diet/*/*.ckpt")
    return path


def refused(argv: list[str], capsys) -> tuple[str, str]:
    """Exit 2 with one line on stderr (no traceback); returns that line and stdout."""
    code, out, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err, err
    return last_line(err), out


def test_a_diverging_pretrain_fails_naming_the_step_and_leaves_no_nan_checkpoint(
    data, tmp_path, capsys
):
    line, out = refused(
        PRETRAIN + overrides(data, tmp_path, epochs=2) + ["optimizer.lr=1e30"], capsys
    )
    assert re.fullmatch(
        r"solo-diet pretrain: the training diverged: the loss became NaN or infinite at step \d "
        r"of epoch \d; the likely cause is too large a learning rate: lower `optimizer.lr`. No "
        r"checkpoint holds these weights.",
        line,
    ), line
    assert "last checkpoint:" not in out
    for path in tmp_path.rglob("*.ckpt"):  # the epochs before it diverged: finite weights
        weights = torch.load(path, map_location="cpu", weights_only=True)["state_dict"].values()
        assert all(torch.isfinite(w).all() for w in weights if w.is_floating_point()), path


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "optimizer.lr=inf",
            "`optimizer.lr` is inf: every number of a run must be finite (within ±3.4e+38).",
        ),
        ("optimizer.lr=1e300", "`optimizer.lr` is 1e+300: every number of a run must be finite"),
        ("optimizer.kwargs.betas=[0.9,nan]", "`optimizer.kwargs.betas[1]` is nan: every number"),
        ("++limit_train_batches=0", "`limit_train_batches` is 0, so nothing would train and no"),
        (
            "data.train_path={root}",
            "`data.train_path` = {root} is a dataset root: it holds train/, val/, each of which "
            "would be trained on as a class; pass data.train_path={root}/train "
            "data.val_path={root}/val.",
        ),
        (
            "data.val_path={root}",
            "`data.val_path` = {root} and `data.train_path` = {root}/train hold different class "
            "folders (only in val: ['train', 'val'], only in train: ['class_0', 'class_1',",
        ),
    ],
)
def test_a_run_that_would_train_wrong_or_nothing_is_refused_before_training(
    data, tmp_path, capsys, value, message
):
    line, _ = refused(PRETRAIN + overrides(data, tmp_path) + [value.format(root=data)], capsys)
    assert line.startswith("solo-diet pretrain: ") and message.format(root=data) in line, line
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def with_weights(checkpoint: Path, name: str, change) -> Path:
    """A copy of ``checkpoint`` beside it (and its args.json), each floating-point weight
    ``change(weight)``."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    weights = state["state_dict"]
    state["state_dict"] = {k: change(w) if w.is_floating_point() else w for k, w in weights.items()}
    torch.save(state, checkpoint.with_name(name))
    return checkpoint.with_name(name)


def test_linear_refuses_a_diverged_backbone_and_stops_a_diverging_probe(
    data, checkpoint, tmp_path, capsys
):
    diverged = with_weights(checkpoint, "nan-ep=7.ckpt", lambda w: torch.full_like(w, math.nan))
    argv = LINEAR + linear_overrides(data, tmp_path)
    line, _ = refused(argv + [f"pretrained_feature_extractor={diverged}"], capsys)
    assert re.fullmatch(
        rf"solo-diet linear: `pretrained_feature_extractor`: {re.escape(str(diverged))} holds NaN "
        r"or infinite weights \(`[\w.]+` and \d+ more\): its pretraining diverged; pretrain again "
        r"with a smaller `optimizer.lr`.",
        line,
    ), line
    probe = argv + [f"pretrained_feature_extractor={checkpoint}"]
    line, _ = refused(probe + ["optimizer.lr=inf"], capsys)
    assert line.startswith("solo-diet linear: `optimizer.lr` is inf: every number of a run")
    # finite weights whose features overflow float32: the probe's loss is NaN from its first step
    huge = with_weights(checkpoint, "huge-ep=7.ckpt", lambda w: w * 1e30)
    line, out = refused(argv + [f"pretrained_feature_extractor={huge}"], capsys)
    assert line.startswith(
        "solo-diet linear: the training diverged: the loss became NaN or infinite at step 0 of "
        "epoch 0;"
    ), line
    assert "top-1" not in out


def test_a_second_pretrain_into_a_run_folder_in_use_exits_2_naming_the_first(
    data, tmp_path, capsys
):
    argv = PRETRAIN + overrides(data, tmp_path, epochs=30)
    first = subprocess.Popen(
        [sys.executable, "-m", "solo_diet.cli.main", *argv],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 300
        while not list(tmp_path.glob("diet/*/*.ckpt")) and time.time() < deadline:
            assert first.poll() is None
            time.sleep(0.05)
        first.send_signal(signal.SIGSTOP)  # holds the run folder's lock: auto-resume finds it
        (folder,) = tmp_path.glob("diet/*")
        line, _ = refused(argv, capsys)
        started = re.search(r"\(started [^)]*\)", line)
        assert started and line == (
            f"solo-diet pretrain: the run folder {folder} is in use by `solo-diet pretrain` PID "
            f"{first.pid} on {socket.gethostname()} {started[0]}: wait for it to end, or start a "
            "new run with auto_resume.enabled=False or another `checkpoint.dir`."
        )
    finally:
        first.kill()
        first.wait()
    code, out, err = cli(argv, capsys)  # the killed run's lock is taken over: it resumes
    assert code == 0, err
    assert (
        f"taking over the lock {folder / '.run.lock'} of `solo-diet pretrain` PID {first.pid}"
        in out
    )
    assert last_line(out).startswith(f"last checkpoint: {folder}{os.sep}")
    assert (folder / ".run.lock").read_text() == ""


def test_compare_refuses_a_non_finite_run_setting_before_the_first_job(data, tmp_path, capsys):
    runs = "runs=[{name: diet, config_name: diet, overrides: [optimizer.lr=inf]}]"
    argv = ["compare", str(SHIPPED_SPEC), *compare_overrides(data, tmp_path / "out"), runs]
    line, _ = refused(argv, capsys)
    assert line.startswith("solo-diet compare: ") and "`optimizer.lr` is inf" in line, line
    assert not (tmp_path / "out").exists()
