"""The command line's tiny runs: the shipped custom DIET configs shrunk to a CPU second per
epoch, and the CLI called in-process with its exit code and output."""

from __future__ import annotations

from pathlib import Path

from tests._helpers import SCRIPTS

PRETRAIN = [
    "pretrain",
    "--config-path",
    str(SCRIPTS / "pretrain" / "custom"),
    "--config-name",
    "diet",
]

LINEAR = ["linear", "--config-path", str(SCRIPTS / "linear" / "custom"), "--config-name", "diet"]


def overrides(data: Path, out: Path, epochs: int = 1, batches: int = 2) -> list[str]:
    """The shipped custom DIET config shrunk to a CPU second per epoch (auto-resume stays on)."""
    return [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        "data.num_workers=0",
        f"checkpoint.dir={out}",
        "wandb.enabled=False",
        f"max_epochs={epochs}",
        "accelerator=cpu",
        "devices=1",
        "precision=32",
        f"++limit_train_batches={batches}",
        "++limit_val_batches=1",
        "++num_sanity_val_steps=0",
        "++enable_progress_bar=False",
        "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8",
        "augmentations.0.crop_size=32",
        "optimizer.batch_size=4",
    ]


def linear_overrides(data: Path, out: Path) -> list[str]:
    keep = (
        "data.",
        "checkpoint.dir",
        "wandb.",
        "max_epochs",
        "accelerator",
        "devices",
        "precision",
        "++",
    )
    return [o for o in overrides(data, out) if o.startswith(keep) and "backbone" not in o] + [
        "optimizer.batch_size=4"
    ]


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    from solo_diet.cli.main import main

    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]
