"""Is a 2-process s-DIET run the same as a 1-process run with the same global batch? (issue: s-DIET)

Trains `sdiet` through Lightning with `devices=1` (global batch G) and with `devices=2` + DDP
(G/2 per process; SyncBatchNorm on GPUs, a projector without BatchNorm on the CPU), on identical
fixed data (no augmentation, no shuffling: the each process takes every 2nd sample in order, so the
processes' batches interleave into the same global batches), fp32 without TF32, and compares the
per-step loss, the head rows after the first step, the final head rows and AdamW state, and, as the
reference for what float32 DDP does to any model, the backbone's and projector's parameters (trained
by torch's AdamW on DDP's all-reduced gradients). Prints one table.

    python benchmarks/sdiet_ddp_equivalence.py                   # 2 GPUs (e.g. nvidia-h100-x2)
    python benchmarks/sdiet_ddp_equivalence.py --accelerator cpu # 2 gloo processes on the CPU
    # same, everything in float64:
    python benchmarks/sdiet_ddp_equivalence.py --accelerator cpu --float64

`--float64` trains with `precision="64-true"` and `row_dtype: float64`: differences that vanish
there are float32 summation-order effects, not differences in what the two runs compute.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/_helpers/

NUM_SAMPLES, GLOBAL_BATCH, STEPS = 512, 64, 16


def run_case(args: argparse.Namespace) -> None:
    """One training run; rank 0 saves the per-step losses and the row store to ``args.out``."""
    from lightning.pytorch import Callback, Trainer, seed_everything
    from solo.methods import METHODS
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import solo_diet
    from tests._helpers.tiny import tiny_cfg

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    solo_diet.register()
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(NUM_SAMPLES, 3, 32, 32, generator=generator)
    targets = torch.randint(0, 10, (NUM_SAMPLES,), generator=generator)

    class Indexed(TensorDataset):
        def __getitem__(self, i):
            return i, [images[i]], targets[i]

    cfg = tiny_cfg(
        "sdiet",
        {
            "num_samples": NUM_SAMPLES,
            "proj_hidden_dim": 256,
            "proj_output_dim": 128,
            "proj_use_bn": args.accelerator == "gpu",  # SyncBatchNorm needs GPUs
            "row_placement": "cpu",
            "row_dtype": "float64" if args.float64 else "float32",
        },
        num_large_crops=1,
        num_classes=10,
        backbone_kwargs={"width": 64},
        batch_size=GLOBAL_BATCH // args.devices,
        max_epochs=2,
    )
    cfg.accelerator, cfg.devices = args.accelerator, args.devices
    seed_everything(0)
    model = METHODS["sdiet"](cfg)
    losses: list[float] = []

    first_step_rows: list[torch.Tensor] = []

    class RecordLoss(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            losses.append(float(trainer.callback_metrics["train_sdiet_loss_step"]))
            if not first_step_rows:
                first_step_rows.append(module.row_store.state_dict()["rows"])

    # each process takes every devices-th sample in order, so the processes' batches interleave into
    # the 1-process batches (Lightning's own distributed sampler would shuffle)
    rank = int(os.environ.get("LOCAL_RANK", 0))
    sampler = DistributedSampler(
        Indexed(images), num_replicas=args.devices, rank=rank, shuffle=False
    )
    loader = DataLoader(
        Indexed(images), batch_size=GLOBAL_BATCH // args.devices, sampler=sampler, drop_last=True
    )
    trainer = Trainer(
        accelerator=args.accelerator,
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        sync_batchnorm=args.devices > 1 and args.accelerator == "gpu",
        precision="64-true" if args.float64 else 32,
        max_epochs=2,
        limit_train_batches=STEPS // 2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[RecordLoss()],
        use_distributed_sampler=False,
    )
    trainer.fit(model, loader)
    if trainer.is_global_zero:
        networks = {
            name: value.cpu()
            for name, value in model.state_dict().items()
            if value.is_floating_point()
        }
        torch.save(
            {
                "losses": losses,
                "store": model.row_store.state_dict(),
                "first_step_rows": first_step_rows[0],
                "networks": networks,
            },
            args.out,
        )


def compare(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for devices in (1, 2):
            out = Path(tmp) / f"devices{devices}.pt"
            command = [
                sys.executable,
                __file__,
                "--case",
                "--accelerator",
                args.accelerator,
                "--devices",
                str(devices),
                "--out",
                str(out),
            ]
            command += ["--float64"] if args.float64 else []
            subprocess.run(command, check=True, cwd=tmp)
            results[devices] = torch.load(out, weights_only=False)
    one, two = results[1], results[2]
    loss_gap = max(abs(a - b) for a, b in zip(one["losses"], two["losses"]))
    device = torch.cuda.get_device_name(0) if args.accelerator == "gpu" else "CPU (gloo)"
    precision = "float64" if args.float64 else "fp32"
    print(
        f"# s-DIET DDP equivalence, {device}: N={NUM_SAMPLES}, global batch {GLOBAL_BATCH}, "
        f"{len(one['losses'])} steps, {precision}"
    )
    print("| quantity | max abs difference, 2 processes vs 1 |")
    print("|---|---|")
    print(
        f"| per-step loss ({len(one['losses'])} vs {len(two['losses'])} steps) | {loss_gap:.2e} |"
    )
    print(
        "| head rows after the first step | "
        f"{max_gap(one['first_step_rows'], two['first_step_rows']):.2e} |"
    )
    for name in ("rows", "exp_avg", "exp_avg_sq"):
        print(f"| head {name} | {max_gap(one['store'][name], two['store'][name]):.2e} |")
    # the reference: DDP's own float32 effects on parameters that torch's AdamW trains
    for part in ("backbone", "projector"):
        names = [name for name in one["networks"] if name.startswith(part + ".")]
        gap = max(max_gap(one["networks"][name], two["networks"][name]) for name in names)
        print(f"| {part} parameters and buffers (torch AdamW, DDP all-reduce) | {gap:.2e} |")


def max_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument(
        "--float64", action="store_true", help="precision 64-true and float64 head tables"
    )
    parser.add_argument("--case", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        run_case(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
