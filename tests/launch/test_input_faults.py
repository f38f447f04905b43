"""Inputs that used to run silently or end in a traceback: each is one line (exit 2; a full disk
exit 1 naming the folder and its free space), before anything trains or is written."""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path
from typing import Callable

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import torch
from omegaconf import OmegaConf

from solo_diet.launch.common import compose_cfg
from solo_diet.launch.errors import run_guarded
from solo_diet.launch.launch_checks import (
    check_cfg_before_parse,
    check_solo_learn_choices,
    check_strategy_name,
)

pytestmark = pytest.mark.solo

DEMO = str(Path(__file__).resolve().parents[2] / "solo_diet" / "configs" / "demo")


def one_line(func: Callable[[], object], capsys, code: int = 2) -> str:
    """``func`` run as a command ends with ``code`` and one line on stderr; that line."""
    capsys.readouterr()
    assert run_guarded("pretrain", lambda: func() or 0) == code
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line.removeprefix("solo-diet pretrain: ")


def checked(overrides: list[str]) -> None:
    check_cfg_before_parse(compose_cfg(DEMO, "diet.yaml", overrides))


REFUSED = [
    ("++foo=1", "`foo` is not a key solo-learn, Lightning or solo-diet reads, so `+`/`++` would"),
    ("+optimizer.foo=1", "`optimizer.foo` is not a key solo-learn, Lightning or solo-diet reads"),
    ("++max_epoch=3", "`max_epoch` is not a key solo-learn or Lightning reads, so it would be"),
    ("optimizer.lr=inf", "`optimizer.lr` is inf: every number of a run must be finite"),
    ("optimizer.classifier_lr=-1", "`optimizer.classifier_lr` must be a positive finite number"),
    ("scheduler.warmup_epochs=-3", "`scheduler.warmup_epochs` must be in [0.0, inf), got -3."),
    ("++limit_train_batches=-1", "`limit_train_batches` must be a batch count (an integer >= 0)"),
    ("++limit_val_batches=1.5", "`limit_val_batches` must be a batch count (an integer >= 0) or"),
    ("++accumulate_grad_batches=0", "`accumulate_grad_batches` must be a positive integer, got"),
    ("++max_steps=0", "`max_steps` is 0, so nothing would train and no checkpoint would be"),
    ("++scheduler.min_lr=-1e-3", "`scheduler.min_lr` must be in [0.0, inf), got -0.001."),
    ("++scheduler.warmup_start_lr=-1", "`scheduler.warmup_start_lr` must be in [0.0, inf), got -1"),
    ("scheduler.name=step", "`scheduler.lr_decay_steps` must list the epochs at which `scheduler"),
]


@pytest.mark.parametrize("override, message", REFUSED, ids=[o for o, _ in REFUSED])
def test_a_bad_or_unread_key_is_one_line(override, message, capsys):
    assert one_line(lambda: checked([override]), capsys).startswith(message)


def test_a_strategy_lightning_does_not_register_is_one_line(capsys):
    for valid in ("auto", "DDP", "ddp_spawn", "fsdp"):
        check_strategy_name(OmegaConf.create({"strategy": valid}))
    cfg = compose_cfg(DEMO, "diet.yaml", ["strategy=ddpp"])
    line = one_line(lambda: check_strategy_name(cfg), capsys)
    assert line.startswith("`strategy` must be auto or a strategy Lightning registers (ddp, ")
    assert line.endswith("got 'ddpp'; did you mean 'ddp'?")


def test_added_keys_that_something_reads_or_the_yaml_holds_pass(tmp_path):
    known = ["++limit_train_batches=2", "++data.gpu.storage=auto", "++probe=sem", "++sem_tau=0.1"]
    checked([*known, "++allow_pickle_checkpoint=False", "+optimizer.kwargs.momentum=0.9"])
    (tmp_path / "own.yaml").write_text("my_key: 1\noptimizer:\n  my_option: 2\n")
    cfg = compose_cfg(str(tmp_path), "own.yaml", ["++my_key=3", "++optimizer.my_option=4"])
    assert (cfg.my_key, cfg.optimizer.my_option) == (3, 4)


def test_a_config_yaml_that_is_no_mapping_is_named(tmp_path, capsys):
    (tmp_path / "x.yaml").write_text("just a string\n")
    line = one_line(lambda: compose_cfg(str(tmp_path), "x.yaml", []), capsys)
    assert line.startswith(f"--config-name 'x.yaml': {tmp_path}/x.yaml is not a YAML mapping")


def test_optimizer_kwargs_values_the_optimizer_refuses_are_one_line(capsys):
    from solo.methods import METHODS

    import solo_diet

    solo_diet.register()
    overrides = ["optimizer.name=adamw", "++optimizer.kwargs={betas:[2.0,0.999]}"]
    cfg = compose_cfg(DEMO, "diet.yaml", overrides)
    assert one_line(lambda: check_solo_learn_choices(cfg, METHODS["diet"]), capsys) == (
        "`optimizer.kwargs` is refused by the `adamw` optimizer (torch.optim.adamw.AdamW): "
        "Invalid beta parameter at index 0: 2.0."
    )


def test_a_checkpoint_dir_that_is_a_file_or_read_only_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").touch()
    line = one_line(lambda: checked([f"checkpoint.dir={tmp_path}/file/runs"]), capsys)
    assert line == f"`checkpoint.dir` {tmp_path}/file/runs: {tmp_path}/file is a file, not a " + (
        "folder: pick another."
    )
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path and real(p, mode))
    line = one_line(lambda: checked([f"checkpoint.dir={tmp_path}/runs"]), capsys)
    assert line.startswith(f"`checkpoint.dir` {tmp_path}/runs: {tmp_path} is not writable (a ")


@pytest.mark.parametrize(
    "error",
    [OSError(errno.EROFS, "Read-only file system", "/ro/x"), FileExistsError(17, "File exists")],
)
def test_a_read_only_or_taken_destination_met_later_is_one_line(error, capsys):
    def fail() -> None:
        raise error

    assert one_line(fail, capsys) == str(error)


class FullAfter:
    """A file whose writes fail with the kernel's ENOSPC once ``room`` bytes are written."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data) -> int:
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()


def test_a_full_disk_inside_torchs_zip_writer_is_one_line_with_the_free_space(
    tmp_path, capsys, monkeypatch
):
    import solo_diet.core.atomic as atomic
    from solo_diet.launch.checkpointing import AtomicCheckpointIO

    real = atomic._temporary_beside

    def full(target: Path, binary: bool):
        temporary, handle = real(target, binary)
        return temporary, FullAfter(handle, 4096)

    monkeypatch.setattr(atomic, "_temporary_beside", full)
    path = tmp_path / "run" / "diet-ep=0.ckpt"
    save = lambda: AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(1 << 16)}, path)  # noqa
    line = one_line(save, capsys, code=1)
    assert (
        line.startswith(f"no space left on the device of {path.parent} (") and "MiB free)" in line
    )
    assert not list(path.parent.iterdir())


def test_a_full_disk_when_args_json_is_written_is_one_line(tmp_path, capsys, monkeypatch):
    import solo_diet.launch.checkpointing as checkpointing

    def no_space(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpointing, "write_text_atomic", no_space)
    checkpointer = checkpointing.RunCheckpointer.__new__(checkpointing.RunCheckpointer)
    checkpointer.cfg, checkpointer.path = OmegaConf.create({"name": "x"}), tmp_path
    trainer = type("Trainer", (), {"is_global_zero": True})()
    line = one_line(lambda: checkpointer.save_args(trainer), capsys, code=1)
    assert line.startswith(f"no space left on the device of {tmp_path} (")
    assert "while saving args.json" in line


def test_allow_pickle_checkpoint_reaches_pretrains_resume_reader(tmp_path):
    from solo_diet.launch.checkpointing import check_checkpoint_key
    from solo_diet.launch.common import normalize_devices, trainer_kwargs
    from solo_diet.methods.checkpoint import UnsafeCheckpoint

    path = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": {}, "extra": io.BytesIO(b"x")}, path)
    cfg = compose_cfg(DEMO, "diet.yaml", ["++allow_pickle_checkpoint=True", "accelerator=cpu"])
    normalize_devices(cfg)
    reader = trainer_kwargs(cfg, [], None)["plugins"][-1]
    check_checkpoint_key("resume_from_checkpoint", str(path), allow_pickle=True)
    with pytest.warns(UserWarning, match="loading .* with pickle"):
        assert reader.load_checkpoint(path)["extra"].getvalue() == b"x"
    with pytest.raises(UnsafeCheckpoint):
        type(reader)().load_checkpoint(path)
