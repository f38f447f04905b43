"""The host's share of a training step: per-step milliseconds on the CPU with kernels made cheap.

For each method (our CIFAR configs, as in ``benchmarks/data_path.py``), fresh processes run
``solo-diet pretrain``'s own code (``run_pretrain``: its callbacks, progress bar, checkpointer and
Trainer arguments) on the GPU data path's CPU fallback (``data.format: gpu``), with a tiny backbone
(cp_resnet8 width 8), batch 8 and float32 on a synthetic 32 px folder, the loader handing out a
few augmented batches made before the first step (as ``data_path.py``'s ceiling), so that Python
dominates:

- ``lightning``: the steps through Lightning's loop, as ``solo-diet pretrain`` runs them;
- ``bare``: the same model, optimizer, batches and schedule, the steps outside Lightning's loop
  (``data_path.bare_step``: no logging, no callbacks, no progress bar).

After ``--warmup`` steps, ``--steps`` steps are timed: the median CPU time of this process
(``time.process_time``, so other processes on a shared machine move it little) from one batch start
to the next; ``lightning - bare`` is what Lightning, solo-learn's bookkeeping and our launcher add
per step. Each source runs in ``--repeats`` processes, alternating, and the table gives the least
of their medians (a shared machine only ever adds time). ``--profile DIR`` writes, per method, the
50 costliest calls of the timed Lightning steps (cProfile, by own time) to ``DIR/<method>.txt`` and
the raw statistics to ``DIR/<method>.prof``. Run with one thread for stable numbers:

    OMP_NUM_THREADS=1 python benchmarks/step_host.py
    OMP_NUM_THREADS=1 python benchmarks/step_host.py --methods diet --profile prof
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_path import (  # noqa: E402
    METHOD_NAMES,
    PREMADE,
    PremadeViews,
    bare_step,
    compose_method,
    run_case,
    run_here_if_case,
    write_folder,
)

TINY = ["backbone.name=cp_resnet8", "++backbone.kwargs.width=8"]
BATCH = 8


def step_clock(case: dict):
    """A callback timing ``case['steps']`` steps after ``case['warmup']`` (through Lightning, or
    outside it for the ``bare`` source), under cProfile when ``case['profile']`` is set."""
    from lightning.pytorch import Callback

    class StepClock(Callback):
        def __init__(self):
            self.marks: list[float] = []
            self.profile = None

        def on_train_start(self, trainer, module):
            """The loader hands out a few pre-made augmented batches: the augmentation's CPU
            kernels leave the timed steps (the GPU path's own per-batch work stays)."""
            import torch

            loader = trainer.train_dataloader
            generator = torch.Generator()
            rows = loader.dataset.images[:BATCH]
            loader.transform = PremadeViews(
                [loader.transform(rows, generator) for _ in range(PREMADE)]
            )

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step < case["warmup"]:
                return
            if case["source"] == "bare":
                step = bare_step(trainer, module)
                for offset in range(case["steps"] + 1):
                    self.marks.append(time.process_time())
                    step(trainer.global_step + offset)
                trainer.should_stop = True
                return
            self.marks.append(time.process_time())
            if len(self.marks) == 1 and case["profile"]:
                import cProfile

                self.profile = cProfile.Profile()
                self.profile.enable()
            if len(self.marks) > case["steps"]:
                trainer.should_stop = True
                if self.profile is not None:
                    self.profile.disable()

        def milliseconds(self) -> list[float]:
            return [1000 * (b - a) for a, b in zip(self.marks, self.marks[1:])][: case["steps"]]

    return StepClock()


def run_host_case(case: dict) -> dict:
    import torch

    from solo_diet.launch.pretrain import run_pretrain

    torch.set_num_threads(1)
    extra = [
        "data.dataset=custom",
        "data.format=gpu",
        f"data.train_path={case['folder']}",
        "++data.val_path=null",
        "max_epochs=1000",
        "++limit_val_batches=0",
        "++num_sanity_val_steps=0",
        f"checkpoint.dir={case['out']}",
    ]
    cfg = compose_method(case["method"], case, extra)
    clock = step_clock(case)
    run_pretrain(cfg, extra_callbacks=[clock])
    times = clock.milliseconds()
    if clock.profile is not None:
        write_profile(clock.profile, Path(case["profile"]) / f"{case['method']}.txt")
    return {"median_ms": statistics.median(times), "steps": len(times)}


def write_profile(profile, path: Path) -> None:
    import io
    import pstats

    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(50)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue())
    profile.dump_stats(path.with_suffix(".prof"))  # for pstats' print_callers


def main(argv: Optional[list] = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=["diet", "simclr"], choices=METHOD_NAMES)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument(
        "--repeats", type=int, default=3, help="processes per source, alternating (least median)"
    )
    parser.add_argument("--profile", default=None, help="folder for the Lightning steps' cProfile")
    parser.add_argument("--override", action="append", default=[], help="a Hydra override")
    parser.add_argument("--case-timeout", type=float, default=600.0)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if run_here_if_case(args, run_host_case):
        return
    print(
        f"# host CPU ms per step on this CPU, {os.cpu_count()} cores, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, cp_resnet8 width 8, batch {BATCH}, "
        f"float32, data.format=gpu (CPU fallback), median of {args.steps} steps after "
        f"{args.warmup}, least of {args.repeats} processes"
        + (f", overrides {args.override}" if args.override else "")
    )
    print("| method | lightning ms/step | bare ms/step | lightning - bare ms |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        # one epoch holds the warm-up and the timed steps: no epoch end among them
        folder = write_folder(Path(scratch) / "train", BATCH * (args.warmup + args.steps + 4))
        for method in args.methods:
            medians: dict[str, list[float]] = {"lightning": [], "bare": []}
            for _ in range(args.repeats):
                for source in medians:
                    case = {
                        "method": method,
                        "source": source,
                        "folder": str(folder),
                        "out": str(Path(scratch) / "runs"),
                        "warmup": args.warmup,
                        "steps": args.steps,
                        "profile": args.profile if source == "lightning" else None,
                        "backbone_overrides": TINY,
                        "batch_size": BATCH,
                        "precision": "32",
                        "accelerator": "cpu",
                        "workers": 1,
                        "overrides": args.override,
                    }
                    result = run_case(__file__, case, args.case_timeout)
                    medians[source].append(result.get("median_ms", float("nan")))
            lightning, bare = (min(m) for m in medians.values())
            print(f"| {method} | {lightning:.1f} | {bare:.1f} | {lightning - bare:.1f} |")


if __name__ == "__main__":
    main()
