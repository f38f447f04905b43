"""Where and when a comparison ran: each job's device and end time in its ``result.json``, each
``solo-diet compare`` command in ``<output_dir>/commands.txt``, and the report's section that
gathers them, so a report assembled over several machines and sessions still names its cards,
commands and dates."""

from __future__ import annotations

import os
import shlex
import time
from collections import defaultdict
from pathlib import Path
from typing import Sequence

COMMANDS_FILE = "commands.txt"
TIME_FORMAT = "%Y-%m-%d %H:%M UTC"


def _now() -> str:
    return time.strftime(TIME_FORMAT, time.gmtime())


def job_place() -> dict[str, str]:
    """``device`` (the GPU's name, or ``CPU``) and ``finished_utc``, for a job's result."""
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    return {"device": device, "finished_utc": _now()}


def note_command(out: Path, spec_path: str | Path, overrides: Sequence[str]) -> None:
    """Append this command, its time and its host to ``<out>/commands.txt`` (tab-separated)."""
    from solo_diet.cli.compare.fanout import visible_gpus

    host = f"{len(visible_gpus())} visible GPU(s), {len(os.sched_getaffinity(0))} CPU cores"
    command = shlex.join(["solo-diet", "compare", str(spec_path), *overrides])
    with (out / COMMANDS_FILE).open("a") as f:
        f.write(f"{_now()}\t{host}\t{command}\n")


def run_record_lines(results: Sequence[dict], out: Path) -> list[str]:
    """The report's "Where and when the jobs ran": the jobs per device with their first and last
    end times, then the commands of ``commands.txt``."""
    finished: dict[str, list[str]] = defaultdict(list)
    for result in results:
        if "finished_utc" in result:
            finished[result.get("device", "?")].append(result["finished_utc"])
    lines = ["## Where and when the jobs ran", ""]
    for device, times in finished.items():
        span = times[0] if len(set(times)) == 1 else f"{min(times)} to {max(times)}"
        lines.append(f"- {device}: {len(times)} job(s), finished {span}.")
    unrecorded = sum("finished_utc" not in r and not r.get("unfinished") for r in results)
    if unrecorded:
        lines.append(f"- {unrecorded} job(s) evaluated before results recorded their device.")
    commands = out / COMMANDS_FILE
    if commands.is_file():
        lines += ["", f"Commands (`{COMMANDS_FILE}`):", ""]
        for line in filter(None, commands.read_text().splitlines()):
            parts = line.split("\t", 2)  # a line edited by hand is shown as it is
            lines.append(
                f"- {parts[0]}, {parts[1]}: `{parts[2]}`" if len(parts) == 3 else f"- {line}"
            )
    return [*lines, ""]
