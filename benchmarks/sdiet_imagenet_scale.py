"""s-DIET at ImageNet scale, end to end: N = 1.28 M indices on the streaming source, against 50 k.

The JPEGs are ``streaming_decode.py``'s synthetic ImageNet-like folder (``--images`` files, made
once, or ``--folder``). For each N the script links them into a folder of N files (hard links,
file ``k`` is JPEG ``k mod images``, in 100 class folders as ImageNet-100 has), so ``solo-diet
pretrain`` lists, samples and streams N distinct indices. Each case trains s-DIET
(``scripts/pretrain/imagenet-100/sdiet.yaml``: 3-layer 2048 projector, head rows and AdamW state
in the row store, ``method_kwargs.row_placement`` ``cpu`` by default) with ResNet-50 at 224 px,
batch 256 per GPU, ``bf16-mixed``, through ``run_pretrain`` with ``data.format: gpu`` and
``data.gpu.storage: stream``, for ``--warmup`` then ``--steps`` timed steps, in a fresh process
(DDP through Lightning for 2 GPUs). Reported: samples/s (all GPUs), GPU busy %, rank 0's peak
``torch.cuda.max_memory_allocated``, its ratio to the smallest N's case on as many GPUs (the
target: within 5 %), the row store's host tables on rank 0 (``table`` and ``last_step``), rank
0's peak resident memory (VmHWM), when the first step started and when the result came (both
from the case's launch: listing N files and setting up the row store count here). Each case's
progress lines and the seconds its process took to exit go to stderr.

``--nodes K`` runs each case of G GPUs as K nodes of G/K GPUs on this host (K processes,
``NODE_RANK`` 0 to K-1, each with its own block of ``CUDA_VISIBLE_DEVICES``, ``++num_nodes=K``),
and ``--row-sharding`` the cases once per value of ``method_kwargs.row_sharding`` (``node``: each
node holds the rows it owns); the row-store column then lists each rank's table MiB. The 2-node row
at N = 1.28 M, sharded against unsharded (issue 46; measured in docs/benchmarks.md, "Sharded rows
on two nodes"):

    python benchmarks/sdiet_imagenet_scale.py --gpus 2 --sizes 1281167 --nodes 2 \
        --row-sharding none node

On one host of 8 GPUs (issue 47, not yet run: the 8-GPU kind was never lent), the unsharded rows
at 1, 2 and 8 GPUs for the scaling table, then 8 nodes of one GPU and 2 nodes of four:

    python benchmarks/sdiet_imagenet_scale.py --gpus 1 2 8
    python benchmarks/sdiet_imagenet_scale.py --gpus 8 --nodes 8 --row-sharding none node
    python benchmarks/sdiet_imagenet_scale.py --gpus 8 --nodes 2 --row-sharding none node

    python benchmarks/sdiet_imagenet_scale.py                  # 1 and 2 GPUs where visible
    python benchmarks/sdiet_imagenet_scale.py --gpus 1 --steps 200
    python benchmarks/sdiet_imagenet_scale.py --smoke          # CPU plumbing, tiny
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from data_path import cell, print_case_result, run_case  # noqa: E402
from streaming_decode import (  # noqa: E402
    gpu_name,
    make_folder,
    run_training_case,
    visible_gpus,
    window,
    write_folder_case,
)

IMAGENET_TRAIN = 1_281_167


def linked_folder(source: Path, root: Path, count: int, classes: int = 100) -> Path:
    """``count`` hard links to ``source``'s JPEGs in ``classes`` folders (kept when complete)."""
    marker, classes = root / f".complete-{count}", min(classes, max(1, count // 4))
    if marker.exists():
        return root
    jpegs = [str(path) for path in sorted(source.rglob("*.jpg"))]
    started = time.time()
    folders = [str(root / f"class_{label:04d}") for label in range(classes)]
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
    for k in range(count):
        try:
            os.link(jpegs[k % len(jpegs)], os.path.join(folders[k % classes], f"{k:07d}.jpg"))
        except FileExistsError:  # an interrupted earlier run
            pass
    marker.touch()
    print(f"# linked {count} files into {root} in {time.time() - started:.0f} s", flush=True)
    return root


def peak_resident_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_other_nodes(case: dict) -> list[subprocess.Popen]:
    """A case of ``"nodes": K``: this process becomes node 0 (the first ``"gpus"`` GPUs) and starts
    nodes 1 to K-1 on this host, each on the next block of GPUs, as
    benchmarks/multi_node_equivalence.py does; none for one node."""
    nodes, per_node = case.get("nodes", 1), case["gpus"]
    if nodes == 1:
        return []
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    launch = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}

    def gpu_block(node: int) -> str:
        return ",".join(str(node * per_node + g) for g in range(per_node))

    command = [sys.executable, os.path.abspath(__file__), "--case", json.dumps(case)]
    others = [
        subprocess.Popen(
            command,
            env=os.environ | launch | {"NODE_RANK": str(k), "CUDA_VISIBLE_DEVICES": gpu_block(k)},
            stdout=subprocess.DEVNULL,
        )
        for k in range(1, nodes)
    ]
    os.environ.update(launch, NODE_RANK="0", CUDA_VISIBLE_DEVICES=gpu_block(0))
    return others


def sdiet_case(case: dict) -> Optional[dict]:
    """One case: the window's figures plus the row store's host tables (each node's) and resident
    memory."""
    import torch.distributed as dist

    others = start_other_nodes(case) if "NODE_RANK" not in os.environ else []
    callback = window(case)

    def extra(trainer, module) -> None:
        store = module.row_store
        mib = (store.table.nbytes + store.last_step.nbytes) / 2**20
        per_rank = [mib]
        if dist.is_initialized():
            per_rank = [None] * dist.get_world_size()
            dist.all_gather_object(per_rank, mib)
        callback.result.update(
            rows=int(store.table.shape[0]),
            row_store_mib=mib,
            row_store_mib_per_rank=per_rank,
            row_store_device=str(store.table.device),
            resident_mib=peak_resident_mib(),
        )

    callback.extra = extra
    result = run_training_case({**case, "config": "sdiet"}, callback)
    for other in others:
        other.wait()
    return result


def main(argv: Optional[list] = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", nargs="+", type=int, default=[50_000, IMAGENET_TRAIN])
    parser.add_argument("--gpus", nargs="+", type=int, default=None, help="default: 1 and 2")
    parser.add_argument("--images", type=int, default=20_000, help="distinct JPEGs")
    parser.add_argument("--folder", type=Path, default=None, help="keep the JPEGs and links here")
    parser.add_argument("--batch-size", type=int, default=256, help="per GPU")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workers", type=int, default=0, help="per GPU; 0: cores / GPUs")
    parser.add_argument("--row-placement", default="cpu", choices=["cpu", "gpu", "disk"])
    parser.add_argument("--nodes", type=int, default=1, help="each case as this many nodes")
    parser.add_argument("--row-sharding", nargs="+", default=["none"], choices=["none", "node"])
    parser.add_argument("--case-timeout", type=float, default=600.0)
    parser.add_argument("--smoke", action="store_true", help="CPU plumbing check, tiny")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case is not None:
        case = json.loads(args.case)
        print_case_result(write_folder_case(case) if "make" in case else sdiet_case(case))
        return
    args.gpus = args.gpus or [g for g in (1, 2) if g <= max(1, visible_gpus())]
    accelerator, precision, overrides = "gpu", "bf16-mixed", ["backbone.name=resnet50"]
    if args.smoke:
        accelerator, precision = "cpu", "32"
        args.gpus = [args.nodes]
        args.images, args.sizes, args.batch_size, args.warmup, args.steps = 24, [40, 400], 4, 1, 2
        overrides = ["backbone.name=resnet18", "augmentations.0.crop_size=32"]
    overrides += [f"method_kwargs.row_placement={args.row_placement}"]
    cores = len(os.sched_getaffinity(0))
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        base = args.folder or Path(scratch)
        jpegs = make_folder(base / "jpegs", args.images, 4 if args.smoke else 100,
                            cuda=not args.smoke, size_scale=0.1 if args.smoke else 1.0)  # fmt: skip
        folders = {n: linked_folder(jpegs, base / f"linked_{n}", n) for n in args.sizes}
        print(
            f"# sdiet_imagenet_scale, {gpu_name()}, s-DIET ResNet-50 at 224 px, batch "
            f"{args.batch_size} per GPU, {precision}, row store `{args.row_placement}`, streaming "
            "source "
            f"over {args.images} distinct JPEGs, {args.warmup} + {args.steps} timed steps"
        )
        print(
            "| GPUs | nodes | row sharding | N | samples/s | GPU busy % | peak GPU MiB | vs "
            "smallest N | row store MiB (each node) | peak resident MiB | first step at s | "
            "case s |"
        )
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for gpus, sharding in [(g, s) for g in args.gpus for s in args.row_sharding]:
            nodes = args.nodes
            if gpus % nodes:
                raise SystemExit(f"--nodes {nodes} does not divide --gpus {gpus}")
            first_peak = None
            for n in args.sizes:
                case = {
                    "method": "sdiet", "source": "stream", "gpus": gpus // nodes, "nodes": nodes,
                    "workers": args.workers or max(1, cores // gpus), "folder": str(folders[n]),
                    "batch_size": args.batch_size, "precision": precision,
                    "accelerator": accelerator, "warmup": args.warmup, "steps": args.steps,
                    "out": str(Path(scratch) / "out"),
                    "overrides": [*overrides, f"++method_kwargs.row_sharding={sharding}",
                                  *([f"++num_nodes={nodes}"] if nodes > 1 else [])],
                }  # fmt: skip
                result = run_case(__file__, case, args.case_timeout)
                peak = result.get("peak_mib")
                first_peak = first_peak or peak
                ratio = f"{peak / first_peak:.3f}" if peak and first_peak else "-"
                each = result.get("row_store_mib_per_rank")
                tables = " / ".join(f"{m:.0f}" for m in each) if each else "-"
                print(
                    f"| {gpus} | {nodes} | {sharding} | {n} | {cell(result, 'samples_s', '.0f')} "
                    f"| {cell(result, 'busy', '.0f')} | {cell(result, 'peak_mib', '.0f')} "
                    f"| {ratio} "
                    f"| {tables} "
                    f"| {cell(result, 'resident_mib', '.0f')} "
                    f"| {cell(result, 'first_step_s', '.0f')} | {cell(result, 'case_s', '.0f')} |",
                    flush=True,
                )
    print(f"# {time.time() - started:.0f} s in all")


if __name__ == "__main__":
    main()
