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
``--backbone`` (ResNet-18 with solo-learn's CIFAR stem, or cp_resnet8 width 128), the math of
our CIFAR configs: ``diet`` (bias-free ``Linear(D, N)`` head on the datum index, label smoothing
0.8, AdamW), ``simclr`` (two views, D-2048-256 projector with batch norm, InfoNCE at 0.2,
ForeachLARS at lr 0.4) and ``byol`` (two views, D-4096-256 projector and 256-4096-256 predictor
with batch norm, ``2 - 2 cos`` of each view's prediction and the other view's momentum projection,
ForeachLARS at lr 1.0, then the EMA of the momentum backbone and projector, inside the step and so
inside the graph, its tau a device scalar written before each step as ``performance.step_graph``
writes it). Each with an online linear probe on detached features, batch 256, bf16 autocast,
channels_last. Prints one table.

    python benchmarks/step_ceiling.py
    python benchmarks/step_ceiling.py --methods diet simclr byol --backbone resnet18 --repeats 3
    python benchmarks/step_ceiling.py --backbone cp_resnet8
    python benchmarks/step_ceiling.py --smoke      # CPU, batch 8, no graph
"""

from __future__ import annotations

import argparse
import copy
import time
from typing import Callable

import torch
import torch.nn.functional as F
from lars_step import info_nce
from torch import nn

from solo_diet.core.backbones import cifar_resnet18, cp_resnet8
from solo_diet.core.lars import ForeachLARS
from solo_diet.core.losses import diet_loss
from solo_diet.core.momentum import ema_update_

Step = Callable[[], None]
VIEWS = {"diet": 1, "simclr": 2, "byol": 2}
LARS_LR = {"simclr": 0.4, "byol": 1.0}  # optimizer.lr of scripts/pretrain/cifar/<method>_sem.yaml
BASE_TAU = 0.99  # byol_sem.yaml's momentum.base_tau


def batches(args: argparse.Namespace, views: int, device: torch.device, ema: bool) -> list[dict]:
    """A few pre-made batches: views, dataset indices, class targets and, with ``ema``, the step's
    tau and ``1 - tau`` (device scalars, copied into place like the rest)."""
    generator = torch.Generator().manual_seed(0)
    made = []
    for i in range(4):
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
        if ema:
            tau = BASE_TAU + 1e-3 * i
            made[-1]["tau"] = torch.full((), tau, device=device)
            made[-1]["complement"] = torch.full((), 1.0 - tau, device=device)
    return made


BACKBONES = {"resnet18": lambda: cifar_resnet18("bench"), "cp_resnet8": lambda: cp_resnet8("bench")}


def mlp(width: int, hidden: int, out: int) -> nn.Sequential:
    """``Linear -> BatchNorm1d -> ReLU -> Linear``, solo-learn's projector (and predictor)."""
    return nn.Sequential(
        nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, out)
    )


def byol_loss(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``2 - 2 cos(p, z)``, averaged over the batch (BYOL paper, Eq. 2)."""
    return 2 - 2 * F.cosine_similarity(predicted, target, dim=-1).mean()


def build_step(
    method: str, args: argparse.Namespace, device: torch.device, graphable: bool, first: dict
):
    """``(static inputs, step)``: the step reads only the static inputs (a copy of ``first``), so
    it can be captured."""
    torch.manual_seed(0)
    backbone = BACKBONES[args.backbone]().to(device, memory_format=torch.channels_last)
    width = backbone.num_features
    probe = nn.Linear(width, 10).to(device)
    static = {k: [t.clone() for t in v] if k == "views" else v.clone() for k, v in first.items()}
    momentum_pairs = []  # (online, momentum) modules, updated by EMA after each optimizer step
    if method == "diet":
        head = nn.Linear(width, args.num_samples, bias=False).to(device)
        trained = [backbone, head, probe]

        def method_loss(feats: list[torch.Tensor]) -> torch.Tensor:
            return diet_loss(head(feats[0]).float(), static["indexes"], 0.8)

    elif method == "simclr":
        projector = mlp(width, 2048, 256).to(device)
        trained = [backbone, projector, probe]

        def method_loss(feats: list[torch.Tensor]) -> torch.Tensor:
            z1, z2 = (projector(f) for f in feats)
            return info_nce(z1.float(), z2.float())

    else:
        projector, predictor = mlp(width, 4096, 256).to(device), mlp(256, 4096, 256).to(device)
        trained = [backbone, projector, predictor, probe]
        momentum_nets = [copy.deepcopy(m).requires_grad_(False) for m in (backbone, projector)]
        momentum_pairs = list(zip((backbone, projector), momentum_nets))
        momentum_encoder = nn.Sequential(*momentum_nets)  # the targets, without gradients

        def method_loss(feats: list[torch.Tensor]) -> torch.Tensor:
            predicted = [predictor(projector(f)).float() for f in feats]
            with torch.no_grad():
                targets = [momentum_encoder(v).float() for v in static["views"]]
            return byol_loss(predicted[1], targets[0]) + byol_loss(predicted[0], targets[1])

    params = [p for m in trained for p in m.parameters()]
    if method == "diet":
        optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05, capturable=graphable)
    else:
        optimizer = ForeachLARS(
            params, lr=LARS_LR[method], weight_decay=1e-5, eta=0.02, clip_lr=True,
            exclude_bias_n_norm=True,
        )  # fmt: skip
    autocast = torch.autocast(
        device.type, dtype=torch.bfloat16, enabled=device.type == "cuda", cache_enabled=False
    )

    def step() -> None:
        with autocast:
            feats = [backbone(v) for v in static["views"]]
            probe_loss = sum(F.cross_entropy(probe(f.detach()), static["targets"]) for f in feats)
            loss = method_loss(feats)
        (loss + probe_loss).backward()
        optimizer.step()
        for online, momentum in momentum_pairs:
            ema_update_(
                momentum.parameters(), online.parameters(), static["tau"], static["complement"]
            )
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
            for key in batch.keys() - {"views"}:
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
    made = batches(args, VIEWS[method], device, ema=method == "byol")
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
    parser.add_argument("--methods", nargs="+", default=list(VIEWS), choices=list(VIEWS))
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
