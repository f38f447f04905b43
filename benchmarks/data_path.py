"""Where pretraining waits: solo-learn's loader, the GPU data path and the ceiling, on one card.

For each method x backbone x data source, one fresh Python process trains through solo-learn's
method class and Lightning's loop, built as ``solo-diet pretrain`` builds it from our CIFAR configs
(``scripts/pretrain/cifar/<method>.yaml``; simclr/byol/vicreg from their ``_sem`` configs without
``method_kwargs.sem``), batch 256, bf16-mixed, on a synthetic 32 px ImageFolder (random PNGs, 10
classes; the model keeps the CIFAR stem and the config's augmentations). Sources: ``image_folder``
(solo-learn's dataset and DataLoader with ``--workers`` workers: ``data.format: image_folder``),
``gpu`` (``data.format: gpu``: the set decoded once, batches augmented on the GPU, the augmentation
replayed as CUDA graphs), ``gpu_eager`` (the same with ``data.gpu.cuda_graphs: false``; only when
named in ``--sources``), ``gpu_graph`` (the ``gpu`` source with the whole training step replayed
as one CUDA graph, ``performance.step_graph=on`` and ``strategy=auto``; only when named; its
``/ step graph`` is its share of ``step_ceiling.py``'s graph of the same step, run once per
backbone for diet, simclr and byol), ``ceiling`` (the same step on a few pre-made augmented GPU
batches, no augmentation) and ``bare`` (the ceiling's batches, model, optimizer, scheduler and
precision, but
the timed steps run outside Lightning's loop: ``training_step`` under the precision's autocast,
``backward``, the optimizer and scheduler steps and, for momentum methods, the EMA update and tau
schedule, no logging, the LightningModule called itself, so a recipe's one-device DDP wrapper is
skipped too; ``/ bare`` is the Lightning step's share of a plain loop of the same math, on one card
in one run). The model is built as the launcher builds it (our same-math substitutes
included: ``--override ++performance.foreach_substitutes=False`` for solo-learn's). After
``--warmup`` steps
the window runs for ``--seconds`` (at least ``--min-steps``): samples/s over it, the GPU busy %
sampled every 50 ms during it by ``nvidia-smi``, and the case's peak
``torch.cuda.max_memory_allocated``. Prints one table; ``pretrain_wall.py`` times whole runs.

    python benchmarks/data_path.py                     # 56 cases, sized for ~10 min on one H100
    python benchmarks/data_path.py --backbones resnet18   # half of them (one per backbone)
    python benchmarks/data_path.py --methods diet simclr --backbones resnet18
    python benchmarks/data_path.py --methods diet simclr --backbones resnet18 \
        --sources image_folder gpu gpu_eager ceiling   # CUDA graphs against eager augmentation
    python benchmarks/data_path.py --backbones resnet18 --sources gpu ceiling bare
                                                    # issue 32's Lightning / bare ratio
    python benchmarks/data_path.py --methods diet simclr --backbones resnet18 --sources gpu \
        --sync-every-batch      # the same with a wait for the GPU after every batch
    python benchmarks/data_path.py --methods diet simclr byol --backbones resnet18 \
        --sources gpu gpu_graph          # the graphed step against step_ceiling.py's graph
    python benchmarks/data_path.py --smoke             # one tiny case per source on a CPU
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

CONFIG_DIR = Path(__file__).resolve().parents[1] / "scripts" / "pretrain" / "cifar"
METHOD_NAMES = ("diet", "sdiet", "simclr", "byol", "vicreg", "simclr_sem", "cplearn")
SOURCES = ("image_folder", "gpu", "ceiling", "bare")
EXTRA_SOURCES = ("gpu_eager", "gpu_graph")
GRAPH_OVERRIDES = ["++performance.step_graph=on", "strategy=auto"]  # the gpu_graph source's
CEILING_METHODS = ("diet", "simclr", "byol")  # the steps step_ceiling.py captures
BACKBONES = {
    "resnet18": ["backbone.name=resnet18"],
    "cp_resnet8": ["backbone.name=cp_resnet8", "++backbone.kwargs.width=128"],
}
PREMADE = 4  # distinct augmented batches cycled by the ceiling source


def write_folder(root: Path, count: int, size: int = 32, classes: int = 10) -> Path:
    """``count`` random ``size`` px PNGs in ``classes`` class folders (smooth noise, seeded)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(count):
        folder = root / f"class_{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        coarse = rng.integers(0, 256, size=(size // 4, size // 4, 3), dtype=np.uint8)
        Image.fromarray(coarse).resize((size, size), Image.BILINEAR).save(folder / f"{i:06d}.png")
    return root


def compose_method(method: str, case: dict, extra: list):
    """The parsed cfg ``solo-diet pretrain`` would train, with the case's settings."""
    from solo.args.pretrain import parse_cfg

    from solo_diet.launch.common import compose_cfg, normalize_devices
    from solo_diet.launch.datapaths import parse_data_settings

    plain = method in ("simclr", "byol", "vicreg")
    overrides = (
        case["backbone_overrides"]
        + extra
        + [
            f"optimizer.batch_size={case['batch_size']}",
            f"precision={case['precision']}",
            f"accelerator={case['accelerator']}",
            "devices=1",
            "++wandb.enabled=False",
            "++auto_resume.enabled=False",
            f"data.num_workers={case['workers']}",
            *case["overrides"],
        ]
    )
    cfg = compose_cfg(str(CONFIG_DIR), f"{method}_sem" if plain else method, overrides)
    if plain:
        cfg.method = method
        del cfg.method_kwargs["sem"]
    normalize_devices(cfg)
    parse_data_settings(cfg)
    return parse_cfg(cfg)


def first_visible_gpu() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]


class GPUBusy:
    """The GPU's utilisation (%) between start() and stop(), sampled every 50 ms by one
    ``nvidia-smi -lms 50`` process (the share of time a kernel was running, per the driver)."""

    def start(self) -> None:
        query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
        self.process = subprocess.Popen(
            query + ["-i", first_visible_gpu(), "-lms", "50"], stdout=subprocess.PIPE, text=True
        )

    def stop(self) -> float:
        self.process.send_signal(signal.SIGINT)  # nvidia-smi's loop ends cleanly on Ctrl-C
        words = self.process.communicate(timeout=30)[0].split()
        samples = [float(word) for word in words if word.replace(".", "", 1).isdigit()]
        return sum(samples) / len(samples) if samples else float("nan")


def window_callback(case: dict):
    """A Lightning callback timing the window after the warm-up, then stopping the run."""
    import torch
    from lightning.pytorch import Callback

    cuda = case["accelerator"] == "gpu"

    class Window(Callback):
        def __init__(self):
            self.start, self.batches, self.steps, self.result = None, 0, 0, {}
            self.busy = GPUBusy() if cuda else None

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.batches += 1
            if self.start is None and self.batches > case["warmup"]:
                if cuda:
                    torch.cuda.synchronize()
                    self.busy.start()
                self.start = time.perf_counter()
                if case["source"] == "bare":
                    self.time_bare_steps(trainer, module)

        def time_bare_steps(self, trainer, module):
            """The window's steps outside Lightning's loop, then the run stops."""
            step = bare_step(trainer, module)
            while True:
                step(trainer.global_step + self.steps)
                self.steps += 1
                elapsed = time.perf_counter() - self.start
                if self.steps >= case["min_steps"] and elapsed >= case["seconds"]:
                    break
            self.finish(trainer)

        def finish(self, trainer):
            if cuda:
                torch.cuda.synchronize()
            elapsed = time.perf_counter() - self.start
            self.result = {
                "samples_s": self.steps * case["batch_size"] / elapsed,
                "busy": self.busy.stop() if cuda else float("nan"),
                "steps": self.steps,
            }
            trainer.should_stop = True

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if cuda and case["sync_every_batch"]:  # what a per-batch timer's wait costs
                torch.cuda.synchronize()
            if self.start is None or self.result:
                return
            self.steps += 1
            elapsed = time.perf_counter() - self.start
            if self.steps >= case["min_steps"] and elapsed >= case["seconds"]:
                self.finish(trainer)

    return Window()


def bare_step(trainer, module):
    """One training step of ``module`` without Lightning's loop, as a function of the step count:
    the next batch of the Trainer's loader (a fresh pass over it, the batch index counted here),
    ``training_step`` under the Trainer's precision context (its autocast), ``backward``, the
    optimizer's ``zero_grad``/``step``, the step-interval schedulers and, where the method has one,
    the momentum updater's EMA over ``momentum_pairs`` and its tau schedule (solo-learn's
    ``on_train_batch_end`` without its ``tau`` log). ``self.log`` is off: Lightning's logging is
    part of what the ratio measures."""
    import torch

    loader = trainer.train_dataloader
    device = trainer.strategy.root_device
    optimizer = trainer.optimizers[0]
    schedulers = [c.scheduler for c in trainer.lr_scheduler_configs if c.interval == "step"]
    updater = getattr(module, "momentum_updater", None)
    total_steps = trainer.estimated_stepping_batches
    module.log = module.log_dict = lambda *args, **kwargs: None
    batches = {"iterator": iter(loader), "index": 0}

    def to_device(value):
        if isinstance(value, torch.Tensor):
            return value.to(device, non_blocking=True)
        return [to_device(v) for v in value] if isinstance(value, (list, tuple)) else value

    def next_batch():
        try:
            batch = next(batches["iterator"])
        except StopIteration:
            batches["iterator"], batches["index"] = iter(loader), 0
            batch = next(batches["iterator"])
        batches["index"] += 1
        return to_device(batch), batches["index"] - 1

    def step(global_step: int) -> None:
        batch, index = next_batch()
        optimizer.zero_grad(set_to_none=True)
        with trainer.precision_plugin.forward_context():
            out = module.training_step(batch, index)
        (out["loss"] if isinstance(out, dict) else out).backward()
        optimizer.step()
        for scheduler in schedulers:
            scheduler.step()
        if updater is not None:
            for pair in module.momentum_pairs:
                updater.update(*pair)
            updater.update_tau(cur_step=global_step, max_steps=total_steps)

    return step


class PremadeViews:
    """The ceiling's transform: a few augmented batches made once, handed out in turn."""

    def __init__(self, views: list):
        self.views, self.calls = views, 0

    def __call__(self, rows, generator):
        self.calls += 1
        return self.views[self.calls % len(self.views)]


def solo_learn_loader(cfg, train_batch_sampler):
    """solo-learn's dataset and DataLoader, as ``data.format: image_folder`` runs them."""
    from solo.data.pretrain_dataloader import (
        FullTransformPipeline,
        NCropAugmentation,
        prepare_dataloader,
        prepare_datasets,
    )
    from torch.utils.data import DataLoader

    from solo_diet.launch.datapaths.image_folder import build_pretrain_transform

    views = [
        NCropAugmentation(build_pretrain_transform("custom", aug), aug.num_crops)
        for aug in cfg.augmentations
    ]
    dataset = prepare_datasets("custom", FullTransformPipeline(views), cfg.data.train_path)
    sampler = None if train_batch_sampler is None else train_batch_sampler(cfg, dataset)
    workers = cfg.data.num_workers
    if sampler is None:
        return prepare_dataloader(dataset, cfg.optimizer.batch_size, workers), len(dataset)
    return DataLoader(dataset, batch_sampler=sampler, num_workers=workers, pin_memory=True), len(
        dataset
    )


def data_loader(cfg, method_cls, source: str):
    """What the launcher feeds the method for ``source``, read as a ``custom`` folder."""
    import torch
    from omegaconf import OmegaConf

    from solo_diet.core.data.loader import resolve_device
    from solo_diet.launch.datapaths import make_data_path, parse_data_settings
    from solo_diet.launch.settings import PRETRAIN_PROBE_NODE, parse_loader_settings
    from solo_diet.methods.contract import method_contract

    hook = method_contract(method_cls).train_batch_sampler  # s-DIET orders its own batches
    if source == "image_folder":
        return solo_learn_loader(cfg, hook)
    cfg.data.dataset = "custom"  # the decoded folder; the model was given the CIFAR stem already
    # the ceiling's pre-made views are handed out by Python: no graph of them
    OmegaConf.update(cfg, "data.gpu.cuda_graphs", source in ("gpu", "gpu_graph"), force_add=True)
    OmegaConf.update(cfg, "data.format", "gpu", force_add=True)
    data = parse_data_settings(cfg)
    run = parse_loader_settings(cfg, data, PRETRAIN_PROBE_NODE)
    pretrain = make_data_path(data).pretrain_data(run, functools.partial(hook, cfg))
    loader, num_samples = pretrain.source, pretrain.num_samples
    if source in ("ceiling", "bare"):
        device = resolve_device(loader.device)
        generator = torch.Generator(device=device)
        rows = loader.dataset.images[: cfg.optimizer.batch_size].to(device)
        made = [loader.transform(rows, generator) for _ in range(PREMADE)]
        loader.transform = PremadeViews(made)
    return loader, num_samples


def run_throughput_case(case: dict) -> dict:
    import torch
    from lightning.pytorch import Trainer
    from solo.methods import METHODS

    from solo_diet.launch.common import trainer_kwargs
    from solo_diet.launch.pretrain import build_model
    from solo_diet.launch.settings import parse_performance_settings
    from solo_diet.methods.contract import method_contract

    graphed = GRAPH_OVERRIDES if case["source"] == "gpu_graph" else []
    cfg = compose_method(case["method"], case, [f"data.train_path={case['folder']}", *graphed])
    cfg.data.val_path = None
    method_cls = METHODS[cfg.method]
    loader, num_samples = data_loader(copy.deepcopy(cfg), method_cls, case["source"])
    if method_contract(method_cls).uses_sample_indexes:
        cfg.method_kwargs.num_samples = num_samples
    # as solo-diet pretrain builds it, substitutes included
    model = build_model(cfg, method_cls, parse_performance_settings(cfg))
    window = window_callback(case)
    cfg.update(max_epochs=10_000, limit_val_batches=0, num_sanity_val_steps=0, benchmark=True)
    kwargs = trainer_kwargs(cfg, [window], None)
    kwargs.update(enable_progress_bar=False, enable_model_summary=False)
    Trainer(**kwargs).fit(model, loader)
    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else float("nan")
    return {**window.result, "peak_mib": peak}


RESULT = "RESULT "  # the line a case process prints its result on (DDP ranks print other lines)
PHASE = "PHASE"  # a case's progress lines on stderr (logged after the case, or on its timeout)
EXIT_GRACE = 30.0  # seconds a case process may take to exit after printing its result


def run_case(script: str, case: dict, timeout: float) -> dict:
    """One case of ``script`` in a fresh process group: its result line (``RESULT {...}``) with
    ``case_s`` (launch to result) and ``exit_s`` (result to the process's end; a process alive
    ``EXIT_GRACE`` s after its result is killed with its DDP ranks), or ``{"error": ...}``."""
    case = {**case, "launched": time.time()}
    command = [sys.executable, os.path.abspath(script), "--case", json.dumps(case)]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        result = None
        while process.poll() is None and result is None:
            if time.time() - case["launched"] > timeout:
                _kill_group(process)
                err.seek(0)
                reached = phases(err.read()) or "no phase reached"
                sys.stderr.write(f"# case timed out after {timeout:.0f} s; {reached}\n")
                return {"error": "timeout"}
            time.sleep(0.2)
            out.seek(0)
            result = _last_result(out.read())
        result_at = time.time()
        try:
            process.wait(timeout=EXIT_GRACE)
            exit_s = time.time() - result_at if result is not None else 0.0
        except subprocess.TimeoutExpired:
            _kill_group(process)
            exit_s = float("inf")
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    reached = "".join(f"{found}; " for found in [phases(stderr)] if found)
    sys.stderr.write(f"# case {case.get('method', '')}: {reached}exit {exit_s:.1f} s\n")
    result = result if result is not None else _last_result(stdout)
    if result is None or (exit_s != float("inf") and process.returncode != 0):
        sys.stderr.write(stderr[-3000:])
        return {"error": "OOM" if "OutOfMemoryError" in stderr else "error"}
    return {**result, "case_s": result_at - case["launched"], "exit_s": exit_s}


def _last_result(stdout: str) -> Optional[dict]:
    found = [line for line in stdout.splitlines() if line.startswith(RESULT)]
    return json.loads(found[-1][len(RESULT) :]) if found else None


def _kill_group(process: subprocess.Popen) -> None:
    """Kill a case process with its DDP ranks (its process group) and reap it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def phases(stderr: str) -> str:
    """A case's ``PHASE`` lines (:func:`print_phase`) joined on one line, for the log ("" when
    it printed none: only streaming_decode.py's cases print them)."""
    found = [line[len(PHASE) :].strip() for line in stderr.splitlines() if line.startswith(PHASE)]
    return "; ".join(found)


def since_launch(case: dict) -> float:
    """Seconds since :func:`run_case` launched the case (0 for a case run by hand)."""
    return time.time() - case.get("launched", time.time())


def print_phase(case: dict, name: str) -> None:
    """A case's progress on stderr (``PHASE <name> at <s> s`` since its launch), which
    :func:`run_case` logs after the case or when it times out."""
    print(f"{PHASE} {name} at {since_launch(case):.1f} s", file=sys.stderr, flush=True)


def print_case_result(result: Optional[dict]) -> None:
    """Print a case's result for :func:`run_case` (nothing on ranks that have none)."""
    if result is not None:
        print(RESULT + json.dumps(result), flush=True)


def gpu_name() -> str:
    """The first visible GPU's name from nvidia-smi (this process keeps no CUDA context)."""
    query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", first_visible_gpu()]
    try:
        return subprocess.check_output(query, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "GPU (nvidia-smi unavailable)"


def cell(result: dict, key: str, fmt: str) -> str:
    return result.get("error", "-") if key not in result else format(result[key], fmt)


def step_graph_rates(args, backbone: str) -> dict:
    """``step_ceiling.py``'s graphed samples/s of the methods it has, by method ({} if none)."""
    methods = [m for m in CEILING_METHODS if m in args.methods]
    if "gpu_graph" not in args.sources or not methods or args.smoke:
        return {}
    script = Path(__file__).with_name("step_ceiling.py")
    command = [sys.executable, str(script), "--methods", *methods, "--backbone", backbone]
    table = subprocess.run(
        command + ["--batch-size", str(args.batch_size)], capture_output=True, text=True
    ).stdout
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| ")]
    return {r[0].strip(): float(r[6].replace(",", "")) for r in rows if r[0].strip() in methods}


def throughput_table(args, common: dict) -> None:
    print(
        "| method | backbone | source | samples/s | x image_folder | / ceiling | / bare "
        "| / step graph | GPU busy % | peak MiB |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_folder(Path(scratch) / "train", args.images)
        for backbone in args.backbones:
            graph_rates = step_graph_rates(args, backbone)
            for method in args.methods:
                row = {}
                for source in args.sources:
                    case = {
                        **common,
                        "method": method,
                        "source": source,
                        "folder": str(folder),
                        "backbone_overrides": BACKBONES[backbone],
                    }
                    row[source] = run_case(__file__, case, args.case_timeout)
                for source, result in row.items():
                    speed = result.get("samples_s")
                    ratios = [
                        f"{speed / other:.2f}" if speed and other else "-"
                        for other in (
                            row.get(name, {}).get("samples_s")
                            for name in ("image_folder", "ceiling", "bare")
                        )
                    ]
                    step_graph = graph_rates.get(method)
                    ratios.append(f"{speed / step_graph:.2f}" if speed and step_graph else "-")
                    print(
                        f"| {method} | {backbone} | {source} | {cell(result, 'samples_s', '.0f')} "
                        f"| {' | '.join(ratios)} | {cell(result, 'busy', '.0f')} "
                        f"| {cell(result, 'peak_mib', '.0f')} |",
                        flush=True,
                    )


def base_parser(doc: str, backbones: list) -> argparse.ArgumentParser:
    """The options this script and ``pretrain_wall.py`` share."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--methods", nargs="+", default=list(METHOD_NAMES), choices=METHOD_NAMES)
    parser.add_argument("--backbones", nargs="+", default=backbones, choices=sorted(BACKBONES))
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--workers", type=int, default=min(12, len(os.sched_getaffinity(0))))
    parser.add_argument("--images", type=int, default=5000, help="training images (32 px)")
    parser.add_argument("--smoke", action="store_true", help="a tiny version on a CPU")
    parser.add_argument("--case-timeout", type=float, default=300.0)
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        help="a Hydra override for every case, e.g. optimizer.name=lars_foreach (repeatable)",
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: one case, JSON
    return parser


def run_here_if_case(args: argparse.Namespace, runner) -> bool:
    """In a ``--case`` process: run the case, print its result line, return True."""
    if args.case is None:
        return False
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    print_case_result(runner(json.loads(args.case)))
    return True


def case_settings(args: argparse.Namespace, what: str) -> dict:
    """The settings every case gets (tiny ones with ``--smoke``); prints the table's title."""
    accelerator = "gpu"
    if args.smoke:
        accelerator, args.methods, args.backbones = "cpu", ["simclr"], ["cp_resnet8"]
        BACKBONES["cp_resnet8"] = ["backbone.name=cp_resnet8", "++backbone.kwargs.width=8"]
        args.batch_size, args.precision, args.images, args.workers = 8, "32", 48, 1
    print(
        f"# {what}, {'CPU' if args.smoke else gpu_name()}, batch {args.batch_size}, "
        f"{args.precision}, {args.images} images of 32 px, {args.workers} image_folder workers"
        + (f", overrides {args.override}" if args.override else "")
    )
    keys = ("batch_size", "precision", "workers")
    settings = {key: getattr(args, key) for key in keys}
    return {"accelerator": accelerator, "overrides": args.override, **settings}


def main(argv: Optional[list] = None) -> None:
    parser = base_parser(__doc__, ["resnet18", "cp_resnet8"])
    parser.add_argument("--warmup", type=int, default=8, help="steps before the timed window")
    parser.add_argument("--seconds", type=float, default=2.0, help="length of the timed window")
    parser.add_argument("--min-steps", type=int, default=10, help="fewest steps in the window")
    parser.add_argument(
        "--sync-every-batch",
        action="store_true",
        help="wait for the GPU after every batch (as EpochCostLogger did until 2026-11-26)",
    )
    parser.add_argument(
        "--sources", nargs="+", default=list(SOURCES), choices=SOURCES + EXTRA_SOURCES
    )
    args = parser.parse_args(argv)
    if run_here_if_case(args, run_throughput_case):
        return
    if args.smoke:
        args.warmup, args.seconds, args.min_steps = 1, 0.0, 2
    common = case_settings(args, "data path throughput")
    common.update(warmup=args.warmup, seconds=args.seconds, min_steps=args.min_steps)
    common["sync_every_batch"] = args.sync_every_batch
    started = time.time()
    throughput_table(args, common)
    print(
        f"# {len(args.methods) * len(args.backbones) * len(args.sources)} cases in "
        f"{time.time() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
