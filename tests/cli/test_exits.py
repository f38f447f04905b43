"""How launches end: exit codes after SIGINT/SIGTERM, a finished run rerun, auto-resume refused on
other data, one-line user errors (``--debug`` for the traceback), an unreadable image named."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests._helpers import SCRIPTS, requires_solo
from tests._helpers.cli import LINEAR, PRETRAIN, cli, last_line, linear_overrides, overrides

pytestmark = [pytest.mark.solo, requires_solo()]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from tests._helpers.synthetic import write_image_folder

    root = tmp_path_factory.mktemp("data")
    write_image_folder(root / "train", num_classes=5, per_class=6, seed=0)
    write_image_folder(root / "val", num_classes=5, per_class=2, seed=1)
    return root


def copy_data(data: Path, to: Path) -> Path:
    shutil.copytree(data, to)
    return to


def test_a_finished_run_is_a_no_op_and_its_probe_checks_its_choices(data, tmp_path, capsys):
    code, out, _ = cli(PRETRAIN + overrides(data, tmp_path), capsys)
    assert code == 0
    ckpt = Path(last_line(out).removeprefix("last checkpoint: "))
    stamp = ckpt.stat().st_mtime_ns

    code, out, err = cli(PRETRAIN + overrides(data, tmp_path), capsys)
    assert code == 0, err
    assert f"nothing to train: {ckpt} already holds the last of max_epochs=1" in out
    assert last_line(out) == f"last checkpoint: {ckpt}"
    assert ckpt.stat().st_mtime_ns == stamp and len(list(tmp_path.glob("diet/*"))) == 1

    # the probe's choices are checked once its checkpoint has filled in the backbone
    probe = LINEAR + linear_overrides(data, tmp_path) + [f"pretrained_feature_extractor={ckpt}"]
    code, _, err = cli(probe + ["optimizer.name=sgdd"], capsys)
    assert code == 2 and "Traceback" not in err
    assert last_line(err).startswith("solo-diet linear: `optimizer.name` must be one of ['adam'")
    assert last_line(err).endswith("got 'sgdd'; did you mean 'sgd'?")
    probe = LINEAR + linear_overrides(data, tmp_path)
    code, _, err = cli(probe + [f"pretrained_feature_extractor={ckpt.parent}"], capsys)
    assert code == 2 and last_line(err).endswith(
        f"is a folder, not a .ckpt file; its newest .ckpt is {ckpt}."
    )


@pytest.mark.parametrize("change", ["train_path", "dataset_size"])
def test_auto_resume_refuses_a_run_on_other_data(data, tmp_path, capsys, change):
    first = copy_data(data, tmp_path / "first")
    assert cli(PRETRAIN + overrides(first, tmp_path / "runs", batches=1), capsys)[0] == 0
    if change == "train_path":
        second, key = copy_data(data, tmp_path / "second"), "data.train_path"
    else:
        second, key = first, "method_kwargs.num_samples=30"
        shutil.copy(
            next((first / "train" / "class_0").iterdir()), first / "train" / "class_0" / "extra.png"
        )

    code, _, err = cli(PRETRAIN + overrides(second, tmp_path / "runs", batches=1), capsys)
    assert code == 2
    assert last_line(err).startswith("solo-diet pretrain: auto-resume found ") and key in last_line(
        err
    )
    assert "Traceback" not in err


class SignalAtEpoch:
    """Sends ``signum`` to this process when epoch ``epoch`` starts (after the last checkpoint)."""

    def __new__(cls, signum: int, epoch: int = 1):
        from lightning.pytorch.callbacks import Callback

        class _Send(Callback):
            def on_train_epoch_start(self, trainer, pl_module):
                if trainer.current_epoch == epoch:
                    os.kill(os.getpid(), signum)

        return _Send()


def tiny_pretrain_cfg(data: Path, out: Path, epochs: int):
    from solo_diet.launch.common import compose_cfg

    return compose_cfg(
        str(SCRIPTS / "pretrain" / "custom"), "diet", overrides(data, out, epochs=epochs, batches=1)
    )


@pytest.fixture
def sigint_as_in_a_terminal():
    """SIGINT raises KeyboardInterrupt, as in a terminal, even where pytest started with SIGINT
    ignored (a background job of a script: Python then installs no handler)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_inside_fit_exits_128_plus_its_number_and_names_the_checkpoint(
    data, tmp_path, capsys, sigint_as_in_a_terminal, signum, code
):
    from solo_diet.launch.errors import run_guarded
    from solo_diet.launch.pretrain import run_pretrain

    cfg = tiny_pretrain_cfg(data, tmp_path, epochs=5)
    assert (
        run_guarded("pretrain", lambda: run_pretrain(cfg, extra_callbacks=[SignalAtEpoch(signum)]))
        == code
    )
    (ckpt,) = tmp_path.glob("diet/*/*.ckpt")
    assert ckpt.name.endswith("-ep=0.ckpt")
    name = signal.Signals(signum).name
    expected = f"solo-diet pretrain: interrupted by {name}; run the same command again"
    assert last_line(capsys.readouterr().err) == f"{expected} to resume from {ckpt}."


def test_lightnings_own_sigterm_stop_raises_interrupted(data, tmp_path):
    """Without our handler (library use) Lightning stops after the current batch with a SystemExit
    of status 0; run_pretrain turns it into Interrupted."""
    from solo_diet.launch.errors import Interrupted
    from solo_diet.launch.pretrain import run_pretrain

    with pytest.raises(Interrupted) as stop:
        run_pretrain(
            tiny_pretrain_cfg(data, tmp_path, epochs=5),
            extra_callbacks=[SignalAtEpoch(signal.SIGTERM)],
        )
    (ckpt,) = tmp_path.glob("diet/*/*.ckpt")
    assert (
        stop.value.exit_code == 143
        and stop.value.resume == f"run the same command again to resume from {ckpt}."
    )


def test_ctrl_c_on_the_command_line_exits_130_without_a_last_checkpoint(data, tmp_path):
    """The real process: SIGINT while `solo-diet pretrain` trains (a budget it cannot finish
    before the signal, however fast the machine; a checkpoint every epoch)."""
    command = (
        [sys.executable, "-m", "solo_diet.cli.main"]
        + PRETRAIN
        + overrides(data, tmp_path, epochs=100_000, batches=1)
        + ["checkpoint.frequency=1"]
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(SCRIPTS.parent), os.environ.get("PYTHONPATH")])
        ),
    }
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    try:
        deadline = time.time() + 300
        while (
            not list(tmp_path.glob("diet/*/*.ckpt"))
            and process.poll() is None
            and time.time() < deadline
        ):
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=300)
    finally:
        process.kill()
    assert process.returncode == 130, err[-2000:]
    assert "last checkpoint:" not in out
    # one checkpoint, or two when the signal lands between writing the next and removing the last
    ckpts = list(tmp_path.glob("diet/*/*.ckpt"))
    assert 1 <= len(ckpts) <= 2
    assert last_line(err).startswith(
        "solo-diet pretrain: interrupted by SIGINT; run the same command again"
    )
    assert any(str(ckpt.relative_to(tmp_path)) in last_line(err) for ckpt in ckpts)


@pytest.mark.parametrize(
    "command, extra, message",
    [
        (
            "pretrain",
            ["++method_kwargs.num_samples=7"],
            "method_kwargs.num_samples=7 but the training set has 30",
        ),
        (
            "pretrain",
            ["no_such_key=1"],
            "`no_such_key` is not a key of the config. `+no_such_key=...` would add it as a new",
        ),
        ("pretrain", ["max_epoch=3"], "not a key of the config; did you mean `max_epochs`?"),
        ("pretrain", ["optimizer.lrr=0.1"], "of `optimizer`; did you mean `optimizer.lr`?"),
        ("pretrain", ["data.train_path=/nowhere/train"], "`data.train_path` /nowhere/train does"),
        ("linear", ["data.val_path=/nowhere/val"], "`data.val_path` /nowhere/val does not"),
        (
            "pretrain",
            ["data.dataset=no_such_dataset"],
            "`data.dataset` must be one of ['cifar10', 'cifar100', 'imagenet', 'imagenet100', ",
        ),
        ("pretrain", ["optimizer.name=adamw2"], "`optimizer.name` must be one of ['adam', "),
        ("pretrain", ["backbone.name=resnet19"], "got 'resnet19'; did you mean 'resnet18'?"),
        (
            "pretrain",
            ["scheduler.name=cosine"],
            "must be one of ['none', 'step', 'warmup_cosine'], got 'cosine'; did you mean",
        ),
        ("pretrain", ["scheduler.name=reduce"], "one of ['none', 'step', 'warmup_cosine'], got 'r"),
        (
            "pretrain",
            ["++optimizer.kwargs.lr=0.1"],
            "`optimizer.kwargs.lr`: solo-learn passes the optimizer `optimizer.lr` itself; set",
        ),
        (
            "pretrain",
            ["++optimizer.kwargs.betass=[0.9,0.99]"],
            "`optimizer.kwargs.betass` is not a setting of the `adamw` optimizer "
            "(torch.optim.adamw.AdamW). Did you mean `optimizer.kwargs.betas`?",
        ),
        (
            "linear",
            ["pretrained_feature_extractor=/nowhere/run.ckpt"],
            "checkpoint /nowhere/run.ckpt does not exist",
        ),
        ("linear", [], "`pretrained_feature_extractor` is not set"),
        ("pretrain", ["optimizer.batch_size=0"], "`optimizer.batch_size` must be a positive"),
        ("pretrain", ["optimizer.lr=-1"], ".lr` must be a positive finite number, got -1"),
        (
            "pretrain",
            ["optimizer.lr=nan"],
            "`optimizer.lr` is nan: every number of a run must be finite",
        ),
        ("pretrain", ["max_epochs=0"], "`max_epochs` must be a positive integer, got 0"),
        ("pretrain", ["++backbone.kwargs.width=0"], "`backbone.kwargs.width` must be a positive"),
        (
            "pretrain",
            ["++backbone.kwargs.widht=8"],
            "`backbone.kwargs.widht` is not a setting of the `cp_resnet8` backbone "
            "(solo_diet.core.backbones.ResNet8). Did you mean `backbone.kwargs.width`?",
        ),
        (
            "pretrain",
            ["backbone.name=resnet18", "~backbone.kwargs.width", "++backbone.kwargs.zero_init=1"],
            "backbone (torchvision.models.resnet.ResNet). Did you mean "
            "`backbone.kwargs.zero_init_residual`?",
        ),
        (
            "pretrain",
            ["gradient_clip_val=1.0"],
            "`gradient_clip_val` is not in the YAML, though solo-learn or Lightning reads it: "
            "write `+gradient_clip_val=...` to add it.",
        ),
        ("linear", ["optimizer.batch_size=0"], "`optimizer.batch_size` must be a positive"),
        ("linear", ["++label_smoothing=2"], "`label_smoothing` must be in [0.0, 1.0), got 2."),
        ("linear", ["++finetune=yes"], "`finetune` must be True or False, got 'yes'."),
        # a quoted 'False' is a string, which solo-learn's `if cfg.checkpoint.enabled:` reads as on
        (
            "pretrain",
            ["checkpoint.enabled='False'"],
            "`checkpoint.enabled` must be True or False, got 'False'.",
        ),
        ("linear", ["++auto_augment='False'"], "`auto_augment` must be True or False, got 'False'"),
        (
            "pretrain",
            ["++gradient_clip_val=-1.0"],
            "`gradient_clip_val` must be in [0.0, inf), got -1.0.",
        ),
        ("pretrain", ["accelerator=tpu"], "`accelerator` must be auto, cpu or gpu (solo-diet's"),
        ("linear", ["accelerator=mps"], "`accelerator` must be auto, cpu or gpu (solo-diet's"),
        (
            "pretrain",
            ["++method_kwargs.label_smooting=0.5"],
            "Did you mean `method_kwargs.label_smoothing`?",
        ),
        (
            "pretrain",
            ["++augmentations.0.rrc.crop_min_scal=0.3"],
            "`augmentations[0].rrc.crop_min_scal` is not a key of solo-learn's `rrc`",
        ),
        (
            "pretrain",
            ["augmentations.0.num_crops=0"],
            "`augmentations[0].num_crops` must be a positive integer, got 0.",
        ),
        (
            "pretrain",
            ["++augmentations.0.horizontal_flip.prob=2"],
            "`augmentations[0].horizontal_flip.prob` must be a probability in [0, 1], got 2.",
        ),
        ("pretrain", ["++max_epoch=3"], "`max_epoch` is not a key solo-learn or Lightning reads"),
        (
            "pretrain",
            ["++optimizer.weight_decy=0"],
            "would be ignored; did you mean `optimizer.weight_decay`?",
        ),
        ("linear", ["++data.num_worker=2"], "would be ignored; did you mean `data.num_workers`?"),
        ("linear", ["++precison=32"], "would be ignored; did you mean `precision`?"),
    ],
)
def test_user_errors_are_one_line_with_status_2(data, tmp_path, capsys, command, extra, message):
    argv = (
        PRETRAIN + overrides(data, tmp_path)
        if command == "pretrain"
        else LINEAR + linear_overrides(data, tmp_path)
    )
    argv += extra
    code, _, err = cli(argv, capsys)
    assert code == 2
    assert last_line(err).startswith(f"solo-diet {command}: ") and message in last_line(err)
    assert "Traceback" not in err and not list(tmp_path.glob("diet/*"))


def test_an_sdiet_yaml_with_an_old_head_row_key_is_one_line_naming_the_new_key(
    data, tmp_path, capsys
):
    """``method_kwargs.storage`` became ``row_placement`` (``storage`` is the GPU data path's)."""
    argv = [*PRETRAIN[:-1], "sdiet"] + [  # the s-DIET YAML has no wandb section
        f"+{o}" if o.startswith("wandb.") else o for o in overrides(data, tmp_path)
    ]
    code, _, err = cli(argv + ["++method_kwargs.storage=gpu"], capsys)
    assert code == 2 and "Traceback" not in err
    assert last_line(err) == (
        "solo-diet pretrain: `method_kwargs.storage` was renamed `method_kwargs.row_placement`: "
        "write `method_kwargs.row_placement: gpu` instead (a checkpoint saved with the old key "
        "still loads)."
    )
    assert not list(tmp_path.glob("sdiet/*"))


def test_wandb_without_an_api_key_is_one_line(data, tmp_path, capsys, monkeypatch):
    pytest.importorskip("wandb")  # solo-learn's requirement; a lent GPU machine's image lacks it
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for variable in ("NETRC", "WANDB_CONFIG_DIR", "WANDB_DIR"):  # no stored login either
        monkeypatch.setenv(variable, str(tmp_path / "wandb-home" / variable.lower()))
    argv = PRETRAIN + overrides(data, tmp_path) + ["wandb.enabled=True", "++wandb.offline=False"]
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert last_line(err).startswith(
        "solo-diet pretrain: `wandb.enabled: True`, but wandb did not start a run ("
    )
    assert last_line(err).endswith("or turn wandb off with wandb.enabled=False.")
    assert not list(tmp_path.glob("diet/*"))


def test_wandb_not_installed_is_one_line(data, tmp_path, capsys, monkeypatch):
    """solo-learn installed without its requirements: no wandb to import."""
    for name in [n for n in sys.modules if n == "wandb" or n.startswith("wandb.")] or ["wandb"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    argv = PRETRAIN + overrides(data, tmp_path) + ["wandb.enabled=True", "++wandb.offline=True"]
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert last_line(err) == (
        "solo-diet pretrain: `wandb.enabled: True`, but wandb is not installed: `pip install "
        "wandb`, or turn wandb off with wandb.enabled=False."
    )
    assert not list(tmp_path.glob("diet/*"))


@pytest.mark.parametrize("how", ["--debug", "SOLO_DIET_DEBUG=1"])
def test_debug_shows_the_traceback(data, tmp_path, capsys, monkeypatch, how):
    if how == "--debug":
        argv = ["--debug"] + PRETRAIN
    else:
        argv = PRETRAIN
        monkeypatch.setenv("SOLO_DIET_DEBUG", "1")
    code, _, err = cli(argv + overrides(data, tmp_path) + ["++method_kwargs.num_samples=7"], capsys)
    assert code == 2
    assert "Traceback (most recent call last)" in err and "ConfigError" in err
    assert last_line(err).startswith("solo-diet pretrain: method_kwargs.num_samples=7")


def truncate_class(folder: Path) -> list[Path]:
    """Cut every image of one class to half its bytes (as an interrupted copy leaves them)."""
    files = sorted(folder.iterdir())
    for path in files:
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return files


@pytest.mark.parametrize("workers", [0, 1])
def test_an_unreadable_image_is_named_and_leaves_no_run_folder(data, tmp_path, capsys, workers):
    copy = copy_data(data, tmp_path / "data")
    broken = truncate_class(copy / "train" / "class_0")
    argv = (
        PRETRAIN + overrides(copy, tmp_path / "runs", batches=100) + [f"data.num_workers={workers}"]
    )
    code, out, err = cli(argv, capsys)
    assert code == 2
    line = last_line(err)
    assert line.startswith("solo-diet pretrain: cannot read image ") and "truncated" in line
    assert any(str(path) in line for path in broken)
    assert "last checkpoint:" not in out and not (tmp_path / "runs" / "diet").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["pretrain", "compare"])
def test_a_gpu_accelerator_without_cuda_is_one_line_before_anything_runs(
    data, tmp_path, capsys, command
):
    if command == "pretrain":
        argv = PRETRAIN + overrides(data, tmp_path) + ["accelerator=gpu"]
    else:
        from tests._helpers.compare import SHIPPED_SPEC

        argv = ["compare", str(SHIPPED_SPEC), f"data.root={data}", f"output_dir={tmp_path / 'c'}"]
        argv += ["trainer=[accelerator=gpu]", "budget.batch_size=4"]  # a batch the data holds
    code, _, err = cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert "but torch sees no CUDA device: use accelerator=cpu" in last_line(err)
    assert not list(tmp_path.glob("diet/*")) and not (tmp_path / "c" / "runs").exists()


def test_a_yaml_mistake_is_one_line_with_status_2(data, tmp_path, capsys):
    configs = shutil.copytree(SCRIPTS / "pretrain" / "custom", tmp_path / "configs")
    with (configs / "diet.yaml").open("a") as f:
        f.write("max_epochs: 3\n")  # a second max_epochs: a duplicate key
    argv = ["pretrain", "--config-path", str(configs), "--config-name", "diet"]
    code, _, err = cli(argv + overrides(data, tmp_path / "runs"), capsys)
    assert code == 2 and "Traceback" not in err
    assert last_line(err).startswith("solo-diet pretrain: while constructing a mapping")
    assert "found duplicate key max_epochs" in last_line(err)


def test_the_resume_hint_of_a_step_without_checkpoints_says_it_starts_over():
    from omegaconf import OmegaConf

    from solo_diet.launch.common import resume_hint

    hint = resume_hint(OmegaConf.create({"checkpoint": {"enabled": False}}), None)
    assert (
        hint
        == "checkpointing is off for this step, so the same command runs it again from the start."
    )


def test_the_resume_hint_names_a_checkpoint_that_is_there(tmp_path):
    """A signal between solo-learn's Checkpointer removing the previous checkpoint and recording
    the one it has just written leaves ``last_ckpt`` naming a removed file: the hint names the
    newest checkpoint in the run's folder instead."""
    from types import SimpleNamespace

    import torch
    from omegaconf import OmegaConf

    from solo_diet.launch.common import resume_hint

    written = tmp_path / "diet-ep=4.ckpt"
    torch.save({"epoch": 4, "state_dict": {"w": torch.zeros(2)}}, written)
    checkpointer = SimpleNamespace(path=tmp_path, last_ckpt=tmp_path / "diet-ep=3.ckpt")
    cfg = OmegaConf.create({"auto_resume": {"enabled": True}})
    assert resume_hint(cfg, checkpointer) == f"run the same command again to resume from {written}."
    checkpointer.last_ckpt = written
    assert resume_hint(cfg, checkpointer) == f"run the same command again to resume from {written}."


def test_a_missing_config_name_lists_the_configs_that_are_there(data, tmp_path, capsys):
    argv = ["pretrain", "--config-path", str(SCRIPTS / "pretrain" / "custom"), "--config-name"]
    code, _, err = cli(argv + ["dite"] + overrides(data, tmp_path), capsys)
    assert code == 2 and "Traceback" not in err
    assert "--config-name 'dite': no dite.yaml in " in last_line(err)
    assert "; it holds [" in last_line(err) and "'diet'" in last_line(err)


def test_a_torchvision_dataset_that_cannot_download_is_one_line_naming_its_keys(
    data, tmp_path, capsys, monkeypatch
):
    """cifar10 not under its path on a machine without a network: solo-learn's download fails."""
    from urllib.error import URLError

    import torchvision.datasets.cifar

    code, out, _ = cli(PRETRAIN + overrides(data, tmp_path / "runs"), capsys)
    ckpt = last_line(out).removeprefix("last checkpoint: ")

    def offline(*args, **kwargs):
        raise URLError(OSError(-2, "Name or service not known"))

    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", offline)
    nowhere = tmp_path / "nowhere"
    cifar = ["data.dataset=cifar10", f"data.train_path={nowhere}", f"data.val_path={nowhere}"]
    pretrain = PRETRAIN + overrides(data, tmp_path / "cifar_runs")
    probe = LINEAR + linear_overrides(data, tmp_path) + [f"pretrained_feature_extractor={ckpt}"]
    for command, argv in (("pretrain", pretrain), ("linear", probe)):
        argv = [a for a in argv if not a.startswith(("data.train_path=", "data.val_path="))]
        code, _, err = cli(argv + cifar, capsys)
        assert code == 2 and "Traceback" not in err
        assert last_line(err).startswith(
            f"solo-diet {command}: `data.dataset: cifar10`: its files are not under "
            f"`data.train_path` {nowhere}"
        )
        assert "and downloading them failed ([Errno -2] Name or service not known). " in err
        assert last_line(err).endswith(
            "or use `data.dataset: custom` with an image folder (`solo-diet data` writes some)."
        )
    assert not (tmp_path / "cifar_runs" / "diet").exists()
