"""solo-learn's loader against the streaming source on ImageNet-like JPEGs, 1 and 2 GPUs.

The script writes a synthetic ImageNet-like folder (``--images`` JPEGs of quality 90 in
``--classes`` class folders, sizes around 500x375: ``tests._helpers.synthetic.IMAGENET_LIKE_SIZES``;
pixels made and encoded on the GPU with torchvision, or reused from ``--folder``). Then DIET and
SimCLR with ResNet-50 at 224 px, batch 256 per GPU, ``bf16-mixed``, train through
``solo-diet pretrain``'s ``run_pretrain`` (ImageNet-100 DIET recipe; SimCLR: the same with two
views, a 2048-2048-128 projector, temperature 0.2, LARS) from

- ``image_folder``: solo-learn's dataset and DataLoader (PIL decode + augmentation in
  ``--workers`` worker processes per GPU, default: the host's cores split over the GPUs);
- ``stream``: ``data.format: gpu`` with ``data.gpu.storage: stream`` (the same number of workers
  read the files' bytes; nvJPEG decodes on the GPU, crops and augmentations run there).

Every case runs in a fresh process (DDP through Lightning for 2 GPUs). After a warm-up long enough
to drain the loaders' prefetched batches (``2 x workers + 8`` steps), ``--steps`` steps are timed:
samples/s (all GPUs), the GPUs' busy % (``nvidia-smi`` every 100 ms, averaged over the GPUs used)
and rank 0's peak ``torch.cuda.max_memory_allocated``. Prints one table; about 6 minutes on one
H100 with 16 cores (2 x 2 cases; 2 x 2 more where 2 GPUs are visible).

    python benchmarks/streaming_decode.py
    python benchmarks/streaming_decode.py --gpus 1 --methods diet      # one pair of cases
    python benchmarks/streaming_decode.py --smoke                      # CPU plumbing, tiny
    python benchmarks/streaming_decode.py --gpus 1 --sources stream --profile  # where GPU time goes

On one host of 8 GPUs (issue 47, not yet run: the 8-GPU kind was never lent). A window of
(2 x workers + 8) + 40 steps of 8 x 256 images must fit one epoch, so 8 GPUs need about 170 000
JPEGs (made once into ``--folder``); the workers per GPU default to the cores over the GPUs (16 of
128) and a second and third call find the best count:

    python benchmarks/streaming_decode.py --gpus 1 2 8 --images 170000 --folder /data/jpegs
    python benchmarks/streaming_decode.py --gpus 8 --images 170000 --folder /data/jpegs --workers 8
    python benchmarks/streaming_decode.py --gpus 8 --images 170000 --folder /data/jpegs --workers 12
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/_helpers
from data_path import cell, print_case_result, print_phase, run_case, since_launch  # noqa: E402

# GPU kernels by name, first match wins (cuDNN's convolution kernels often contain "gemm" too)
KERNEL_KINDS = (
    ("nvJPEG decode", r"nvjpeg|jpeg|huffman|idct"),
    ("convolutions", r"conv|fprop|dgrad|wgrad|implicit"),
    ("matmuls", r"gemm|cutlass|cublas"),
    ("batch norm", r"batch_norm|batchnorm|welford|bn_"),
    ("resizes and crops", r"upsample|interp|grid_sampl|resize|crop"),
    ("optimizer", r"multi_tensor|foreach|lars|adam"),
    ("copies and fills", r"memcpy|memset|copy|fill"),
    ("other elementwise and reductions", r"."),
)


def kernel_breakdown(profiler, steps: int, wall_s: float) -> dict[str, Any]:
    """Milliseconds a step of each :data:`KERNEL_KINDS` (kernel time summed over the streams), of
    ``idle`` (wall time with no kernel running on any stream) and of the whole ``step``, and the
    ``top`` twelve kernels by time, from ``torch.profiler``."""
    import re

    from torch.autograd import DeviceType

    spent = dict.fromkeys([kind for kind, _ in KERNEL_KINDS], 0.0)
    by_name: dict[str, float] = {}
    spans = []
    for event in profiler.profiler.kineto_results.events():
        if event.device_type() != DeviceType.CUDA:
            continue
        name = event.name().lower()
        kind = next(kind for kind, pattern in KERNEL_KINDS if re.search(pattern, name))
        ms = event.duration_ns() / 1e6 / steps
        spent[kind] += ms
        by_name[event.name()] = by_name.get(event.name(), 0.0) + ms
        spans.append((event.start_ns(), event.end_ns()))
    busy_ns, reach = 0, None  # the union of the kernels' intervals
    for start, end in sorted(spans):
        if reach is None or start > reach:
            busy_ns, reach = busy_ns + end - start, end
        elif end > reach:
            busy_ns, reach = busy_ns + end - reach, end
    step_ms = wall_s * 1e3 / steps
    top = sorted(by_name.items(), key=lambda item: -item[1])[:12]
    idle = max(0.0, step_ms - busy_ns / 1e6 / steps)
    return {**spent, "idle": idle, "step": step_ms, "top": [[n[:90], ms] for n, ms in top]}


def print_breakdowns(breakdowns: dict[str, dict[str, Any]]) -> None:
    """One table: a row per kernel kind, a column per profiled case (ms a step, % of its wall)."""
    cases = list(breakdowns)
    print("\n| GPU time a step | " + " | ".join(f"{case} ms | %" for case in cases) + " |")
    print("|---|" + "---:|---:|" * len(cases))
    for kind in [*dict(KERNEL_KINDS), "idle", "step"]:
        cells = [f"{b[kind]:.1f} | {100 * b[kind] / b['step']:.0f}" for b in breakdowns.values()]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    for case, breakdown in breakdowns.items():
        print(f"\n{case}: the longest kernels, ms a step")
        for name, ms in breakdown["top"]:
            print(f"  {ms:6.2f}  {name}")


CONFIG_DIR = Path(__file__).resolve().parents[1] / "scripts" / "pretrain" / "imagenet-100"
SOURCES = ("image_folder", "stream")
METHODS = ("diet", "simclr")
SIMCLR = {
    "method_kwargs": {"proj_hidden_dim": 2048, "proj_output_dim": 128, "temperature": 0.2},
    "optimizer": {
        "name": "lars",
        "lr": 0.3,
        "weight_decay": 1e-6,
        "kwargs": {"clip_lr": True, "eta": 0.02, "exclude_bias_n_norm": True},
    },
}


def make_folder(root: Path, images: int, classes: int, cuda: bool, size_scale: float = 1.0) -> Path:
    """The synthetic JPEG folder (kept when it already holds ``images`` files), written by a
    separate process so that this one keeps no CUDA context."""
    if root.is_dir() and sum(1 for _ in root.rglob("*.jpg")) == images:
        return root
    started = time.time()
    case = {"make": str(root), "images": images, "classes": classes, "cuda": cuda}
    made = run_case(__file__, {**case, "size_scale": size_scale}, timeout=1200)
    if "error" in made:
        raise SystemExit(f"writing the JPEG folder failed: {made['error']}")
    megabytes = sum(p.stat().st_size for p in root.rglob("*.jpg")) / 2**20
    print(f"# wrote {images} JPEGs ({megabytes / images * 1024:.0f} KiB each) to {root} in "
          f"{time.time() - started:.0f} s on {made['device']}", flush=True)  # fmt: skip
    return root


def write_folder_case(case: dict) -> dict:
    """The ``make`` case: the JPEGs generated and encoded on the GPU (the CPU without one)."""
    import torch

    from tests._helpers.synthetic import IMAGENET_LIKE_SIZES, write_jpeg_folder

    scale = case["size_scale"]
    sizes = [(round(h * scale), round(w * scale)) for h, w in IMAGENET_LIKE_SIZES]
    device = "cuda" if case["cuda"] and torch.cuda.is_available() else "cpu"
    per_class = case["images"] // case["classes"]
    write_jpeg_folder(Path(case["make"]), case["classes"], per_class, sizes=sizes, device=device)
    return {"device": device}


class GPUBusy:
    """The used GPUs' mean utilisation (%) between start() and stop(), sampled every 100 ms by
    one ``nvidia-smi`` process."""

    def __init__(self, gpus: int) -> None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = visible.split(",")[:gpus] if visible else [str(i) for i in range(gpus)]
        self.query = [
            "nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
            "-i", ",".join(ids), "-lms", "100",
        ]  # fmt: skip

    def start(self) -> None:
        self.process = subprocess.Popen(self.query, stdout=subprocess.PIPE, text=True)

    def stop(self) -> float:
        self.process.send_signal(signal.SIGINT)
        words = self.process.communicate(timeout=30)[0].split()
        samples = [float(word) for word in words if word.replace(".", "", 1).isdigit()]
        return sum(samples) / len(samples) if samples else float("nan")


def window(case: dict):
    """A callback timing ``case["steps"]`` steps after ``case["warmup"]`` on every rank (the
    same step on each, so DDP ranks stop together); rank 0 samples the GPUs and keeps the result."""
    import torch
    from lightning.pytorch import Callback

    cuda = case["accelerator"] == "gpu"

    class Window(Callback):
        def __init__(self) -> None:
            self.steps, self.start, self.result, self.first_step = 0, None, {}, float("nan")
            self.busy = GPUBusy(case["gpus"]) if cuda else None
            self.profiler = None
            if case.get("profile"):
                from torch.profiler import ProfilerActivity, profile

                # kernels only (CUPTI): CPU-side tracing would slow the host that feeds them
                self.profiler = profile(
                    activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]
                )

        def setup(self, trainer, module, stage: str) -> None:
            print_phase(case, f"rank {trainer.global_rank}: processes joined, model next")

        def on_fit_start(self, trainer, module) -> None:
            print_phase(case, f"rank {trainer.global_rank}: model on device, loaders next")

        def on_train_start(self, trainer, module) -> None:
            print_phase(case, f"rank {trainer.global_rank}: set up, training starts")

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == 0 and batch_idx == 0:
                self.first_step = since_launch(case)
                print_phase(case, f"rank {trainer.global_rank}: first batch")
            if self.start is None and trainer.global_step >= case["warmup"]:
                print_phase(case, f"rank {trainer.global_rank}: warmed up, timing")
                if cuda:
                    torch.cuda.synchronize()
                    if trainer.global_rank == 0:
                        self.busy.start()
                if self.profiler is not None:
                    self.profiler.__enter__()
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if self.start is None:
                return
            self.steps += 1
            if self.steps < case["steps"]:
                return
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - self.start
            world = trainer.world_size
            if self.profiler is not None:  # its own cost inflates the step: a separate run
                self.profiler.__exit__(None, None, None)
                self.result["profile"] = kernel_breakdown(self.profiler, self.steps, elapsed)
            self.result |= {
                "samples_s": self.steps * case["batch_size"] * world / elapsed,
                "busy": self.busy.stop() if cuda and trainer.global_rank == 0 else float("nan"),
                "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else float("nan"),
                "rank": trainer.global_rank,
                "first_step_s": self.first_step,
            }
            print_phase(case, f"rank {trainer.global_rank}: timed, stopping")
            trainer.should_stop = True
            self.extra(trainer, module)

        def extra(self, trainer, module) -> None:
            """Room for a script's own figures (``sdiet_imagenet_scale.py``)."""

    return Window()


def compose(case: dict, config: str = "diet"):
    """The cfg ``solo-diet pretrain`` trains for the case (ImageNet-100 recipe, our overrides)."""
    from omegaconf import OmegaConf

    from solo_diet.launch.common import compose_cfg

    source = case["source"]
    overrides = [
        f"data.train_path={case['folder']}", "data.val_path=null",
        f"data.format={'gpu' if source == 'stream' else 'image_folder'}",
        f"data.num_workers={case['workers']}", f"optimizer.batch_size={case['batch_size']}",
        f"precision={case['precision']}", f"accelerator={case['accelerator']}",
        f"devices={case['gpus']}",
        f"strategy={'ddp' if case['gpus'] * case.get('nodes', 1) > 1 else 'auto'}",
        "max_epochs=3", "checkpoint.enabled=False", "auto_resume.enabled=False",
        f"checkpoint.dir={case['out']}", "++wandb.enabled=False", "++enable_progress_bar=False",
        "++num_sanity_val_steps=0", "++benchmark=True",
        *case.get("overrides", []),
    ]  # fmt: skip
    if source == "stream":
        overrides.append("++data.gpu.storage=stream")
    cfg = compose_cfg(str(CONFIG_DIR), config, overrides)
    if case["method"] == "simclr":
        cfg.method = "simclr"
        cfg.method_kwargs = SIMCLR["method_kwargs"]
        cfg.optimizer = OmegaConf.merge(cfg.optimizer, SIMCLR["optimizer"])
        cfg.optimizer.kwargs = SIMCLR["optimizer"]["kwargs"]
        cfg.augmentations[0].num_crops = 2
    return cfg


def run_training_case(case: dict, callback=None) -> Optional[dict]:
    """Train the case through ``run_pretrain``; rank 0's result (None on other ranks)."""
    import logging

    from solo_diet.launch.pretrain import run_pretrain

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    callback = callback or window(case)
    print_phase(case, "imported")
    run_pretrain(compose(case, case.get("config", "diet")), extra_callbacks=[callback])
    print_phase(case, "training returned")
    return callback.result if callback.result.get("rank") == 0 else None


def visible_gpus() -> int:
    try:
        out = subprocess.check_output(["nvidia-smi", "-L"], text=True)
    except (OSError, subprocess.CalledProcessError):
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    count = len([line for line in out.splitlines() if line.startswith("GPU ")])
    return min(count, len(visible.split(","))) if visible else count


def gpu_name() -> str:
    try:
        query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", "0"]
        return subprocess.check_output(query, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "CPU"


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What every case shares; ``--smoke`` shrinks everything for a CPU."""
    cores = len(os.sched_getaffinity(0))
    common = {
        "batch_size": args.batch_size, "precision": args.precision, "accelerator": "gpu",
        "steps": args.steps, "overrides": list(args.override), "profile": args.profile,
    }  # fmt: skip
    if args.smoke:
        common.update(batch_size=4, precision="32", accelerator="cpu", steps=2, warmup=1)
        common["overrides"] += ["backbone.name=resnet18", "augmentations.0.crop_size=32"]
        args.images, args.classes, args.gpus, args.workers = 24, 4, [1], 1
    common["workers_for"] = {g: args.workers or max(1, cores // g) for g in args.gpus}
    return common


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    parser.add_argument("--gpus", nargs="+", type=int, default=None, help="default: 1 and 2")
    parser.add_argument("--images", type=int, default=30_000)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--folder", type=Path, default=None, help="reuse or keep the JPEGs here")
    parser.add_argument("--batch-size", type=int, default=256, help="per GPU")
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--steps", type=int, default=40, help="timed steps after the warm-up")
    parser.add_argument("--workers", type=int, default=0, help="per GPU; 0: cores / GPUs")
    parser.add_argument("--case-timeout", type=float, default=240.0)
    parser.add_argument("--override", action="append", default=[], help="Hydra override")
    parser.add_argument("--smoke", action="store_true", help="CPU plumbing check, tiny")
    parser.add_argument(
        "--profile", action="store_true", help="also a GPU-time breakdown of each timed window"
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        case = json.loads(args.case)
        print_case_result(write_folder_case(case) if "make" in case else run_training_case(case))
        return
    args.gpus = args.gpus or [g for g in (1, 2) if g <= max(1, visible_gpus())]
    common = settings(args)
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch) / "jpegs"
        scale = 0.1 if args.smoke else 1.0
        make_folder(folder, args.images, args.classes, cuda=not args.smoke, size_scale=scale)
        print(
            f"# streaming_decode, {gpu_name()}, ResNet-50 at 224 px, batch {common['batch_size']} "
            f"per GPU, {common['precision']}, {args.images} JPEGs, workers per GPU "
            f"{common['workers_for']}, {common['steps']} timed steps"
        )
        print("| method | GPUs | source | samples/s | x image_folder | GPU busy % | peak MiB |")
        print("|---|---:|---|---:|---:|---:|---:|")
        breakdowns = {}
        for gpus in args.gpus:
            workers = common["workers_for"][gpus]
            if common.get("warmup", 2 * workers + 8) + common["steps"] > args.images // (
                common["batch_size"] * gpus
            ):
                print(f"# {gpus} GPUs: the window crosses an epoch end (loader restarts timed)")
            for method in args.methods:
                row = {}
                for source in args.sources:
                    case = {
                        **{k: v for k, v in common.items() if k != "workers_for"},
                        "method": method, "source": source, "gpus": gpus, "workers": workers,
                        "warmup": common.get("warmup", 2 * workers + 8), "folder": str(folder),
                        "out": str(Path(scratch) / "out"),
                    }  # fmt: skip
                    row[source] = run_case(__file__, case, args.case_timeout)
                base = row.get("image_folder", {}).get("samples_s")
                for source, result in row.items():
                    if "profile" in result:
                        breakdowns[f"{method} {gpus} GPU {source}"] = result["profile"]
                    speed = result.get("samples_s")
                    ratio = f"{speed / base:.2f}" if speed and base else "-"
                    print(
                        f"| {method} | {gpus} | {source} | {cell(result, 'samples_s', '.0f')} "
                        f"| {ratio} | {cell(result, 'busy', '.0f')} "
                        f"| {cell(result, 'peak_mib', '.0f')} |",
                        flush=True,
                    )
        if breakdowns:
            print_breakdowns(breakdowns)
    print(f"# {time.time() - started:.0f} s in all")


if __name__ == "__main__":
    main()
