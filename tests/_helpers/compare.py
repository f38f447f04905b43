"""Shared by the ``solo-diet compare`` tests (they need solo-learn): a tiny ImageFolder and the
shipped Animal-MNIST spec shrunk to a few CPU seconds per job."""

from __future__ import annotations

import json
from pathlib import Path

from tests._helpers.synthetic import write_image_folder

SHIPPED_SPEC = Path(__file__).resolve().parents[2] / "benchmarks" / "compare" / "animal_mnist.yaml"


def write_tiny_images(root: Path) -> Path:
    """5 classes of 32 px images: 6 per class in train/, 3 in val/."""
    write_image_folder(root / "train", num_classes=5, per_class=6, size=32, seed=0)
    write_image_folder(root / "val", num_classes=5, per_class=3, size=32, seed=1)
    return root


def tiny_overrides(data_root: Path, output_dir: Path) -> list[str]:
    """2 epochs of 2 batches of 4 on the CPU, a width-8 backbone, a 1-epoch probe, tiny LiDAR; later
    overrides of the same key win."""
    return [
        f"data.root={data_root}",
        f"output_dir={output_dir}",
        "budget.max_epochs=2",
        "budget.batch_size=4",
        "budget.limit_train_batches=2",
        "trainer=[accelerator=cpu,precision=32,data.num_workers=0]",
        "pretrain_overrides=[backbone.kwargs.width=8,++checkpoint.keep_prev=True]",
        "linear.overrides=[max_epochs=1,optimizer.batch_size=8]",
        "evaluation.lidar_samples=6",
        "evaluation.lidar_views=3",
        "evaluation.batch_size=8",
    ]


def four_methods_overrides(data_root: Path, output_dir: Path) -> list[str]:
    """The shipped Animal-MNIST spec shrunk to a few CPU seconds per run, four methods."""
    return tiny_overrides(data_root, output_dir) + [
        "evaluation.rankme_every_n_epochs=1",
        "reference_rows=[]",
        "runs=[{name: diet, config_name: diet}, {name: simclr, config_name: simclr},"
        " {name: simclr_sem, config_name: simclr_sem},"
        " {name: cplearn, config_name: cplearn, overrides: [method_kwargs.proj_output_dim=64]}]",
    ]


def interrupt_after_first_epoch(run_dir: Path) -> None:
    """What a kill during epoch 2 leaves: the epoch-0 checkpoint (the later ones of a spec that
    keeps them deleted), no final state, no result."""
    for checkpoint in run_dir.glob("pretrain/**/*-ep=[1-9]*.ckpt"):
        checkpoint.unlink()
    state = json.loads((run_dir / "state.json").read_text())
    del state["checkpoint"]
    (run_dir / "state.json").write_text(json.dumps(state))
    (run_dir / "result.json").unlink()
