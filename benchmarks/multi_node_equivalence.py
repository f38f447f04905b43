"""Is a run over two nodes the same as one node with as many devices? And does it resume exactly?

One host plays two nodes, as Lightning documents for machines without a scheduler: two
``solo-diet pretrain`` processes with ``devices=1 ++num_nodes=2`` and ``NODE_RANK=0/1``,
``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT=<free port>`` (on GPUs, one GPU per "node" through
``CUDA_VISIBLE_DEVICES``). For each method it trains, from the same seed and a tiny synthetic image
folder (``data.format: gpu``, whose augmentations are reseeded each epoch, so a resumed run draws
the same batches):

- **one node**: ``devices=2 strategy=ddp``, Lightning starting the second process;
- **two nodes**: the two processes above, a checkpoint each epoch;
- **two nodes, resumed** (the methods of ``--resume``, default s-DIET): the two nodes again, from
  the two-node run's epoch-0 checkpoint.

Same global batch, world size 2 and ranks in all three; only how the processes were started (and
s-DIET's row store: one per node, each written by its own process) differs. It compares the last
checkpoints: every floating-point tensor of the module, and s-DIET's head rows, AdamW state and
counters; and, as the scale a gap is read against, how far the second epoch moved each of them.
It prints one table (``--json`` also writes it).

    python benchmarks/multi_node_equivalence.py --resume sdiet diet   # 2 GPUs (nvidia-h100-x2)
    python benchmarks/multi_node_equivalence.py --accelerator cpu     # 2 gloo processes on the CPU

``--float64`` (the tests) trains with ``precision=64-true`` and float64 head tables, as the DDP
equivalence test (benchmarks/sdiet_ddp_equivalence.py) does.

``--row-sharding node`` runs s-DIET's two-node runs with their head rows sharded (each node holds
the rows it owns), against the unsharded one-node run; ``--zero-grad-steps lazy`` picks s-DIET's
lazy mode, ``--row-placement`` where its rows live (``gpu``: on the training device); ``--kill-at
S`` makes the run that is resumed a third two-node run killed with ``kill -9`` at the start of
global step ``S`` (both nodes), resumed from its last checkpoint:

    python benchmarks/multi_node_equivalence.py --accelerator cpu --float64 --methods sdiet \
        --row-sharding node --zero-grad-steps lazy --kill-at 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/_helpers/

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "scripts" / "pretrain" / "custom"
# what an earlier distributed run in the calling process may have left in its environment
LAUNCH_VARIABLES = (
    *("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK", "RANK"),
    *("WORLD_SIZE", "LOCAL_WORLD_SIZE", "PL_GLOBAL_SEED", "CUDA_VISIBLE_DEVICES"),
)
METHOD_OVERRIDES = {
    "sdiet": ["method_kwargs.proj_hidden_dim=16", "method_kwargs.proj_output_dim=8"],
    "diet": [],
}
CLASSES, PER_CLASS, BATCH, STEPS = 4, 6, 4, 2
# a pretrain that kills itself (kill -9) at the start of global step ``at``
KILLER = """
import os, signal, sys
from lightning.pytorch.callbacks import Callback
from solo_diet.launch.common import compose_cfg
from solo_diet.launch.errors import run_guarded
from solo_diet.launch.pretrain import run_pretrain

at, config_path, method, *argv = sys.argv[1:]

class KillAtStep(Callback):
    def on_train_batch_start(self, trainer, *args):
        if trainer.global_step == int(at):
            os.kill(os.getpid(), signal.SIGKILL)

cfg = compose_cfg(config_path, method, argv)
sys.exit(run_guarded("pretrain", lambda: run_pretrain(cfg, extra_callbacks=[KillAtStep()])))
"""


def overrides(args: argparse.Namespace, method: str, data: Path, out: Path) -> list[str]:
    """A tiny run of ``method``: CP-ResNet-8 of width 8 at 32 px, ``STEPS`` steps of two epochs."""
    precision = "64-true" if args.float64 else "32"
    extra = ["++method_kwargs.row_dtype=float64"] if args.float64 and method == "sdiet" else []
    if method == "sdiet" and args.zero_grad_steps:
        extra.append(f"++method_kwargs.zero_grad_steps={args.zero_grad_steps}")
    if method == "sdiet":
        extra.append(f"++method_kwargs.row_placement={args.row_placement}")
        extra += [f"++method_kwargs.row_dir={out}-rows"] if args.row_placement == "disk" else []
    return [
        f"data.train_path={data}",
        "data.val_path=null",
        "data.format=gpu",
        "data.num_workers=0",
        f"checkpoint.dir={out}",
        "checkpoint.frequency=1",
        "++checkpoint.keep_prev=True",
        "auto_resume.enabled=False",
        "++wandb.enabled=False",
        "max_epochs=2",
        f"accelerator={args.accelerator}",
        f"precision={precision}",
        "strategy=ddp",
        f"++limit_train_batches={STEPS}",
        "++enable_progress_bar=False",
        "++enable_model_summary=False",
        "backbone.name=cp_resnet8",
        "++backbone.kwargs.width=8",
        "augmentations.0.crop_size=32",
        f"optimizer.batch_size={BATCH}",
        *METHOD_OVERRIDES[method],
        *extra,
    ]


def command(method: str, run_overrides: list[str]) -> list[str]:
    return [
        *(sys.executable, "-m", "solo_diet.cli.main", "pretrain"),
        *("--config-path", str(CONFIGS), "--config-name", method),
        *run_overrides,
    ]


def base_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one_node(args: argparse.Namespace, method: str, data: Path, out: Path) -> None:
    env = base_environment()
    if args.accelerator == "gpu":
        env["CUDA_VISIBLE_DEVICES"] = "0,1"
    argv = command(method, overrides(args, method, data, out) + ["devices=2"])
    done = subprocess.run(
        argv, env=env, cwd=out.parent, capture_output=True, text=True, timeout=args.timeout
    )
    if done.returncode != 0:
        sys.exit(f"one node of 2 devices failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def run_two_nodes(
    args: argparse.Namespace,
    method: str,
    data: Path,
    out: Path,
    extra: list[str] = (),
    kill_at: Optional[int] = None,
) -> None:
    """The two "nodes" on this host: NODE_RANK 0 and 1, one device each, one main address; with
    ``kill_at``, both are killed (-9) at the start of that global step."""
    port = str(free_port())
    run = overrides(args, method, data, out) + ["devices=1", "++num_nodes=2"]
    if method == "sdiet":
        run.append(f"++method_kwargs.row_sharding={args.row_sharding}")
    argv = command(method, run)
    if kill_at is not None:
        argv = [sys.executable, "-c", KILLER, str(kill_at), str(CONFIGS), method, *run]
    nodes = []
    for node in (0, 1):
        env = base_environment() | {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "NODE_RANK": str(node),
        }
        if args.accelerator == "gpu":
            env["CUDA_VISIBLE_DEVICES"] = str(node)
        log = open(out.parent / f"{out.name}-node{node}.log", "w")
        nodes.append(
            (
                subprocess.Popen(
                    [*argv, *extra], env=env, cwd=out.parent, stdout=log, stderr=subprocess.STDOUT
                ),
                log,
            )
        )
    deadline = time.monotonic() + args.timeout
    # a node that fails leaves the other waiting for it: stop both at the first failure
    while any(p.poll() is None for p, _ in nodes) and time.monotonic() < deadline:
        if any(p.poll() not in (None, 0) for p, _ in nodes):
            break
        time.sleep(0.5)
    failed = []
    for node, (process, log) in enumerate(nodes):
        if process.poll() is None:
            process.kill()
        code = process.wait()
        log.close()
        if code != (0 if kill_at is None else -signal.SIGKILL):
            failed.append(f"node {node} ({code}):\n{Path(log.name).read_text()[-4000:]}")
    if failed:
        sys.exit("two nodes failed: " + "\n".join(failed))


def last_checkpoint(out: Path, epoch: int = 1) -> Path:
    found = sorted(out.glob(f"*/*/*-ep={epoch}.ckpt"))
    if len(found) != 1:
        sys.exit(f"expected one ep={epoch} checkpoint under {out}, found {found}")
    return found[0]


def trained_state(path: Path) -> dict[str, torch.Tensor]:
    """The module's floating-point tensors and s-DIET's row store of a checkpoint."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    state = {k: v for k, v in checkpoint["state_dict"].items() if v.is_floating_point()}
    store = checkpoint.get("sdiet_row_store", {})
    state |= {f"row store {k}": v for k, v in store.items() if isinstance(v, torch.Tensor)}
    if "global_step" in store:
        state["row store global_step"] = torch.tensor(float(store["global_step"]))
    state["steps"] = torch.tensor(float(checkpoint["global_step"]))
    return state


def gaps(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, float]:
    """Max abs difference per group of tensors: backbone, head/projector, row store, ..."""
    if a.keys() != b.keys():
        sys.exit(f"different tensors: {sorted(a.keys() ^ b.keys())}")
    grouped: dict[str, float] = {}
    for name in a:
        group = name if name.startswith(("row store", "steps")) else name.split(".")[0]
        gap = (a[name].double() - b[name].double()).abs().max().item() if a[name].numel() else 0.0
        grouped[group] = max(grouped.get(group, 0.0), gap)
    return grouped


def compare_method(args: argparse.Namespace, method: str, work: Path, data: Path) -> dict:
    """The gaps of ``method``'s two-node run to the one-node run and, with ``--resume``, of the
    resumed two-node run to the uninterrupted one; how far its second epoch moved each tensor (what
    a gap of 0 is measured against); the two-node run's ``num_nodes`` and ``devices``."""
    started = time.monotonic()
    one, two = work / f"{method}-one-node", work / f"{method}-two-nodes"
    run_one_node(args, method, data, one)
    run_two_nodes(args, method, data, two)
    reference = trained_state(last_checkpoint(two))
    result = {
        "two nodes vs one node": gaps(trained_state(last_checkpoint(one)), reference),
        "resumed vs uninterrupted": None,
        "second epoch moved": gaps(trained_state(last_checkpoint(two, epoch=0)), reference),
    }
    if method in args.resume:
        copied = work / f"{method}-epoch0.ckpt"  # from elsewhere: the resumed run gets its folder
        source = two
        if args.kill_at is not None:  # the resumed run starts from what a killed one left
            source = work / f"{method}-two-nodes-killed"
            run_two_nodes(args, method, data, source, kill_at=args.kill_at)
        shutil.copy(last_checkpoint(source, epoch=0), copied)
        resumed = work / f"{method}-two-nodes-resumed"
        run_two_nodes(args, method, data, resumed, [f"++resume_from_checkpoint={copied}"])
        result["resumed vs uninterrupted"] = gaps(
            trained_state(last_checkpoint(resumed)), reference
        )
    trained = json.loads((last_checkpoint(two).parent / "args.json").read_text())
    result["two-node run"] = {key: trained[key] for key in ("num_nodes", "devices")}
    result["row sharding"] = trained["method_kwargs"].get("row_sharding")
    result["seconds"] = time.monotonic() - started
    return result


def print_table(args: argparse.Namespace, results: dict) -> None:
    device = torch.cuda.get_device_name(0) if args.accelerator == "gpu" else "CPU (gloo)"
    precision = "float64" if args.float64 else "fp32"
    print(
        f"# two nodes of 1 device vs one node of 2, {device}, {precision}: "
        f"N={CLASSES * PER_CLASS}, global batch {2 * BATCH}, 2 epochs of {STEPS} steps, "
        "max abs difference"
    )
    print(
        "| method | tensors | two nodes vs one node | resumed from epoch 0 vs uninterrupted | "
        "moved in epoch 1 |"
    )
    print("|---|---|---|---|---|")
    for method, result in results.items():
        resumed = result["resumed vs uninterrupted"]
        for group, gap in result["two nodes vs one node"].items():
            after_resume = "not run" if resumed is None else f"{resumed[group]:.2e}"
            moved = result["second epoch moved"][group]
            print(f"| {method} | {group} | {gap:.2e} | {after_resume} | {moved:.2e} |")
    for method, result in results.items():
        print(f"{method}: {result['seconds']:.0f} s, two-node run {result['two-node run']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--methods", nargs="+", default=["sdiet", "diet"])
    parser.add_argument(
        "--resume", nargs="*", default=["sdiet"], help="methods whose resume is checked too"
    )
    parser.add_argument("--float64", action="store_true", help="precision 64-true, float64 rows")
    parser.add_argument("--row-sharding", choices=["none", "node"], default="none")
    parser.add_argument("--zero-grad-steps", choices=["eager", "lazy"], default=None)
    parser.add_argument("--row-placement", choices=["cpu", "gpu", "disk"], default="cpu")
    parser.add_argument(
        "--kill-at", type=int, default=None, help="resume a run killed (-9) at this global step"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--json", default=None, help="also write the gaps to this file")
    args = parser.parse_args()
    if args.accelerator == "gpu" and torch.cuda.device_count() < 2:
        sys.exit("--accelerator gpu needs 2 GPUs (or use --accelerator cpu)")
    from tests._helpers.synthetic import write_image_folder

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = write_image_folder(Path(tmp) / "train", CLASSES, PER_CLASS, seed=0)
        for method in args.methods:
            results[method] = compare_method(args, method, Path(tmp), data)
    print_table(args, results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
