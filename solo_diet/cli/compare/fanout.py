"""Running a comparison's jobs side by side, each in its own process on its own GPUs.

Each task is one subprocess, in its own process group, with ``CUDA_VISIBLE_DEVICES`` set to the
GPUs it was given (none for a CPU task) and ``OMP_NUM_THREADS`` to its share of the host's cores,
unless the caller set it. Otherwise torch's CPU linear algebra (RankMe, LiDAR, k-means) starts one
thread per core in every task and oversubscribes the host. Its stdout and stderr go to its log file,
and the terminal gets one line per event (started, done, failed). A failed task is reported with its
log and the others go on. Ctrl-C or SIGTERM stops every running task: SIGINT to its process group,
SIGKILL after a grace period. No solo-learn here: the tasks are plain command lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Iterator, Optional, Sequence


@dataclass(frozen=True)
class Task:
    """One command line; ``gpus`` is how many of the visible GPUs it needs (0: CPU only)."""

    label: str
    argv: tuple[str, ...]
    log_path: Path
    gpus: int = 0


@dataclass(frozen=True)
class Outcome:
    """How a task ended: its exit status (negative: killed by that signal) and wall seconds."""

    task: Task
    returncode: int
    seconds: float
    devices: tuple[str, ...] = ()


@dataclass
class _Running:
    task: Task
    process: subprocess.Popen
    devices: tuple[str, ...]
    log: IO[str]
    start: float = field(default_factory=time.monotonic)


def visible_gpus() -> list[str]:
    """The GPU ids this process may hand out: ``CUDA_VISIBLE_DEVICES`` when set (up to its first
    invalid entry, as CUDA reads it), else every device torch sees."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    ids: list[str] = []
    for entry in (e.strip() for e in listed.split(",")):
        if not entry or entry.startswith("-"):
            break
        ids.append(entry)
    return ids


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt inside the block when nobody else handles it, so the
    running tasks are stopped instead of orphaned."""
    own = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    )
    if own:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        if own:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def cpu_threads_per_task(workers: int) -> str:
    """``OMP_NUM_THREADS`` for each of ``workers`` tasks running at once: the caller's own value,
    else the cores this process may use shared out evenly (at least one)."""
    cores = len(os.sched_getaffinity(0))
    return os.environ.get("OMP_NUM_THREADS") or str(max(1, cores // workers))


def _start(task: Task, devices: tuple[str, ...], threads: str) -> _Running:
    task.log_path.parent.mkdir(parents=True, exist_ok=True)
    log = task.log_path.open("a")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log.write(f"### {stamp} CUDA_VISIBLE_DEVICES={','.join(devices)} {' '.join(task.argv)}\n")
    log.flush()
    env = dict(
        os.environ,
        CUDA_VISIBLE_DEVICES=",".join(devices),
        OMP_NUM_THREADS=threads,
        PYTHONUNBUFFERED="1",
    )
    process = subprocess.Popen(
        list(task.argv), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    return _Running(task, process, devices, log)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _stop(running: Sequence[_Running], grace_s: float, say: Callable[[str], None]) -> None:
    """SIGINT to every running task's process group; SIGKILL to those still alive after
    ``grace_s`` seconds."""
    if not running:
        return
    say(f"stopping {len(running)} running job(s): {', '.join(r.task.label for r in running)}")
    for entry in running:
        _signal_group(entry.process, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for entry in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            entry.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        if entry.process.poll() is None:
            _signal_group(entry.process, signal.SIGKILL)
            entry.process.wait()
        _signal_group(entry.process, signal.SIGKILL)  # what the task left behind in its group
        entry.log.close()


class _Slots:
    """Which GPUs have room: each takes ``per_gpu`` tasks at once; a task's GPUs are distinct and
    the least busy ones."""

    def __init__(self, gpus: Sequence[str], per_gpu: int) -> None:
        self.free = {gpu: per_gpu for gpu in gpus}

    def take(self, count: int) -> Optional[tuple[str, ...]]:
        open_gpus = [gpu for gpu, room in self.free.items() if room > 0]
        if len(open_gpus) < count:
            return None
        chosen = tuple(sorted(open_gpus, key=lambda gpu: -self.free[gpu])[:count])
        for gpu in chosen:
            self.free[gpu] -= 1
        return chosen

    def give_back(self, devices: Sequence[str]) -> None:
        for gpu in devices:
            self.free[gpu] += 1


def run_tasks(
    tasks: Sequence[Task],
    workers: int,
    gpus: Sequence[str],
    say: Callable[[str], None] = print,
    poll_s: float = 0.2,
    grace_s: float = 20.0,
    jobs_per_gpu: int = 1,
) -> list[Outcome]:
    """Run ``tasks`` with at most ``workers`` at a time, each given ``task.gpus`` distinct GPUs of
    ``gpus``, and no GPU shared by more than ``jobs_per_gpu`` running tasks; returns the outcomes
    in the order of ``tasks``. Tasks start in order, a later one first when an earlier one waits
    for more GPUs than have room."""
    if workers < 1 or jobs_per_gpu < 1:
        raise ValueError(f"workers and jobs_per_gpu must be >= 1, got {workers}, {jobs_per_gpu}")
    too_big = [t.label for t in tasks if t.gpus > len(gpus)]
    if too_big:
        raise ValueError(f"{too_big} need more GPUs than the {len(gpus)} visible")
    pending, running = list(tasks), []
    slots, outcomes = _Slots(gpus, jobs_per_gpu), {}
    threads = cpu_threads_per_task(min(workers, max(1, len(tasks))))
    with _sigterm_raises():
        try:
            while pending or running:
                while len(running) < workers:
                    taken = ((t, slots.take(t.gpus)) for t in pending)
                    task, devices = next(((t, d) for t, d in taken if d is not None), (None, ()))
                    if task is None:
                        break
                    pending.remove(task)
                    running.append(_start(task, devices, threads))
                    where = f" on GPU {','.join(devices)}" if devices else ""
                    say(
                        f"({len(tasks) - len(pending)}/{len(tasks)}) {task.label}: started{where} "
                        f"(log: {task.log_path})"
                    )
                time.sleep(poll_s)
                for entry in [r for r in running if r.process.poll() is not None]:
                    running.remove(entry)
                    entry.log.close()
                    slots.give_back(entry.devices)
                    outcome = Outcome(
                        entry.task,
                        entry.process.returncode,
                        time.monotonic() - entry.start,
                        entry.devices,
                    )
                    outcomes[id(entry.task)] = outcome
                    say(_ended(outcome))
        except BaseException:
            _stop(running, grace_s, say)
            raise
    return [outcomes[id(task)] for task in tasks]


def _ended(outcome: Outcome) -> str:
    label, seconds = outcome.task.label, f"{outcome.seconds:.0f} s"
    if outcome.returncode == 0:
        return f"{label}: done in {seconds}"
    return (
        f"{label}: FAILED with exit status {outcome.returncode} after {seconds}; "
        f"log: {outcome.task.log_path}"
    )
