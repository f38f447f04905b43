"""GPU cost of Simplicial Embeddings: throughput and peak memory, SEM twin vs its base method.

Each row trains one method of the SEM paper's Table 1 through solo-learn's own class and Lightning's
loop, on synthetic CIFAR-sized batches (no data loading cost), built from our launch config
``scripts/pretrain/cifar/<method>_sem.yaml`` (L*V = 5000*13 = 65000 by default). The baseline arm is
the same config with ``method: <method>`` and no ``method_kwargs.sem``. Optimiser: plain SGD for
both arms (LARS' cost does not depend on SEM). Prints one table.

    python benchmarks/sem_throughput.py                          # 7 methods, batch 256, 16-mixed
    python benchmarks/sem_throughput.py --methods byol --num-simplices 1000
    # plumbing check on a CPU (timings meaningless):
    python benchmarks/sem_throughput.py --device cpu --backbone cp_resnet8 --num-simplices 10
        --batch-size 8 --steps 2 --warmup 1 --precision 32
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from lightning.pytorch import Callback, Trainer
from omegaconf import OmegaConf
from solo.args.pretrain import parse_cfg
from solo.methods import METHODS
from torch.utils.data import DataLoader, Dataset

import solo_diet

CONFIG_DIR = Path(__file__).resolve().parents[1] / "scripts" / "pretrain" / "cifar"
TABLE1 = ["simclr", "mocov2plus", "byol", "swav", "dino", "barlow_twins", "vicreg"]


class SyntheticCrops(Dataset):
    """``(index, [view, view], target)`` with fixed random 32 px images: no decoding, no
    augmentation."""

    def __init__(self, size: int, num_crops: int, num_classes: int):
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(size, num_crops, 3, 32, 32, generator=generator)
        self.targets = torch.randint(0, num_classes, (size,), generator=generator)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        return index, list(self.images[index]), self.targets[index]


class StepTimer(Callback):
    """Wall time of training steps after ``warmup`` steps, synchronised with the device."""

    def __init__(self, warmup: int):
        self.warmup, self.durations, self._start = warmup, [], 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.warmup and module.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        if batch_idx >= self.warmup:
            self.durations.append(time.perf_counter() - self._start)


def build_cfg(method: str, sem: bool, args: argparse.Namespace):
    overrides = [
        f"optimizer.batch_size={args.batch_size}",
        f"method_kwargs.sem.num_simplices={args.num_simplices}",
        f"method_kwargs.sem.simplex_dim={args.simplex_dim}",
        f"backbone.name={args.backbone}",
        f"method_kwargs.sem.probe={args.probe}",
    ]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.2"):
        cfg = compose(config_name=f"{method}_sem.yaml", overrides=overrides)
    OmegaConf.set_struct(cfg, False)
    if not sem:
        cfg.method = method
        del cfg.method_kwargs["sem"]
    cfg.devices = [0]  # one device; parse_cfg scales the lr by len(devices)
    cfg.optimizer.name, cfg.optimizer.kwargs = "sgd", {"momentum": 0.9}
    cfg.data.val_path = None
    return parse_cfg(cfg)


def measure(method: str, sem: bool, args: argparse.Namespace) -> dict[str, float]:
    cfg = build_cfg(method, sem, args)
    model = METHODS[cfg.method](cfg)
    params = sum(p.numel() for p in model.parameters()) / 1e6
    steps = args.warmup + args.steps
    data = SyntheticCrops(args.batch_size * steps, cfg.data.num_large_crops, cfg.data.num_classes)
    loader = DataLoader(
        data, batch_size=args.batch_size, drop_last=True, pin_memory=args.device == "cuda"
    )
    timer = StepTimer(args.warmup)
    trainer = Trainer(
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        precision=args.precision,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    if args.device == "cuda":
        torch.cuda.empty_cache()
    trainer.fit(model, loader)
    step_s = sum(timer.durations) / len(timer.durations)
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    return {
        "params_m": params,
        "peak_gib": peak,
        "step_ms": 1e3 * step_s,
        "img_s": args.batch_size / step_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--methods", nargs="+", default=TABLE1, choices=TABLE1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-simplices", type=int, default=5000)
    parser.add_argument("--simplex-dim", type=int, default=13)
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--precision", default="16-mixed")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--probe", default="sem", choices=["sem", "backbone"], help="online probe of the SEM arm"
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    solo_diet.register()

    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"# SEM cost, {device}, {args.backbone}, batch {args.batch_size}, {args.precision}, "
        f"L*V = {args.num_simplices}*{args.simplex_dim} = {args.num_simplices * args.simplex_dim}, "
        f"SEM-arm probe {args.probe}, {args.steps} timed steps after {args.warmup}"
    )
    print("| method | arm | params (M) | peak mem (GiB) | step (ms) | img/s | SEM slowdown |")
    print("|---|---|---|---|---|---|---|")
    for method in args.methods:
        base = measure(method, sem=False, args=args)
        with_sem = measure(method, sem=True, args=args)
        for arm, row in (("base", base), ("sem", with_sem)):
            slowdown = f"{row['step_ms'] / base['step_ms']:.2f}x"
            print(
                f"| {method} | {arm} | {row['params_m']:.1f} | {row['peak_gib']:.2f} | "
                f"{row['step_ms']:.1f} | {row['img_s']:.0f} | {slowdown} |"
            )


if __name__ == "__main__":
    main()
