"""What an epoch that ends with a checkpoint and RankMe should cost, measured in isolation.

A long comparison job (ResNet-18 DIET, 500 epochs) spent 8 to 31 s in each of its ten epochs that
end with a checkpoint and RankMe, against 0.03 s for a plain validation (docs/benchmarks.md). This
times the two pieces alone: ``torch.save`` of a DIET checkpoint (the method built as ``solo-diet
pretrain`` builds it, model and AdamW state, ``--num-samples`` instance classes) to ``--dir``, and
RankMe of 2 000 x 512 float features with 1, 8 and torch's default number of CPU threads. Prints one
table. Needs solo-learn.

    python benchmarks/epoch_end_costs.py             # on a GPU
    python benchmarks/epoch_end_costs.py --smoke     # CPU, a tiny head
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from data_path import BACKBONES, compose_method
from gpu_augment import median_seconds

from solo_diet.core.metrics.rank import rankme


def diet_checkpoint(num_samples: int, device: str) -> dict:
    """The state a Lightning checkpoint of ResNet-18 DIET holds: weights and AdamW moments."""
    from solo.methods import METHODS

    case = {
        "backbone_overrides": BACKBONES["resnet18"],
        "batch_size": 256,
        "precision": "bf16-mixed" if device == "cuda" else "32",
        "accelerator": "gpu" if device == "cuda" else "cpu",
        "workers": 0,
        "overrides": [],
    }
    cfg = compose_method("diet", case, [f"data.train_path={tempfile.gettempdir()}"])
    cfg.method_kwargs.num_samples = num_samples
    model = METHODS[cfg.method](cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.backbone(torch.randn(4, 3, 32, 32, device=device)).float().sum().backward()
    optimizer.step()
    return {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=8000, help="DIET's instance classes")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where checkpoints go")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="CPU, 100 instance classes")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    num_samples = 100 if args.smoke else args.num_samples
    where = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"# epoch-end costs, {where}, {os.cpu_count()} cores, median of {args.repeats}")
    print("| piece | setting | seconds |\n|---|---|---:|")

    state = diet_checkpoint(num_samples, device)
    size_mib = (
        sum(t.numel() * t.element_size() for t in state["state_dict"].values()) * 3 / 2**20
    )  # weights and two AdamW moments
    path = Path(args.dir) / "epoch_end_costs.ckpt"
    host = torch.device("cpu")  # host wall clock: both pieces are host work
    seconds = median_seconds(lambda: torch.save(state, path), host, 0, args.repeats)
    path.unlink()
    setting = f"{num_samples} classes, ~{size_mib:.0f} MiB"
    print(f"| torch.save, DIET ResNet-18 | {setting} | {seconds:.3f} |")

    features = torch.randn(2000, 512, device=device).float().cpu()
    default = torch.get_num_threads()
    for threads in sorted({1, 8, default}):
        torch.set_num_threads(threads)
        seconds = median_seconds(lambda: rankme(features), host, 0, args.repeats)
        print(f"| RankMe, 2000 x 512 | {threads} CPU threads | {seconds:.3f} |")
    torch.set_num_threads(default)


if __name__ == "__main__":
    main()
