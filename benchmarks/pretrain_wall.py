"""Wall time of whole ``solo-diet pretrain`` runs on the GPU data path, and where it goes.

For each method (our CIFAR configs, as in ``benchmarks/data_path.py``), one fresh process runs
``solo-diet pretrain``'s own code with ``data.format: gpu`` for ``--epochs`` epochs on a synthetic
32 px ImageFolder of ``--images`` training and ``--images / 5`` validation images (``data.dataset:
custom``, so ResNet-18 would get the standard stem; the default backbone, cp_resnet8 width 128, has
one stem), the config's online probe and checkpoint frequencies (``--every N``: validate and
checkpoint every N epochs instead; the last epoch is always checkpointed). The table splits each
run by a host clock read at Lightning's hooks (no extra synchronisation, so GPU work lands where the
host waits for it): start-up (process start to the first training batch: imports, decoding, model,
Trainer, sanity check), training, validation and epoch ends (checkpoints, logging); ``wall`` is the
whole process as the parent saw it. Start-up is split in three: imports (process start to the
benchmark's case code), before fit (config, decoding the images, model, ``Trainer``) and fit to the
first batch (Lightning's set-up, moving the model and data to the device, the sanity check's
validation batches). Prints one table.

    python benchmarks/pretrain_wall.py                 # 7 methods x 100 epochs on one H100/H200
    python benchmarks/pretrain_wall.py --methods diet simclr --epochs 20
    python benchmarks/pretrain_wall.py --every 1      # validation and checkpoints every epoch
    python benchmarks/pretrain_wall.py --smoke         # 2 epochs of one tiny method on a CPU
    python benchmarks/pretrain_wall.py --methods diet --profile prof  # + prof/diet.txt (cProfile)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

STARTED = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data_path import (  # noqa: E402
    BACKBONES,
    base_parser,
    case_settings,
    cell,
    compose_method,
    run_case,
    run_here_if_case,
    write_folder,
)

PHASES = ("train", "validation", "epoch_end")
STARTUP = ("startup", "imports", "before_fit", "fit_to_first_batch")


def phase_callback():
    """Sums of host time per phase from the first training batch on."""
    from lightning.pytorch import Callback

    class Phases(Callback):
        def __init__(self):
            self.first_batch: Optional[float] = None
            self.fit_start: Optional[float] = None
            self.mark = 0.0
            self.totals = dict.fromkeys(PHASES, 0.0)

        def _close(self, phase: str) -> None:
            """Add the time since the last mark to ``phase`` (nothing before the first batch)."""
            if self.first_batch is None:
                return
            now = time.perf_counter()
            self.totals[phase] += now - self.mark
            self.mark = now

        def on_fit_start(self, trainer, module):
            self.fit_start = time.time()

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if self.first_batch is None:
                self.first_batch, self.mark = time.time(), time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self._close("train")

        def on_validation_start(self, trainer, module):
            self._close("train")

        def on_validation_end(self, trainer, module):
            self._close("validation")

        def on_train_epoch_start(self, trainer, module):
            self._close("epoch_end")

        def on_train_end(self, trainer, module):
            self._close("epoch_end")

    return Phases()


def run_wall_case(case: dict) -> dict:
    from solo_diet.launch.pretrain import run_pretrain

    imported = time.time()

    extra = [
        "data.dataset=custom",
        "data.format=gpu",
        f"data.train_path={case['folder']}/train",
        f"data.val_path={case['folder']}/val",
        f"max_epochs={case['epochs']}",
        f"checkpoint.dir={case['out']}",
    ]
    if case["every"] is not None:
        every = case["every"]
        extra += [f"checkpoint.frequency={every}", f"++check_val_every_n_epoch={every}"]
    phases = phase_callback()
    cfg = compose_method(case["method"], case, extra)
    if case["profile"] is None:
        run_pretrain(cfg, extra_callbacks=[phases])
    else:
        profiled(lambda: run_pretrain(cfg, extra_callbacks=[phases]), case)
    return {
        "startup": phases.first_batch - STARTED,
        "imports": imported - STARTED,
        "before_fit": phases.fit_start - imported,
        "fit_to_first_batch": phases.first_batch - phases.fit_start,
        **phases.totals,
    }


def profiled(run, case: dict) -> None:
    """``run()`` under cProfile; writes the 60 costliest calls, by cumulative and by own time, to
    ``<profile>/<method>.txt``."""
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.runcall(run)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(60)
    folder = Path(case["profile"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{case['method']}.txt").write_text(text.getvalue())


def main(argv: Optional[list] = None) -> None:
    parser = base_parser(__doc__, ["cp_resnet8"])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument(
        "--every", type=int, default=None, help="validate and checkpoint every N epochs"
    )
    parser.add_argument(
        "--profile", default=None, help="folder for a cProfile summary per method (slows runs)"
    )
    args = parser.parse_args(argv)
    if run_here_if_case(args, run_wall_case):
        return
    if args.smoke:
        args.epochs = 2
    every = f"every {args.every} epochs" if args.every else "as the configs"
    what = f"pretrain wall time, {args.epochs} epochs, data.format=gpu, val/checkpoints {every}"
    common = case_settings(args, what)
    print(
        "| method | backbone | wall s | start-up s | (imports | before fit | fit to first batch) "
        "| training s | validation s | epoch ends s |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write_folder(folder / "train", args.images)
        write_folder(folder / "val", max(args.images // 5, args.batch_size))
        for backbone in args.backbones:
            for method in args.methods:
                case = {**common, "method": method, "folder": str(folder), "epochs": args.epochs}
                case.update(every=args.every, profile=args.profile)
                case.update(out=str(folder / "runs"), backbone_overrides=BACKBONES[backbone])
                started = time.time()
                result = run_case(__file__, case, args.case_timeout)
                parts = " | ".join(cell(result, key, ".1f") for key in STARTUP + PHASES)
                print(
                    f"| {method} | {backbone} | {time.time() - started:.1f} | {parts} |", flush=True
                )


if __name__ == "__main__":
    main()
