"""Where, when and at what cost a comparison ran, its progress lines and JSON files."""

from __future__ import annotations

import json
import math
import os
import shlex
import time
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from solo_diet.core.atomic import write_text_atomic

COMMANDS_FILE = "commands.txt"
EPOCHS_FILE = "epochs.csv"  # a job's EpochCostLogger rows, in its folder
TIME_FORMAT = "%Y-%m-%d %H:%M UTC"


def progress(message: str) -> None:
    print(f"[compare] {message}", flush=True)


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


TEXT_FIELDS = ("run", "method", "device", "finished_utc", "checkpoint", "fingerprint", "recipe")
MARKUP = set("<>|`\n\r")  # what would change report.md's tables or carry HTML
LARGEST = 1e15  # no metric or cost comes near it


def read_result(path: Path) -> dict:
    """A job's ``result.json`` ({} when absent), refused where a field holds markup or nonsense."""
    from solo_diet.compare.report.tables import RESULT_COLUMNS
    from solo_diet.core.errors import ConfigError
    from solo_diet.core.settings import is_number

    try:
        result = read_json(path)
    except ValueError as err:
        result = f"not JSON ({err})"
    if not isinstance(result, dict):
        raise ConfigError(f"{path} is no result (it holds {str(result)[:80]}): delete it.")
    for key, value in result.items():
        if isinstance(value, str):
            wrong = "markup" if MARKUP & set(value) else None
            numeric = key in RESULT_COLUMNS and key not in TEXT_FIELDS
            wrong = wrong or ("text where a number belongs" if numeric else None)
        else:
            absurd = is_number(value) and not math.isnan(value) and not abs(value) < LARGEST
            wrong = "an infinite or absurd number" if absurd else None
        if wrong:
            raise ConfigError(
                f"{path}: `{key}` holds {wrong} ({str(value)[:40]!r}): delete the file (the next "
                "`solo-diet compare` evaluates the job again) or correct the field."
            )
    return result


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` whole or not at all, however the write is interrupted or raced."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=str))


def epoch_rows(run_dir: Path) -> list[dict[str, float]]:
    """The rows of a job's ``epochs.csv``, one per epoch (none before its first epoch)."""
    from solo_diet.launch.callbacks import read_epoch_rows

    path = run_dir / EPOCHS_FILE
    return read_epoch_rows(path) if path.is_file() else []


def pretrain_costs(run_dir: Path) -> dict[str, float]:
    """Totals of the job's ``epochs.csv`` and the wall time of its pretraining calls."""
    rows = epoch_rows(run_dir)
    train_s = sum(r["train_seconds"] for r in rows)
    peaks = [r["peak_gpu_mib"] for r in rows if not math.isnan(r["peak_gpu_mib"])]
    return {
        "epochs": len(rows),
        "train_s": train_s,
        "samples_per_s": sum(r["samples"] for r in rows) / train_s if train_s > 0 else math.nan,
        "peak_gpu_mib": max(peaks) if peaks else math.nan,
        "pretrain_wall_s": read_json(run_dir / "state.json").get("pretrain_wall_s"),
    }


def seed_curves(folders: Sequence[Path], column: str) -> dict[float, list[float]]:
    """{epoch: the column's values over the seeds that logged it in that epoch}."""
    by_epoch: dict[float, list[float]] = {}
    for folder in folders:
        for row in epoch_rows(folder):
            if column in row and not math.isnan(row[column]):
                by_epoch.setdefault(row["epoch"], []).append(row[column])
    return by_epoch


def note_command(out: Path, spec_path: str | Path, overrides: Sequence[str], gpus: int) -> None:
    """Append this command, its time and its host (``gpus`` visible) to ``<out>/commands.txt``."""
    host = f"{gpus} visible GPU(s), {len(os.sched_getaffinity(0))} CPU cores"
    command = shlex.join(["solo-diet", "compare", str(spec_path), *overrides])
    path = out / COMMANDS_FILE
    before = path.read_text() if path.is_file() else ""
    now = time.strftime(TIME_FORMAT, time.gmtime())
    write_text_atomic(path, f"{before}{now}\t{host}\t{command}\n")


def run_record_lines(results: Sequence[dict], out: Path) -> list[str]:
    """The report's "Where and when the jobs ran": jobs per device, then ``commands.txt``."""
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
