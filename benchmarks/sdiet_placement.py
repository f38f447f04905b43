"""s-DIET head placement: speed, peak GPU memory vs N, and equality of the placements.

One table: for each placement (gpu / cpu / cpu + prefetch / disk) and each N, a ResNet-18 + 3-layer
projector trains with batch CE on synthetic 32x32 images (same seed, same batches); columns are the
mean ms per step, peak GPU memory, and the largest difference of the final head rows from the
``gpu`` placement (expected 0, or <= 1e-6 with non-deterministic kernels). A full-head DIET row
(``nn.Linear(512, N)`` trained by torch AdamW) shows the memory that grows with N; s-DIET's should
not (the s-DIET paper's claim, Tab. 15 and Fig. 3).

    python benchmarks/sdiet_placement.py                    # on a CUDA machine
    python benchmarks/sdiet_placement.py --device cpu --steps 2 --warmup 1 --num-samples 512 \
        --dim 64
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
import torch.nn.functional as F
import torchvision

from solo_diet.core.losses import sdiet_batch_cross_entropy
from solo_diet.core.nn import mlp_projector
from solo_diet.core.sdiet.optim import RowAdamW
from solo_diet.core.sdiet.rowstore import RowStore

LR, WD = 1e-3, 0.05


def backbone() -> torch.nn.Module:
    net = torchvision.models.resnet18()
    net.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=2, bias=False)
    net.maxpool = torch.nn.Identity()
    net.fc = torch.nn.Identity()
    return net


def batches(num_samples: int, batch_size: int, steps: int) -> list[torch.Tensor]:
    """``steps`` batches of distinct indices, a fresh seeded permutation each epoch (drop-last)."""
    per_epoch = num_samples // batch_size
    if per_epoch == 0:
        raise ValueError(f"--num-samples {num_samples} is smaller than one batch of {batch_size}")
    plan: list[torch.Tensor] = []
    for epoch in range(-(-steps // per_epoch)):
        order = torch.randperm(num_samples, generator=torch.Generator().manual_seed(1 + epoch))
        plan += list(order[: per_epoch * batch_size].split(batch_size))
    return plan[:steps]


def images(indexes: torch.Tensor, device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(int(indexes[0]))
    return torch.randn(len(indexes), 3, 32, 32, generator=gen).to(device)


def timed(plan: list[torch.Tensor], train_step, args, device: torch.device) -> tuple[float, float]:
    """Run ``train_step(step, idx)`` over the plan; mean ms of the steps after warm-up, peak GPU
    MiB."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    for step, idx in enumerate(plan):
        if step == args.warmup:
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
        train_step(step, idx)
    if cuda:
        torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / args.steps * 1e3
    return ms, torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan")


def run_sdiet(placement: str, prefetch: bool, args, num_samples: int, device: torch.device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(backbone(), mlp_projector(512, 2048, args.dim)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    plan = batches(num_samples, args.batch_size, args.warmup + args.steps)
    with tempfile.TemporaryDirectory() as directory:
        store = RowStore(
            num_samples,
            args.dim,
            RowAdamW(WD),
            eager_steps=num_samples / args.batch_size - 1,
            placement=placement,
            device=device,
            directory=directory,
        )

        def train_step(step: int, idx: torch.Tensor) -> None:
            rows, state = store.load(idx, device, lr=LR)
            if prefetch and step + 1 < len(plan):
                store.prefetch(plan[step + 1], device)
            rows.requires_grad_(True)
            loss = sdiet_batch_cross_entropy(model(images(idx, device)), rows)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            store.update(idx, rows, state, rows.grad, lr=LR)

        ms, peak = timed(plan, train_step, args, device)
        return ms, peak, store.state_dict()["rows"][torch.cat(plan)]


def run_diet(args, num_samples: int, device: torch.device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(backbone(), torch.nn.Linear(512, num_samples, bias=False)).to(
        device
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)

    def train_step(step: int, idx: torch.Tensor) -> None:
        loss = F.cross_entropy(model(images(idx, device)), idx.to(device), label_smoothing=0.8)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return timed(
        batches(num_samples, args.batch_size, args.warmup + args.steps), train_step, args, device
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--num-samples", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"device: {name}; ResNet-18 (CIFAR stem) + projector 2048-2048-{args.dim}, batch "
        f"{args.batch_size}, {args.steps} timed steps after {args.warmup}"
    )
    print("| method | placement | N | ms/step | peak GPU MiB | max abs diff of rows vs gpu |")
    print("| --- | --- | --- | --- | --- | --- |")
    for num_samples in args.num_samples:
        reference = None
        for placement, prefetch in (("gpu", False), ("cpu", False), ("cpu", True), ("disk", False)):
            ms, peak, rows = run_sdiet(placement, prefetch, args, num_samples, device)
            reference = rows if reference is None else reference
            diff = float((rows - reference).abs().max())
            label = placement + (" + prefetch" if prefetch else "")
            print(
                f"| s-DIET | {label} | {num_samples} | {ms:.1f} | {peak:.0f} | {diff:.2e} |",
                flush=True,
            )
        ms, peak = run_diet(args, num_samples, device)
        print(
            f"| DIET (full head, torch AdamW) | {device.type} | {num_samples} | {ms:.1f} | "
            f"{peak:.0f} | - |",
            flush=True,
        )


if __name__ == "__main__":
    main()
