"""What LARS costs per training step: solo-learn's ``LARS`` against ``ForeachLARS``.

solo-learn's LARS reads two norms per parameter on the host (``p_norm != 0 and g_norm != 0``), so on
a GPU every step waits for the device once per parameter. The table times, for ResNet-18 with the
CIFAR stem and a SimCLR projector (2048-2048-256, batch norm), the optimizer step alone and a whole
SimCLR-shaped training step (two views, forward, InfoNCE, backward, step; bf16 autocast on a GPU) on
random 32 px batches, median over ``--repeats`` timed steps after ``--warmup``, host clock with a
device synchronisation at the end of each step. Needs solo-learn for its LARS. Prints one table.

    python benchmarks/lars_step.py                # on a GPU
    python benchmarks/lars_step.py --smoke        # CPU, batch 8, 3 repeats
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from solo_diet.core.backbones import cifar_resnet18
from solo_diet.core.lars import ForeachLARS


def simclr_model(device: torch.device) -> tuple[nn.Module, nn.Module]:
    backbone = cifar_resnet18("simclr")
    projector = nn.Sequential(
        nn.Linear(512, 2048), nn.BatchNorm1d(2048), nn.ReLU(), nn.Linear(2048, 256)
    )
    return backbone.to(device), projector.to(device)


def info_nce(z1: torch.Tensor, z2: torch.Tensor, temperature: float = 0.2) -> torch.Tensor:
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    logits = z @ z.T / temperature
    logits.fill_diagonal_(float("-inf"))
    n = z1.shape[0]
    targets = torch.cat([torch.arange(n, 2 * n, device=z.device), torch.arange(n, device=z.device)])
    return F.cross_entropy(logits, targets)


def median_ms(step: Callable[[], None], device: torch.device, warmup: int, repeats: int) -> float:
    def synced() -> None:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        synced()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        synced()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def measure(optimizer_class: type, args: argparse.Namespace, device: torch.device) -> list[float]:
    torch.manual_seed(0)
    backbone, projector = simclr_model(device)
    params = list(backbone.parameters()) + list(projector.parameters())
    optimizer = optimizer_class(
        params, lr=0.3, momentum=0.9, weight_decay=1e-5, eta=0.02, clip_lr=True,
        exclude_bias_n_norm=True,
    )  # fmt: skip
    views = torch.randn(2, args.batch_size, 3, 32, 32, device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def train_step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            z1, z2 = (projector(backbone(v)) for v in views)
            loss = info_nce(z1.float(), z2.float())
        loss.backward()
        optimizer.step()

    train_step()  # gradients and momentum buffers exist for the optimizer-only timing
    optimizer_ms = median_ms(optimizer.step, device, args.warmup, args.repeats)
    step_ms = median_ms(train_step, device, args.warmup, args.repeats)
    return [optimizer_ms, step_ms, args.batch_size / step_ms * 1e3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="CPU, batch 8, few repeats")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if args.smoke:
        args.batch_size, args.warmup, args.repeats = 8, 1, 3
    from solo.utils.lars import LARS

    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    model = "ResNet-18 (CIFAR stem) + SimCLR projector"
    print(f"# LARS step, {model}, batch {args.batch_size}, {name}")
    print("| optimizer | optimizer step ms | training step ms | samples/s (2 views each) |")
    print("|---|---:|---:|---:|")
    for label, optimizer_class in (("solo-learn LARS", LARS), ("ForeachLARS", ForeachLARS)):
        optimizer_ms, step_ms, samples = measure(optimizer_class, args, device)
        print(f"| {label} | {optimizer_ms:.2f} | {step_ms:.2f} | {samples:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
