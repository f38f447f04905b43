"""How long does the 11-job Animal-MNIST comparison take at the default parallel settings, and where
does its time go?

Runs ``solo-diet compare benchmarks/compare/animal_mnist.yaml`` on Animal-MNIST (5 000 training
images, written with ``solo-diet data animal-mnist --limit 5000`` when missing) for DIET, s-DIET,
SimCLR and VICReg x 2 seeds + both reference rows, 100 epochs, as a new user would from a shell
(the command's own start-up included), while ``nvidia-smi`` samples the GPU every 0.5 s. Prints the
timeline (seconds from the command's start), each job's seconds and parts, the wall time and the
GPU's mean use.

    python benchmarks/compare_wall.py --data /tmp/am --out /tmp/cmp
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SPEC = Path(__file__).resolve().parent / "compare" / "animal_mnist.yaml"
CHOSEN = "only=[diet,sdiet,simclr,vicreg,random_init,raw_pixels]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("/tmp/am"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/compare-wall"))
    parser.add_argument("--epochs", type=int, default=100)
    args = parser.parse_args()
    command = [sys.executable, "-m", "solo_diet.cli.main"]
    if not (args.data / "train").is_dir():
        subprocess.run(
            [*command, "data", "animal-mnist", str(args.data), "--limit", "5000"], check=True
        )
    shutil.rmtree(args.out, ignore_errors=True)
    compare = [*command, "compare", str(SPEC), f"data.root={args.data}", f"output_dir={args.out}"]
    compare += [CHOSEN, "seeds=[0,1]", f"budget.max_epochs={args.epochs}"]
    smi = subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=utilization.gpu",
            "--format=csv,noheader,nounits",
            "-lms",
            "500",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    start, events = time.perf_counter(), []
    with subprocess.Popen(
        compare, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as run:
        for line in run.stdout:
            events.append((time.perf_counter() - start, line.rstrip()))
            print(f"{events[-1][0]:7.1f} {events[-1][1]}", flush=True)
    wall = time.perf_counter() - start
    smi.terminate()
    busy = [float(v) for v in smi.communicate()[0].split() if v.strip().isdigit()]
    started = [t for t, line in events if ": started on GPU" in line or ": started (log" in line]
    done = [(t, line) for t, line in events if re.search(r": done in \d+ s", line)]
    print("\n| phase | s |\n| --- | ---: |")
    if started:
        print(f"| the command's start to its first job | {started[0]:.1f} |")
    for t, line in done:
        print(f"| {line.split('] ')[-1]} | {t:.1f} |")
    mean_busy = sum(busy) / max(len(busy), 1)
    print(f"| **wall** | **{wall:.1f}** |")
    print(f"| GPU busy, mean of {len(busy)} samples | {mean_busy:.0f} % |")
    print("\n| job | pretrain s | train s | evaluation s |\n| --- | ---: | ---: | ---: |")
    for result in sorted(args.out.glob("**/result.json")):
        r = json.loads(result.read_text())
        costs = [r.get(k) for k in ("pretrain_wall_s", "train_s", "evaluation_wall_s")]
        print(
            f"| {result.parent.relative_to(args.out)} | "
            + " | ".join(f"{c:.1f}" if c else "-" for c in costs)
            + " |"
        )


if __name__ == "__main__":
    main()
