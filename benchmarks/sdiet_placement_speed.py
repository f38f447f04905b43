"""Is an s-DIET step with ``cpu`` placement as fast as with ``gpu`` placement? (issue: s-DIET)

Runs the ``sdiet`` case of ``sdiet_memory.py`` (same model, synthetic data on the device, Trainer,
batch 256, bf16-mixed; ResNet-18 at 32 px by default, the short step where host work shows) for each
placement, alternating ``gpu`` / ``cpu`` / ... ``--repeats`` times, every run in a fresh process,
and prints samples/s of every run, the median per placement and the median's gap to ``gpu``.
Single runs of one process vary by more than the gap itself (host-bound steps; CPU placement), hence
the repeats.

With ``--profile`` each placement runs once more under ``torch.profiler`` and the script prints the
operators with the largest host time and the host calls that block or copy rows (event and stream
synchronisation, pinned allocations, memcpy, index_select/index_copy), by name.

    python benchmarks/sdiet_placement_speed.py    # one CUDA GPU, ~4 minutes
    python benchmarks/sdiet_placement_speed.py --backbone resnet50 --num-samples 1280000 --repeats 2
    # plumbing check on a CPU (numbers meaningless):
    python benchmarks/sdiet_placement_speed.py --device cpu --backbone cp_resnet8 --batch-size 8 \
        --num-samples 256 --repeats 1 --warmup 2 --steps 3 --profile
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys

import torch
from lightning.pytorch import Callback
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdiet_memory  # noqa: E402

import solo_diet  # noqa: E402

WATCHED = (
    "Synchronize",
    "HostAlloc",
    "HostRegister",
    "cudaMemcpy",
    "index_select",
    "index_copy",
    "pin_memory",
    "record_stream",
    "cudaEventQuery",
    "cudaStreamWait",
)


class ProfileTimedSteps(Callback):
    """torch.profiler (CPU + CUDA activities) from the first timed step to the end of training."""

    def __init__(self, warmup: int):
        self.warmup = warmup
        self.profiler = profile(
            activities=[
                ProfilerActivity.CPU,
                *([ProfilerActivity.CUDA] if torch.cuda.is_available() else []),
            ]
        )

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.warmup:
            self.profiler.__enter__()

    def on_train_end(self, trainer, module):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.profiler.__exit__(None, None, None)


def run_one(args: argparse.Namespace) -> None:
    """The ``--run PLACEMENT`` process: one measurement (profiled with ``--profile``); last line
    JSON."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    solo_diet.register()
    cuda = args.device == "cuda"
    settings = argparse.Namespace(
        device=args.device,
        batch_size=args.batch_size,
        precision="bf16-mixed" if cuda else "32",
        warmup=args.warmup,
        steps=args.steps,
        proj_dim=None if cuda else 32,
        disk_dir=f"/tmp/sdiet_placement_speed_{args.run}",
    )
    callbacks = (ProfileTimedSteps(args.warmup),) if args.profile else ()
    peak, speed = sdiet_memory.measure(
        "sdiet", args.run, args.backbone, args.num_samples, settings, callbacks
    )
    if args.profile:
        averages = callbacks[0].profiler.key_averages()
        print(f"\n## placement={args.run} (profiled: {speed} samples/s)")
        print(averages.table(sort_by="self_cpu_time_total", row_limit=args.rows))
        print("| host call (blocking or row copies) | calls | host ms total |\n|---|---|---|")
        for event in averages:
            if any(word in event.key for word in WATCHED):
                print(f"| {event.key[:60]} | {event.count} | {event.cpu_time_total / 1e3:.1f} |")
    print(json.dumps({"peak": peak, "speed": speed}))


def measure_in_process(
    placement: str, args: argparse.Namespace, profile_run: bool = False
) -> float:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--run",
        placement,
        "--backbone",
        args.backbone,
        f"--num-samples={args.num_samples}",
        f"--warmup={args.warmup}",
        f"--steps={args.steps}",
        f"--rows={args.rows}",
        f"--device={args.device}",
        f"--batch-size={args.batch_size}",
        *(["--profile"] if profile_run else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    lines = done.stdout.strip().splitlines()
    if profile_run:
        print("\n".join(lines[:-1]))
    return float(json.loads(lines[-1])["speed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="resnet18", choices=sorted(sdiet_memory.BACKBONES))
    parser.add_argument("--num-samples", type=int, default=128_000)
    parser.add_argument(
        "--placements", nargs="+", default=["gpu", "cpu"], choices=sdiet_memory.SDIET_PLACEMENTS
    )
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--profile", action="store_true", help="one more profiled run per placement"
    )
    parser.add_argument(
        "--rows", type=int, default=20, help="operators listed per profiled placement"
    )
    parser.add_argument(
        "--device", default="cuda", choices=["cuda", "cpu"], help="cpu: plumbing check only"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)  # internal: one measurement
    args = parser.parse_args()
    if args.run is not None:
        run_one(args)
        return
    speeds: dict[str, list[float]] = {placement: [] for placement in args.placements}
    for repeat in range(args.repeats):
        for placement in args.placements:
            speeds[placement].append(measure_in_process(placement, args))
            speed = speeds[placement][-1]
            print(f"run {repeat + 1}/{args.repeats} {placement}: {speed:.0f} samples/s", flush=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"# s-DIET step speed by placement, {device}, {args.backbone}, N={args.num_samples}, "
        f"batch {args.batch_size}, {args.steps} timed steps after {args.warmup}, {args.repeats} "
        "alternating runs each"
    )
    print("| placement | samples/s per run | median | median vs gpu |\n|---|---|---|---|")
    reference = statistics.median(speeds["gpu"]) if "gpu" in speeds else None
    for placement, values in speeds.items():
        median = statistics.median(values)
        gap = f"{100 * (median / reference - 1):+.1f} %" if reference else "-"
        print(f"| {placement} | {' / '.join(f'{v:.0f}' for v in values)} | {median:.0f} | {gap} |")
    if args.profile:
        for placement in args.placements:
            measure_in_process(placement, args, profile_run=True)


if __name__ == "__main__":
    main()
