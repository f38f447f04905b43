"""Same loss, different labels (Birth-of-SSL paper): label sources for DIET and the closed-form
head on Animal-MNIST.

One table. Every run pretrains a ``cp_resnet8`` with the demo recipe (solo_diet/configs/demo: AdamW,
batch 128, crop 16 px) for the same number of epochs, then the demo's offline linear probe (all
training labels) reports val top-1:

- ``diet`` with ``labels=index`` (the DIET paper), ``class`` (supervised, 100 % and 10 % of the
  labels) and ``mix`` (10 % labelled, the rest their own class: semi-supervised DIET), one view per
  image;
- ``diet_cf`` (closed-form ridge head, Birth-of-SSL paper, Lemma 1) with ``index`` and ``mix``
  (10 %), two views;
- a random-init backbone of the same architecture.

Equal budget = equal epochs and batch size; ``diet_cf`` forwards two views per image (its loss needs
them with index labels), so it does twice DIET's forward work per epoch: the ``views`` column says
so.

    python benchmarks/labels_animal_mnist.py                      # GPU, 100 epochs
    python benchmarks/labels_animal_mnist.py --tiny               # CPU smoke run (a few minutes)
    python benchmarks/labels_animal_mnist.py --runs "diet index,diet_cf index" --epochs 30

Needs ``pip install --no-deps animal-mnist==0.4`` (``solo-diet data animal-mnist`` says so).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Optional

from solo_diet.cli.data import write_dataset
from solo_diet.cli.demo import DEMO_CONFIGS
from solo_diet.launch.checkpointing import save_random_init
from solo_diet.launch.common import compose_cfg
from solo_diet.launch.linear import run_linear
from solo_diet.launch.pretrain import run_pretrain

CF_KWARGS = {"lam": 0.1, "proj_layers": 2, "proj_hidden_dim": 512, "proj_output_dim": 256}

RUNS = [
    # name, method, views, method_kwargs
    ("diet index", "diet", 1, {"labels": "index"}),
    ("diet class 100%", "diet", 1, {"labels": "class"}),
    ("diet class 10%", "diet", 1, {"labels": "class", "labelled_fraction": 0.1}),
    ("diet mix 10%", "diet", 1, {"labels": "mix", "labelled_fraction": 0.1}),
    ("diet_cf index", "diet_cf", 2, {"labels": "index", **CF_KWARGS}),
    ("diet_cf mix 10%", "diet_cf", 2, {"labels": "mix", "labelled_fraction": 0.1, **CF_KWARGS}),
]


def device_overrides(args: argparse.Namespace) -> list[str]:
    precision = "bf16-mixed" if args.accelerator == "gpu" else "32"
    return [
        f"accelerator={args.accelerator}",
        "devices=1",
        f"precision={precision}",
        f"data.num_workers={args.workers}",
    ]


def pretrain_cfg(
    args: argparse.Namespace,
    data: Path,
    workdir: Path,
    name: str,
    method: str,
    views: int,
    method_kwargs: dict,
):
    cfg = compose_cfg(
        str(DEMO_CONFIGS),
        "diet",
        [
            f"data.train_path={data / 'train'}",
            f"data.val_path={data / 'val'}",
            f"checkpoint.dir={workdir / name.replace(' ', '_').replace('%', 'pct')}",
            f"max_epochs={args.epochs}",
            f"optimizer.batch_size={args.batch_size}",
            f"backbone.kwargs.width={args.width}",
        ]
        + device_overrides(args),
    )
    cfg.name = f"labels-{name.replace(' ', '-').replace('%', 'pct')}"
    cfg.method = method
    cfg.method_kwargs = (
        {"label_smoothing": 0.8, **method_kwargs} if method == "diet" else dict(method_kwargs)
    )
    cfg.augmentations[0].num_crops = views
    return cfg


def probe(args: argparse.Namespace, data: Path, workdir: Path, ckpt: str) -> float:
    overrides = [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        f"pretrained_feature_extractor='{ckpt}'",
        f"++checkpoint.dir={workdir / 'linear'}",
        f"max_epochs={args.linear_epochs}",
        f"optimizer.batch_size={args.linear_batch_size}",
    ] + device_overrides(args)
    return float(run_linear(compose_cfg(str(DEMO_CONFIGS), "linear", overrides))["val_acc1"])


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="labels-animal-mnist")
    parser.add_argument("--accelerator", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--linear-epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--linear-batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--limit", type=int, default=None, help="training images kept (stratified); all by default"
    )
    parser.add_argument(
        "--runs",
        default=None,
        help="comma-separated run names to keep (default: all), e.g. 'diet index,diet_cf index'",
    )
    parser.add_argument(
        "--tiny", action="store_true", help="CPU smoke run: 200 images, 1 epoch, width 8"
    )
    args = parser.parse_args(argv)
    if args.tiny:
        args.accelerator, args.epochs, args.linear_epochs = "cpu", 1, 1
        args.batch_size, args.linear_batch_size, args.width, args.workers, args.limit = (
            32,
            32,
            8,
            0,
            200,
        )

    runs = RUNS if args.runs is None else [run for run in RUNS if run[0] in args.runs.split(",")]
    if not runs:
        raise ValueError(f"--runs {args.runs!r} matches none of {[run[0] for run in RUNS]}.")
    workdir = Path(args.workdir).expanduser().resolve()
    data = write_dataset("animal-mnist", str(workdir / "data"), limit=args.limit)
    rows, first_cfg = [], None
    for name, method, views, method_kwargs in runs:
        cfg = pretrain_cfg(args, data, workdir, name, method, views, method_kwargs)
        start = time.time()
        ckpt = run_pretrain(cfg)
        seconds = time.time() - start
        if ckpt is None:
            raise RuntimeError(f"{name}: pretraining wrote no checkpoint")
        first_cfg = (
            first_cfg or cfg
        )  # parsed by run_pretrain, num_samples set: rebuilds an untrained model
        rows.append((name, method, views, probe(args, data, workdir, ckpt), seconds))
        print(f"[labels] {name}: {rows[-1][3]:.2f}% top-1 ({seconds:.0f}s pretraining)", flush=True)

    untrained = save_random_init(first_cfg, workdir / "random_init" / "untrained.ckpt")
    rows.append(("random init", "-", 1, probe(args, data, workdir, str(untrained)), 0.0))

    print(
        f"\nAnimal-MNIST, cp_resnet8 width {args.width}, {args.epochs} epochs, batch "
        f"{args.batch_size}, {args.accelerator}; linear probe {args.linear_epochs} epochs on all "
        "training labels"
    )
    print(f"| {'run':<18} | {'method':<8} | views | val top-1 (%) | pretrain (s) |")
    print(f"|{'-' * 20}|{'-' * 10}|-------|---------------|--------------|")
    for name, method, views, accuracy, seconds in rows:
        print(f"| {name:<18} | {method:<8} | {views:>5} | {accuracy:>13.2f} | {seconds:>12.0f} |")


if __name__ == "__main__":
    main()
