"""The five kinds of fault probe of docs/cli.md ("What survives a crash"), on the CPU, one table.

    python benchmarks/fault_probes.py --kills 20 --workdir /tmp/probes

(a) ``kill -9`` of ``pretrain`` at random steps and inside checkpoint writes, then a rerun in the
same folder ends at an uninterrupted run's step; (b) SIGTERM and SIGINT exit 143 and 130 with a
resume line; (c) ``kill -9`` and SIGTERM of ``compare`` leave no worker alive, and a rerun finishes
and a third reuses; (d) two reruns of a killed run into one folder at once (one exits 2 naming the
other's PID, the killed run's lock taken over) and a second ``compare`` into a busy folder; (e) a
full disk on small tmpfs mounts (root only; otherwise skipped, as the slow tier's ``/dev/full``
tests cover it): one line with status 1, no cut checkpoint, a rerun with room resumes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests._helpers.compare import SHIPPED_SPEC, tiny_overrides, write_tiny_images  # noqa: E402
from tests.cli.test_faults import ENV, alive, descendants  # noqa: E402
from tests.launch.test_crash import KILLER, progress_of  # noqa: E402

DEMO = ROOT / "solo_diet" / "configs" / "demo"
CLI = [sys.executable, "-m", "solo_diet.cli.main"]
PT = ["pretrain", "--config-path", str(DEMO), "--config-name", "diet.yaml"]
EPOCHS, BATCHES = 3, 3


def pretrain_args(data: Path, out: Path, epochs: int = EPOCHS) -> list[str]:
    """The issue's ``PT D`` shape: the demo config, 3 batches of 16 an epoch, a save every epoch."""
    return [
        f"data.train_path={data / 'train'}",
        f"data.val_path={data / 'val'}",
        f"checkpoint.dir={out}",
        "accelerator=cpu",
        "devices=1",
        "precision=32",
        "data.num_workers=0",
        "optimizer.batch_size=16",
        f"++limit_train_batches={BATCHES}",
        "++limit_val_batches=1",
        f"max_epochs={epochs}",
        "checkpoint.frequency=1",
    ]


def cli(argv: list[str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *argv], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=1800, **kwargs
    )


def spawn(argv: list[str], cwd: Path, quiet: bool = True) -> subprocess.Popen:
    """The command started, its output dropped (``quiet``) or piped as text."""
    pipe = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen([*CLI, *argv], cwd=cwd, env=ENV, stdout=pipe, stderr=pipe, text=True)


def pretrain(data: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli(
        [*PT, *pretrain_args(data, out), *extra],
        out.parent,
    )


def final_progress(out: Path) -> tuple[int, int] | None:
    checkpoints = sorted(out.glob("diet/*/*.ckpt"), key=lambda p: p.stat().st_mtime)
    folders = {p.parent for p in checkpoints}
    return progress_of(checkpoints[-1]) if checkpoints and len(folders) == 1 else None


def wait_for(paths, process: subprocess.Popen, limit: float = 300) -> bool:
    deadline = time.time() + limit
    while time.time() < deadline and process.poll() is None:
        if list(paths()):
            return True
        time.sleep(0.05)
    return False


@functools.cache
def reference(data: Path, work: Path) -> Path:
    """An uninterrupted run's final checkpoint."""
    out = work / "reference"
    assert pretrain(data, out).returncode == 0
    (final,) = out.glob("diet/*/*.ckpt")
    return final


def probe_kills(data: Path, work: Path, count: int, draw: random.Random) -> tuple[int, int, str]:
    expected, held, notes = progress_of(reference(data, work)), 0, []
    for trial in range(count):
        out = work / f"kill{trial}"
        mode = "save" if trial % 4 == 1 else "step"  # every fourth inside a checkpoint's write
        at = (
            draw.randrange(2, EPOCHS + 1) if mode == "save" else draw.randrange(1, EPOCHS * BATCHES)
        )
        args = [mode, str(at), str(DEMO), *pretrain_args(data, out)]
        out.mkdir()
        killed = subprocess.run(
            [sys.executable, "-c", KILLER, *args],
            cwd=out,
            env=ENV,
            capture_output=True,
            timeout=600,
        )
        rerun = pretrain(data, out)
        ok = killed.returncode == -signal.SIGKILL and rerun.returncode == 0
        ok = ok and final_progress(out) == expected
        held += ok
        notes.append(f"{mode}@{at}" + ("" if ok else "!"))
    return count, held, " ".join(notes)


def probe_signals(data: Path, work: Path) -> tuple[int, int, str]:
    held, notes = 0, []
    for signum, code in [(signal.SIGTERM, 143), (signal.SIGINT, 130)] * 2:
        out = work / f"sig{len(notes)}"
        out.mkdir()
        argv = [*PT, *pretrain_args(data, out, epochs=30)]
        run = spawn(argv, out, quiet=False)
        wait_for(lambda: out.glob("diet/*/*.ckpt"), run)
        run.send_signal(signum)
        err = run.communicate(timeout=300)[1].strip().splitlines()
        ok = run.returncode == code and bool(err) and "run the same command again" in err[-1]
        held += ok
        notes.append(f"{signum.name}:{run.returncode}")
    return len(notes), held, " ".join(notes)


def compare_argv(data: Path, out: Path) -> list[str]:
    return [
        "compare",
        str(SHIPPED_SPEC),
        *tiny_overrides(data, out),
        "budget.max_epochs=4",
        "reference_rows=[]",
        "runs=[{name: diet, config_name: diet}]",
    ]


def probe_compare_kills(tiny: Path, work: Path, count: int) -> tuple[int, int, str]:
    held, notes = 0, []
    for signum in [signal.SIGKILL, signal.SIGTERM] * (count // 2):
        out = work / f"cmp{len(notes)}"
        parent = spawn(compare_argv(tiny, out), work)
        wait_for(lambda: out.glob("runs/*/pretrain/**/*.ckpt"), parent)
        workers = descendants(parent.pid)
        parent.send_signal(signum)
        parent.wait()
        time.sleep(10)
        orphans = [pid for pid in workers if alive(pid)]
        rerun = cli(compare_argv(tiny, out), work)
        result = out / "runs" / "diet" / "result.json"
        stamp = result.stat().st_mtime if result.is_file() else None
        again = cli(compare_argv(tiny, out), work)
        reused = stamp is not None and result.stat().st_mtime == stamp
        ok = not orphans and rerun.returncode == 0 and again.returncode == 0 and reused
        held += ok
        notes.append(f"{signum.name}:{parent.returncode}" + ("" if ok else "!"))
    return len(notes), held, " ".join(notes)


def probe_concurrency(data: Path, tiny: Path, work: Path) -> tuple[int, int, str]:
    held, notes = 0, []
    for trial in range(2):  # a killed run (its lock stale), then two reruns at once
        out = work / f"two{trial}"
        out.mkdir()
        argv = [*PT, *pretrain_args(data, out, epochs=6)]
        first = spawn(argv, out)
        wait_for(lambda: out.glob("diet/*/*.ckpt"), first)
        first.kill()
        first.wait()
        runs = [spawn(argv, out, quiet=False) for _ in range(2)]
        ends = []  # (pid, exit code, stdout, stderr) of each
        for run in runs:
            texts = run.communicate(timeout=600)
            ends.append((run.pid, run.returncode, *texts))
        codes = sorted(run.returncode for run in runs)
        winner = next((e for e in ends if e[1] == 0), None)
        loser = next((e for e in ends if e[1] == 2), None)
        ok = codes == [0, 2] and winner is not None and loser is not None
        ok = ok and f"PID {winner[0]} on" in loser[3] and f"PID {first.pid}" in winner[2]
        held += ok
        notes.append(f"reruns:{codes}" + ("" if ok else "!"))
    out = work / "busy"
    first = spawn(compare_argv(tiny, out), work)
    wait_for(lambda: out.glob(".compare.lock"), first)
    time.sleep(1)
    second = cli(compare_argv(tiny, out), work)
    ok = second.returncode == 2 and f"PID {first.pid}" in second.stderr
    first.kill()
    first.wait()
    notes.append(f"compare:{second.returncode}" + ("" if ok else "!"))
    return 3, held + ok, " ".join(notes)


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def probe_full_disk(data: Path, work: Path) -> tuple[int, int, str]:
    """tmpfs mounts from nearly nothing to a few checkpoints' room (the previous ones kept)."""
    from solo_diet.methods.checkpoint import checkpoint_problem

    size, held, notes = reference(data, work).stat().st_size, 0, []
    for room in [0.01, 1.5, 2.5, 4.5]:
        with tmpfs(work / f"disk{room}", f"{int(room * size) // 1024}k") as disk:
            out, keep = disk / "ck", "+checkpoint.keep_prev=True"
            full = pretrain(data, out, "max_epochs=6", keep)
            err = full.stderr.strip().splitlines()
            cut = [p for p in disk.rglob("*.ckpt") if checkpoint_problem(p)]
            subprocess.run(["mount", "-o", "remount,size=200m", str(disk)], check=True)
            rerun = pretrain(data, out, "max_epochs=6", keep)
            ok = full.returncode == 1 and "no space left on the device of" in err[-1]
            ok = ok and not cut and rerun.returncode == 0 and final_progress(out) == (5, 18)
            held += ok
            notes.append(f"{room}x:{full.returncode}" + ("" if ok else "!"))
    return len(notes), held, " ".join(notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--compare-kills", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=Path("fault-probes"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="abcde")
    args = parser.parse_args()
    work = args.workdir.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data, tiny = work / "am", write_tiny_images(work / "tiny")
    cli(["data", "animal-mnist", str(data), "--limit", "400"], work, check=True)
    draw = random.Random(args.seed)
    probes = {
        "a": ("kill -9 of pretrain, rerun", lambda: probe_kills(data, work, args.kills, draw)),
        "b": ("SIGTERM/SIGINT of pretrain", lambda: probe_signals(data, work)),
        "c": (
            "kill -9/SIGTERM of compare",
            lambda: probe_compare_kills(tiny, work, args.compare_kills),
        ),
        "d": ("two runs into one folder", lambda: probe_concurrency(data, tiny, work)),
        "e": ("full disk (tmpfs)", lambda: probe_full_disk(data, work)),
    }
    print("| probe | trials | held | cases |\n|---|---:|---:|---|")
    for key in args.only:
        name, probe = probes[key]
        try:
            trials, held, notes = probe()
        except (subprocess.CalledProcessError, PermissionError) as err:  # no root for tmpfs
            trials, held, notes = 0, 0, f"skipped ({err})"
        print(f"| {name} | {trials} | {held} | {notes} |", flush=True)


if __name__ == "__main__":
    main()
