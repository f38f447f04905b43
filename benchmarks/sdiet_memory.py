"""Peak GPU memory and samples/s of s-DIET vs DIET, SimCLR, BYOL, Barlow Twins and supervised
training.

Every row trains one method through solo-learn's method class and Lightning's loop for a few steps
on identical settings: batch 256, ``bf16-mixed``, AdamW (lr 1e-3, wd 0.05, no schedule),
channels-last, synthetic data (one fixed random image tensor per view already on the device, so no
decoding or copy cost; dataset indices from a seeded permutation of N, the SuperBatchSampler's
order). ResNet-18 runs at 32 px with the CIFAR stem (dataset ``cifar100``), ResNet-50 at 224 px with
the standard stem (dataset ``imagenet``). Methods and heads:

* ``sdiet``: 3-layer projector 2048-2048-2048 + batch CE over the batch's head rows (s-DIET paper,
  §5), rows and AdamW state in pinned host RAM (``cpu``, next batch prefetched), on the GPU
  (``gpu``) or in memory-mapped files (``disk``, ``--disk-dir``); eager zero-gradient steps.
* ``diet``: DIET as in the DIET paper: ``Linear(d, N)`` head on the backbone output, torch AdamW
  (16*N*d bytes).
* ``simclr`` / ``byol`` / ``barlow_twins``: solo-learn's classes, two views, their CIFAR projector
  widths.
* ``supervised``: backbone + ``Linear(d, 256)`` cross-entropy on 256 classes (a plain reference).

Only sdiet and diet have per-sample state; the other methods run once per backbone (N column "-").
Every case runs in a fresh Python process (its own CUDA context, caching allocators and page cache
pressure; its disk files deleted afterwards), so no case sees another's tables and the order of the
cases changes no number. Peak memory is ``torch.cuda.max_memory_allocated`` over the case (model,
optimizer, head, the synthetic batch); samples/s is ``B * steps / wall time`` of the timed steps
after the warm-up. For s-DIET each case checks where the tables live (``gpu`` on the CUDA device,
``cpu`` in host RAM, ``disk`` in files of ``--disk-dir``) and that every step after the first used
the prefetched rows of the known order. A case that does not fit prints ``OOM``; one past
``--case-timeout`` prints ``timeout``. Prints one table.

    python benchmarks/sdiet_memory.py --backbones resnet18    # about 8 minutes on one H200
    # ~11 min on one H200 (split with --methods):
    python benchmarks/sdiet_memory.py --backbones resnet50 --warmup 5 --steps 20
    # plumbing check on a CPU (numbers meaningless):
    python benchmarks/sdiet_memory.py --quick --device cpu
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

import torch
import torch.nn.functional as F
from lightning.pytorch import Callback, Trainer
from solo.methods import METHODS
from solo.methods.base import BaseMethod

import solo_diet
from solo_diet.core.sdiet.samplers import SuperBatchSampler

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests._helpers.tiny import tiny_cfg  # noqa: E402  (the repository's tests, not the wheel)

NUM_CLASSES = 256
SDIET_PLACEMENTS = ("cpu", "gpu", "disk")
PER_SAMPLE = ("sdiet", "diet")
METHOD_NAMES = ("sdiet", "diet", "simclr", "byol", "barlow_twins", "supervised")
# backbone -> (image size, dataset that selects the stem)
BACKBONES = {
    "resnet18": (32, "cifar100"),
    "resnet50": (224, "imagenet"),
    "cp_resnet8": (32, "cifar100"),
}


class Supervised(BaseMethod):
    """Plain supervised reference: backbone + ``Linear(features_dim, 256)``, cross-entropy on the
    targets."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.head = torch.nn.Linear(self.features_dim, NUM_CLASSES)

    @property
    def learnable_params(self) -> list[dict[str, Any]]:
        return super().learnable_params + [{"name": "head", "params": self.head.parameters()}]

    def training_step(self, batch, batch_idx):
        return F.cross_entropy(self.head(self.backbone(batch[1][0])), batch[2])


def method_kwargs(
    method: str, num_samples: int, proj_dim: Optional[int], disk_dir: str, placement: str
) -> dict:
    """solo-learn's CIFAR widths for the baselines, the paper's for s-DIET; ``proj_dim`` shrinks
    all."""
    kwargs = {
        "sdiet": {
            "num_samples": num_samples,
            "proj_hidden_dim": 2048,
            "proj_output_dim": 2048,
            "row_placement": placement,
            "row_dir": disk_dir,
        },
        "diet": {"num_samples": num_samples},
        "simclr": {"proj_hidden_dim": 2048, "proj_output_dim": 256, "temperature": 0.2},
        "byol": {"proj_hidden_dim": 4096, "proj_output_dim": 256, "pred_hidden_dim": 4096},
        "barlow_twins": {
            "proj_hidden_dim": 2048,
            "proj_output_dim": 2048,
            "lamb": 0.0051,
            "scale_loss": 0.1,
        },
        "supervised": {},
    }[method]
    if proj_dim is not None:
        kwargs.update(
            {
                k: proj_dim
                for k in ("proj_hidden_dim", "proj_output_dim", "pred_hidden_dim")
                if k in kwargs
            }
        )
    return kwargs


class SyntheticBatches:
    """``[indexes, [image] * views, targets]`` on the device, indices in the SuperBatchSampler's
    order (``batch_sampler``: the attribute through which s-DIET finds the order and prefetches)."""

    def __init__(
        self, sampler: SuperBatchSampler, views: int, image: torch.Tensor, targets: torch.Tensor
    ):
        self.batch_sampler, self.views, self.image, self.targets = sampler, views, image, targets

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        cuda = self.image.is_cuda
        for indexes in self.batch_sampler:
            indexes = torch.tensor(indexes).pin_memory() if cuda else torch.tensor(indexes)
            yield [
                indexes.to(self.image.device, non_blocking=True),
                [self.image] * self.views,
                self.targets,
            ]


class Timer(Callback):
    """Wall time from the start of step ``warmup`` to the end of the last step, synchronised."""

    def __init__(self, warmup: int, cuda: bool):
        self.warmup, self.cuda, self.start, self.seconds = warmup, cuda, 0.0, float("nan")

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx == self.warmup:
            self._sync()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, module):
        self._sync()
        self.seconds = time.perf_counter() - self.start


def check_row_store(model: BaseMethod, placement: str, args) -> None:
    """s-DIET's tables are where ``placement`` says, and every step after the first used prefetched
    rows."""
    store = model.row_store
    expected = torch.device(args.device) if placement == "gpu" else torch.device("cpu")
    for name, table in {"table": store.table, "last_step": store.last_step}.items():
        if table.device.type != expected.type:
            raise RuntimeError(
                f"placement={placement}: {name} is on {table.device}, expected {expected}"
            )
        if placement == "disk" and not os.path.isfile(os.path.join(args.disk_dir, f"{name}.bin")):
            raise RuntimeError(f"placement=disk: {name} has no file in {args.disk_dir}")
    if store.prefetch_hits != args.warmup + args.steps - 1:
        raise RuntimeError(
            f"placement={placement}: {store.prefetch_hits} of {args.warmup + args.steps - 1} loads "
            "used prefetched rows"
        )


def measure(
    method: str,
    placement: str,
    backbone: str,
    num_samples: int,
    args,
    callbacks: tuple[Callback, ...] = (),
) -> tuple[str, str]:
    """``(peak MiB, samples/s)`` of one case in this (fresh) process, or ``("OOM", "-")``;
    ``callbacks`` join the Trainer's (benchmarks/sdiet_step_profile.py profiles the timed steps)."""
    size, dataset = BACKBONES[backbone]
    views = 2 if method in ("simclr", "byol", "barlow_twins") else 1
    cfg = tiny_cfg(
        method,
        method_kwargs(method, num_samples, args.proj_dim, args.disk_dir, placement),
        num_large_crops=views,
        num_classes=NUM_CLASSES,
        batch_size=args.batch_size,
        backbone=backbone,
        backbone_kwargs={"width": 8} if backbone == "cp_resnet8" else {},
        dataset=dataset,
        momentum=method == "byol",
        max_epochs=1,
    )
    cfg.optimizer.weight_decay = 0.05
    cfg.scheduler.name = "none"
    cuda = args.device == "cuda"
    if cuda and torch.cuda.memory_allocated() != 0:
        raise RuntimeError("the case does not start from an empty GPU: run it in a fresh process")
    try:
        model = (Supervised if method == "supervised" else METHODS[method])(cfg)
        model = model.to(memory_format=torch.channels_last)
        generator = torch.Generator().manual_seed(0)
        image = torch.randn(args.batch_size, 3, size, size, generator=generator).to(args.device)
        targets = torch.randint(0, NUM_CLASSES, (args.batch_size,), generator=generator).to(
            args.device
        )
        sampler = SuperBatchSampler(num_samples, args.batch_size, seed=0)
        batches = SyntheticBatches(
            sampler, views, image.contiguous(memory_format=torch.channels_last), targets
        )
        timer = Timer(args.warmup, cuda)
        trainer = Trainer(
            accelerator="gpu" if cuda else "cpu",
            devices=1,
            precision=args.precision,
            max_epochs=1,
            max_steps=args.warmup + args.steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[timer, *callbacks],
            limit_val_batches=0,
            num_sanity_val_steps=0,
            benchmark=cuda,
        )
        trainer.fit(model, batches)
        if method == "sdiet":
            if model.super_batch_sampler is not sampler:
                raise RuntimeError(
                    "s-DIET did not find the SuperBatchSampler: nothing was prefetched"
                )
            check_row_store(model, placement, args)
        peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f}" if cuda else "-"
        return peak, f"{args.batch_size * args.steps / timer.seconds:.0f}"
    except torch.cuda.OutOfMemoryError:
        return "OOM", "-"


CASE_SETTINGS = ("device", "batch_size", "precision", "warmup", "steps", "proj_dim")


def run_case(
    method: str, placement: str, backbone: str, num_samples: Optional[int], args
) -> tuple[str, str]:
    """One case in a fresh Python process (``--case``); its disk files are deleted afterwards."""
    disk_dir = os.path.join(args.disk_dir, f"{method}-{placement}-{backbone}-{num_samples}")
    case = {
        "case": [method, placement, backbone, num_samples or 50_000],
        "disk_dir": disk_dir,
        **{key: getattr(args, key) for key in CASE_SETTINGS},
    }
    command = [sys.executable, os.path.abspath(__file__), "--case", json.dumps(case)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.case_timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "-"
    finally:
        shutil.rmtree(disk_dir, ignore_errors=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        return "error", "-"
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


def cases(args):
    """``(method, placement, backbone, N)`` in table order; N-independent methods once per
    backbone."""
    for backbone in args.backbones:
        for method in args.methods:
            if method not in PER_SAMPLE:
                yield method, "-", backbone, None
                continue
            for num_samples in args.num_samples:
                for placement in SDIET_PLACEMENTS if method == "sdiet" else ("device",):
                    yield method, placement, backbone, num_samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--methods", nargs="+", default=list(METHOD_NAMES), choices=METHOD_NAMES)
    parser.add_argument(
        "--backbones", nargs="+", default=["resnet18", "resnet50"], choices=sorted(BACKBONES)
    )
    parser.add_argument("--num-samples", type=int, nargs="+", default=[50_000, 128_000, 1_280_000])
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument(
        "--proj-dim", type=int, default=None, help="shrink every projector width (CPU check)"
    )
    parser.add_argument(
        "--disk-dir", default=None, help="folder of the disk placement (default: a temp dir)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="2 warm-up + 3 timed steps; on --device cpu, tiny"
    )
    parser.add_argument(
        "--case-timeout", type=float, default=240.0, help="seconds one case may take"
    )
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # internal: one case, JSON
    args = parser.parse_args()
    if args.case is not None:
        run_one_case(json.loads(args.case))
        return
    if args.quick:
        args.warmup, args.steps = 2, 3
        if args.device == "cpu":
            args.backbones, args.num_samples, args.batch_size = ["cp_resnet8"], [64, 128], 8
            args.proj_dim, args.precision = args.proj_dim or 32, "32"
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(
        f"# s-DIET memory/throughput, {device}, batch {args.batch_size}, {args.precision}, "
        f"{args.steps} timed steps after {args.warmup}; ResNet-18 at 32 px (CIFAR stem), ResNet-50 "
        "at 224 px"
    )
    print("| method | placement | backbone | N | peak MiB | samples/s |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        args.disk_dir = args.disk_dir or scratch
        for method, placement, backbone, num_samples in cases(args):
            peak, speed = run_case(method, placement, backbone, num_samples, args)
            n = "-" if num_samples is None else str(num_samples)
            print(f"| {method} | {placement} | {backbone} | {n} | {peak} | {speed} |", flush=True)


def run_one_case(case: dict) -> None:
    """The ``--case`` process: measure one case, print ``[peak, samples/s]`` as its last line."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.ERROR)  # solo-learn's per-run scheduler_interval warning
    solo_diet.register()
    method, placement, backbone, num_samples = case.pop("case")
    print(json.dumps(measure(method, placement, backbone, num_samples, argparse.Namespace(**case))))


if __name__ == "__main__":
    main()
