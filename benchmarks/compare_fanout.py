"""Does ``solo-diet compare`` spread its jobs over the GPUs, and how much faster is it for that?

Runs one small comparison (the shipped Animal-MNIST spec's configs on a synthetic 32 px ImageFolder,
``--runs`` methods x ``--seeds`` seeds + both reference rows, ``--epochs`` epochs) three times into
separate folders: with ``parallel.workers=1`` (every job in one process, one after another), then
with ``--jobs-per-gpu`` workers per visible GPU (jobs in processes of their own GPUs), once with a
fresh process per job (``parallel.reuse_workers=false``) and once with reusable workers that import
once and run job after job (``true``). Prints one table: workers, whether they were reused, jobs,
wall seconds, speed-up, the worker processes and the GPUs the jobs' logs say they ran on (the
comparisons' own output goes to a log in the scratch folder).

    python benchmarks/compare_fanout.py                  # on a multi-GPU node
    python benchmarks/compare_fanout.py --jobs-per-gpu 2 --epochs 100   # two jobs per GPU
    python benchmarks/compare_fanout.py --jobs-per-gpu 2 --epochs 100 --modes reused  # one mode
    python benchmarks/compare_fanout.py --smoke          # 2 CPU workers, tiny budget
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_path import gpu_name, write_folder  # noqa: E402

SPEC = Path(__file__).resolve().parent / "compare" / "animal_mnist.yaml"
RUNS = ("diet", "simclr", "byol", "vicreg", "barlow_twins", "sdiet")
MODES = ("one", "fresh", "reused")


def overrides(
    args: argparse.Namespace, data: Path, out: Path, workers: int, reuse: bool
) -> list[str]:
    runs = ", ".join(f"{{name: {m}, config_name: {m}}}" for m in RUNS[: args.runs])
    settings = [
        f"data.root={data}",
        f"output_dir={out}",
        f"budget.max_epochs={args.epochs}",
        f"seeds=[{','.join(str(s) for s in range(args.seeds))}]",
        f"parallel.workers={workers}",
        f"parallel.jobs_per_gpu={args.jobs_per_gpu}",
        f"parallel.reuse_workers={reuse}",
        f"runs=[{runs}]",
    ]
    if args.smoke:
        settings += [
            "budget.batch_size=8",
            "budget.limit_train_batches=2",
            "data.format=image_folder",
            "trainer=[accelerator=cpu,precision=32,data.num_workers=0]",
            "pretrain_overrides=[backbone.kwargs.width=8]",
            "linear.overrides=[max_epochs=1,optimizer.batch_size=16]",
            "evaluation.lidar_samples=8",
            "evaluation.lidar_views=3",
            "evaluation.batch_size=16",
        ]
    return settings


def devices_used(out: Path) -> list[str]:
    """The CUDA_VISIBLE_DEVICES of every job, from the header lines of their logs."""
    found = set()
    for log in out.glob("**/job.log"):
        found.update(re.findall(r"CUDA_VISIBLE_DEVICES=(\S*) ", log.read_text()))
    return sorted(found)


def worker_processes(out: Path) -> str:
    """How many processes ran the jobs, from the header lines of their logs."""
    headers = [log.read_text().split("\n", 1)[0] for log in out.glob("**/job.log")]
    if not headers:
        return "this process"
    reused = {re.search(r" \(in worker (\d+),", h) for h in headers}
    return str(
        len({m.group(1) for m in reused if m}) + sum(" (in worker " not in h for h in headers)
    )


def main(argv: list | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help=f"methods, the first of {RUNS}")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--images", type=int, default=5000)
    parser.add_argument("--jobs-per-gpu", type=int, default=1)
    parser.add_argument(
        "--modes",
        nargs="+",
        default=list(MODES),
        choices=MODES,
        help="one: every job in this process; fresh: a process per job; reused: reusable workers",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    from solo_diet.compare import run_compare
    from solo_diet.compare.run.fanout import visible_gpus

    if args.smoke:
        args.runs, args.seeds, args.epochs, args.images = 2, 1, 1, 60
    for name in ("lightning.pytorch", "lightning.fabric"):  # their handlers bypass the redirect
        logging.getLogger(name).setLevel(logging.ERROR)
    many = 2 if args.smoke else max(1, len(visible_gpus()) * args.jobs_per_gpu)
    card = "CPU" if args.smoke else f"{len(visible_gpus())} x {gpu_name()}"
    jobs = args.runs * args.seeds + 2
    print(
        f"# compare fan-out, {card}: {args.runs} methods x {args.seeds} seeds + 2 reference rows, "
        f"{args.epochs} epochs on {args.images} synthetic 32 px images"
    )
    print("| workers | reused | jobs | wall s | speed-up | processes | devices of the jobs |")
    print("|---:|---|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        write_folder(data / "train", args.images)
        write_folder(data / "val", max(args.images // 5, 50))
        first = None
        settings = {"one": (1, True), "fresh": (many, False), "reused": (many, True)}
        for workers, reuse in (settings[mode] for mode in args.modes):
            out = Path(scratch) / f"workers-{workers}-{reuse}"
            started = time.time()
            with (out.parent / f"{out.name}.log").open("w") as log:  # keep the table alone
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    run_compare(SPEC, overrides(args, data, out, workers, reuse))
            wall = time.time() - started
            first = first or wall
            used = ", ".join(d or "CPU" for d in devices_used(out)) or "this process"
            reused = "-" if workers == 1 else ("yes" if reuse else "no")
            print(
                f"| {workers} | {reused} | {jobs} | {wall:.0f} | {first / wall:.2f} | "
                f"{worker_processes(out)} | {used} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
