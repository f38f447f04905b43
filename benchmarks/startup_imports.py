"""Where the imports before a run's first batch go: ``import solo_diet.launch.pretrain`` (which
imports solo-learn) in fresh processes, timed whole and split by ``python -X importtime``.

Cases, each ``--repeats`` fresh processes after one that writes the ``.pyc`` files:
- ``launcher``: ``import solo_diet.launch.pretrain``, as ``solo-diet pretrain`` does (solo-diet
  skips solo-learn's UMAP callback where umap is absent);
- ``solo_first``: ``import solo.utils`` first, so solo-learn tries its UMAP callback as it would
  without solo-diet (pandas, seaborn and matplotlib when installed), then the same import;
- ``cli_help``: what ``solo-diet --help`` imports before it prints (``import solo_diet`` registers
  the methods only when ``solo.methods`` is imported, so neither torch nor solo-learn).

Prints the wall seconds of each case, then the modules with the largest cumulative import time
(``--top``) of one ``launcher`` process, among them the optional packages found installed.

    python benchmarks/startup_imports.py
    python benchmarks/startup_imports.py --repeats 5 --top 25
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CASES = {
    "launcher": "import solo_diet.launch.pretrain",
    "solo_first": "import solo.utils; import solo_diet.launch.pretrain",
    "cli_help": "from solo_diet.cli.main import build_parser; build_parser().format_help()",
}
WATCHED = (
    "torch",
    "torchvision",
    "timm",
    "lightning",
    "torchmetrics",
    "pandas",
    "seaborn",
    "matplotlib",
    "scipy",
    "sklearn",
    "h5py",
    "wandb",
    "triton",
    "transformers",
    "huggingface_hub",
)


def wall_seconds(code: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - start


def importtime_rows(code: str) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of every import of one process."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]) / 1e6, parts[2].strip()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    print("| case | wall s (each process) | mean |\n|---|---|---:|")
    for name, code in CASES.items():
        wall_seconds(code)  # writes the .pyc files
        walls = [wall_seconds(code) for _ in range(args.repeats)]
        each = ", ".join(f"{w:.2f}" for w in walls)
        print(f"| {name} | {each} | {statistics.fmean(walls):.2f} |")

    rows = importtime_rows(CASES["launcher"])
    print("\n| module (launcher, cumulative) | s |\n|---|---:|")
    for seconds, module in sorted(rows, reverse=True)[: args.top]:
        print(f"| {module} | {seconds:.2f} |")
    watched = {module: seconds for seconds, module in rows if module in WATCHED}
    print("\n| package (launcher, cumulative) | s |\n|---|---:|")
    for module in WATCHED:
        if module in watched:
            print(f"| {module} | {watched[module]:.2f} |")


if __name__ == "__main__":
    main()
