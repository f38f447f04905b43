"""How much of the card can a training step use once the host is out of the way?

The Lightning step is host-bound (docs/benchmarks.md, "GPU data path"): the GPU idles while Python
and PyTorch launch kernels. This script runs the same training step three ways, outside Lightning
and without any data pipeline (a few pre-made batches copied into place, as the GPU path's
CUDA-graphed augmentation leaves them):

- ``eager``: one step after another with no wait, so the host may run ahead of the GPU;
- ``eager_sync``: the same with one host read-back per step (what a single ``.tolist()`` or
  ``.item()`` per batch costs);
- ``graph``: the whole step (forward, loss, backward, optimizer) captured once as a CUDA graph and
  replayed: the GPU's own time for the step, with no launch overhead.

``kernel ms`` is the sum of the step's CUDA kernel times from ``torch.profiler`` (eager). Steps, on
``--backbone`` (ResNet-18 with solo-learn's CIFAR stem, or cp_resnet8 width 128): ``diet``
(bias-free ``Linear(D, N)`` head on the datum index, label smoothing 0.8, AdamW) and ``simclr``
(two views, D-2048-256 projector with batch norm, InfoNCE at 0.2, ForeachLARS); both with an
online linear probe, batch 256, bf16 autocast, channels_last. Prints one table.

    python benchmarks/step_ceiling.py
    python benchmarks/step_ceiling.py --backbone cp_resnet8
    python benchmarks/step_ceiling.py --smoke      # CPU, batch 8, no graph
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
import torch.nn.functional as F
from lars_step import info_nce
from torch import nn

from solo_diet.core.backbones import cifar_resnet18, cp_resnet8
from solo_diet.core.lars import ForeachLARS
from solo_diet.core.losses import diet_loss

Step = Callable[[], None]


def batches(args: argparse.Namespace, views: int, device: torch.device) -> list[dict]:
    """A few pre-made batches: views, dataset indices, class targets."""
    generator = torch.Generator().manual_seed(0)
    made = []
    for _ in range(4):
        images = torch.randn(views, args.batch_size, 3, 32, 32, generator=generator)
        indexes = torch.randint(0, args.num_samples, (args.batch_size,), generator=generator)
        targets = torch.randint(0, 10, (args.batch_size,), generator=generator)
        made.append(
            {
                "views": [
                    v.to(device).contiguous(memory_format=torch.channels_last) for v in images
                ],
                "indexes": indexes.to(device),
                "targets": targets.to(device),
            }
        )
    return made


BACKBONES = {"resnet18": lambda: cifar_resnet18("bench"), "cp_resnet8": lambda: cp_resnet8("bench")}


def build_step(
    method: str, args: argparse.Namespace, device: torch.device, graphable: bool, first: dict
):
    """``(static inputs, step)``: the step reads only the static inputs (a copy of ``first``), so
    it can be captured."""
    torch.manual_seed(0)
    backbone = BACKBONES[args.backbone]().to(device)
    width = backbone.num_features
    probe = nn.Linear(width, 10).to(device)
    if method == "diet":
        head = nn.Linear(width, args.num_samples, bias=False).to(device)
        modules = [backbone, head, probe]
        params = [p for m in modules for p in m.parameters()]
        optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05, capturable=graphable)
    else:
        projector = nn.Sequential(
            nn.Linear(width, 2048), nn.BatchNorm1d(2048), nn.ReLU(), nn.Linear(2048, 256)
        ).to(device)
        modules = [backbone, projector, probe]
        params = [p for m in modules for p in m.parameters()]
        optimizer = ForeachLARS(
            params, lr=0.3, weight_decay=1e-5, eta=0.02, clip_lr=True, exclude_bias_n_norm=True
        )
    backbone.to(memory_format=torch.channels_last)
    static = {k: [t.clone() for t in v] if k == "views" else v.clone() for k, v in first.items()}
    autocast = torch.autocast(
        device.type, dtype=torch.bfloat16, enabled=device.type == "cuda", cache_enabled=False
    )

    def step() -> None:
        with autocast:
            feats = [backbone(v) for v in static["views"]]
            probe_loss = sum(F.cross_entropy(probe(f.detach()), static["targets"]) for f in feats)
            if method == "diet":
                loss = diet_loss(head(feats[0]).float(), static["indexes"], 0.8)
            else:
                z1, z2 = (projector(f) for f in feats)
                loss = info_nce(z1.float(), z2.float())
        (loss + probe_loss).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)

    return static, step


def per_step_ms(
    step: Step, made: list[dict], static: dict, args, sync: Callable[[], None]
) -> float:
    """Median over ``--repeats`` windows of ``--steps`` steps, each step fed the next batch."""
    windows = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for i in range(args.steps):
            batch = made[i % len(made)]
            for to, value in zip(static["views"], batch["views"]):
                to.copy_(value, non_blocking=True)
            for key in ("indexes", "targets"):
                static[key].copy_(batch[key], non_blocking=True)
            step()
            sync()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        windows.append((time.perf_counter() - start) * 1e3 / args.steps)
    return sorted(windows)[len(windows) // 2]


def kernel_ms(step: Step, steps: int = 10) -> float:
    """Sum of CUDA kernel times per step, from torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time for e in events) / 1e3 / steps


def measure(method: str, args: argparse.Namespace, device: torch.device) -> dict:
    cuda = device.type == "cuda"
    made = batches(args, 1 if method == "diet" else 2, device)
    static, step = build_step(method, args, device, graphable=cuda, first=made[0])
    for _ in range(args.warmup):
        step()
    read_back = (lambda: static["indexes"].max().item()) if cuda else (lambda: None)
    row = {
        "eager": per_step_ms(step, made, static, args, lambda: None),
        "eager_sync": per_step_ms(step, made, static, args, read_back),
    }
    if cuda:
        row["kernel"] = kernel_ms(step)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # capture's warm-up, as PyTorch's whole-network recipe
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        row["graph"] = per_step_ms(graph.replay, made, static, args, lambda: None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--methods", nargs="+", default=["diet", "simclr"], choices=["diet", "simclr"]
    )
    parser.add_argument("--backbone", default="resnet18", choices=sorted(BACKBONES))
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--num-samples", type=int, default=5000, help="DIET's head rows")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50, help="steps per timed window")
    parser.add_argument("--repeats", type=int, default=5, help="timed windows (median)")
    parser.add_argument("--smoke", action="store_true", help="CPU, batch 8, no graph")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if args.smoke:
        args.batch_size, args.warmup, args.steps, args.repeats = 8, 1, 2, 1
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(
        f"# one training step, {args.backbone}, batch {args.batch_size}, 32 px, {name}, "
        f"torch {torch.__version__}"
    )
    print(
        "| method | eager ms | eager_sync ms | graph ms | kernel ms | samples/s eager | "
        "samples/s graph | graph / eager |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for method in args.methods:
        row = measure(method, args, device)
        rate = {k: args.batch_size / row[k] * 1e3 for k in ("eager", "graph") if k in row}
        cells = [
            f"{row[k]:.2f}" if k in row else "-" for k in ("eager", "eager_sync", "graph", "kernel")
        ]
        ratio = f"{row['eager'] / row['graph']:.2f}" if "graph" in row else "-"
        graph_rate = f"{rate['graph']:,.0f}" if "graph" in rate else "-"
        print(
            f"| {method} | {' | '.join(cells)} | {rate['eager']:,.0f} | {graph_rate} | {ratio} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
