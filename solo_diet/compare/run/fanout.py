"""Running tasks side by side, each in a process group of its own GPUs and share of the cores, or
in a reusable worker; Ctrl-C or SIGTERM stops every one (docs/compare.md, "Many GPUs")."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional, Sequence

from solo_diet.core.errors import ConfigError

# the PID of the process a worker must not outlive (the fan-out's, then the worker's for its ranks)
PARENT_VARIABLE = "SOLO_DIET_WORKER_PARENT"


def task_threads(cores: int, workers: int, tasks: int) -> str:
    """A task's OMP_NUM_THREADS: the caller's, else the cores shared out evenly over the tasks
    that run at once."""
    return os.environ.get("OMP_NUM_THREADS") or str(max(1, cores // min(workers, max(1, tasks))))


def task_env(devices: Sequence[str], threads: str) -> dict[str, str]:
    """A task's environment: its GPUs, its share of the cores, and this process as its parent."""
    return dict(
        os.environ,
        CUDA_VISIBLE_DEVICES=",".join(devices),
        OMP_NUM_THREADS=threads,
        PYTHONUNBUFFERED="1",
        **{PARENT_VARIABLE: str(os.getpid())},  # the worker ends when this process does
    )


def spawn(argv: Sequence[str], env: dict, log: IO, **popen: Any) -> subprocess.Popen:
    """Start ``argv`` in a process group of its own, its output into ``log``."""
    return subprocess.Popen(
        list(argv), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, **popen
    )


class ServedWorker:
    """The fan-out's handle on a ``--serve`` worker: a task is a JSON line on its stdin, answered
    ``0`` on the pipe its last argument names; a failed task, or the end of stdin, ends it."""

    def __init__(
        self, argv: Sequence[str], devices: tuple[str, ...], env: dict, first_log: Path
    ) -> None:
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        with first_log.open("a") as log:  # where its start-up says what it says
            self.process = spawn(
                [*argv, str(write_end)],
                env,
                log,
                stdin=subprocess.PIPE,
                pass_fds=(write_end,),
                text=True,
            )
        os.close(write_end)
        self.first_log = first_log  # its start-up output: a task's log, or its own (started early)
        self.devices = devices
        self.tasks_run = 0
        self._replies = read_end
        self._buffer = b""

    def hand(self, log_path: Path, request: str) -> None:
        """Give the worker its next task (one that died idle reports its exit status)."""
        assert self.process.stdin is not None
        line = json.dumps({"log": str(log_path), "request": request}) + "\n"
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(line)
            self.process.stdin.flush()
        self.tasks_run += 1

    def task_status(self) -> Optional[int]:
        """How the last task ended: 0, the worker's exit status (1 when it left without a word),
        or None while it runs."""
        with contextlib.suppress(BlockingIOError):
            self._buffer += os.read(self._replies, 64)
        if b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            return int(line)
        status = self.process.poll()
        if status is None:
            return None
        return status or 1

    def retire(self) -> None:
        """End an idle worker: it exits when its stdin ends."""
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with contextlib.suppress(OSError):
            os.close(self._replies)


@dataclass(frozen=True)
class Task:
    """One command line; ``gpus`` is how many of the visible GPUs it needs (0: CPU only)."""

    label: str
    argv: tuple[str, ...]
    log_path: Path
    gpus: int = 0
    request: Optional[str] = None  # with run_tasks' serve_argv: run by a reusable worker instead


@dataclass
class _Running:
    task: Task
    process: subprocess.Popen  # the worker's, in a worker
    devices: tuple[str, ...]
    worker: Optional[ServedWorker] = None
    start: float = field(default_factory=time.monotonic)

    def status(self) -> Optional[int]:
        return self.process.poll() if self.worker is None else self.worker.task_status()


def visible_gpus() -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` up to its first invalid entry (as CUDA reads it), else torch's."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    entries = (entry.strip() for entry in listed.split(","))
    return list(itertools.takewhile(lambda entry: entry and not entry.startswith("-"), entries))


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def wait_or_kill(processes: Sequence[subprocess.Popen], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``processes`` to end, then SIGKILL each one's process group."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        _signal_group(process, signal.SIGKILL)
        process.wait()


@dataclass
class _Pool:
    """The GPUs' free slots and the idle reusable workers; at most ``limit`` processes at once."""

    free: dict[str, int]
    argv: Optional[Sequence[str]]
    limit: int
    threads: str
    idle: list[ServedWorker]
    retired: list[ServedWorker]

    def served(self, task: Task) -> bool:
        return self.argv is not None and task.request is not None

    def book(self, devices: Sequence[str], change: int) -> None:
        """Take (-1) or give back (+1) a slot of each of ``devices``."""
        for gpu in devices:
            self.free[gpu] += change

    def next_task(self, pending: Sequence[Task]):
        """The first pending task that can start now, its GPUs and the idle worker taking it."""
        for worker in [w for w in self.idle if w.process.poll() is not None]:
            self.idle.remove(worker)
            self.retire(worker)
        for task in pending:
            for worker in self.idle if self.served(task) else []:
                if len(worker.devices) == task.gpus and all(self.free[g] for g in worker.devices):
                    self.book(worker.devices, -1)
                    self.idle.remove(worker)
                    return task, worker.devices, worker
            open_gpus = [gpu for gpu, room in self.free.items() if room > 0]
            if len(open_gpus) >= task.gpus:
                devices = tuple(sorted(open_gpus, key=lambda gpu: -self.free[gpu])[: task.gpus])
                self.book(devices, -1)
                return task, devices, None
        return None, (), None

    def launch(
        self, task: Task, devices: tuple[str, ...], worker: Optional[ServedWorker], running: int
    ) -> _Running:
        """Start ``task`` in ``worker``, else in a new one when served, else in its own process."""
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = task_env(devices, self.threads)
        if worker is None:
            while self.idle and running + len(self.idle) >= self.limit:  # room for a process
                self.retire(self.idle.pop(0))
            if self.served(task):
                worker = ServedWorker(self.argv, devices, env, task.log_path)
        where = (
            f" (in worker {worker.process.pid}, its task {worker.tasks_run + 1})" if worker else ""
        )
        with task.log_path.open("a") as log:
            stamp, command = time.strftime("%Y-%m-%d %H:%M:%S"), " ".join(task.argv)
            log.write(
                f"### {stamp} CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} {command}{where}\n"
            )
            log.flush()
            if worker is None:  # the task's process keeps the log open; this one need not
                return _Running(task, spawn(task.argv, env, log), devices)
        worker.hand(task.log_path, str(task.request))
        return _Running(task, worker.process, devices, worker)

    def retire(self, worker: ServedWorker) -> None:
        worker.retire()
        self.retired.append(worker)

    def retire_idle(self) -> None:
        """Retire every idle worker (their exits overlap the tasks still running)."""
        for worker in self.idle:
            self.retire(worker)
        self.idle = []


def run_tasks(
    tasks: Sequence[Task],
    workers: int,
    gpus: Sequence[str],
    say: Callable[[str], None] = print,
    poll_s: float = 0.2,
    grace_s: float = 20.0,
    jobs_per_gpu: int = 1,
    serve_argv: Optional[Sequence[str]] = None,
    threads: Optional[str] = None,
    started: Sequence[ServedWorker] = (),
    retired: Optional[list[ServedWorker]] = None,
) -> list[int]:
    """Run ``tasks``, at most ``workers`` at once, a task with a ``request`` in a reusable worker
    of ``serve_argv``; their exit statuses in order (negative: killed by that signal). Retired
    workers go to ``retired`` if given."""
    if workers < 1 or jobs_per_gpu < 1:
        raise ValueError(f"workers and jobs_per_gpu must be >= 1, got {workers}, {jobs_per_gpu}")
    too_big = [t.label for t in tasks if t.gpus > len(gpus)]
    if too_big:
        raise ConfigError(f"{too_big} need more GPUs than the {len(gpus)} visible.")
    pending, running, statuses = list(tasks), [], {}
    if threads is None:
        threads = task_threads(len(os.sched_getaffinity(0)), workers, len(tasks))
    waited_here = retired is None
    free = {gpu: jobs_per_gpu for gpu in gpus}
    pool = _Pool(free, serve_argv, workers, threads, list(started), [] if waited_here else retired)
    # SIGTERM raises KeyboardInterrupt here when nobody else handles it: tasks stopped, not orphaned
    own_sigterm = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    )
    if own_sigterm:
        signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while pending or running:
            while len(running) < workers:
                task, devices, worker = pool.next_task(pending)
                if task is None:
                    break
                pending.remove(task)
                running.append(pool.launch(task, devices, worker, len(running)))
                where = f" on GPU {','.join(devices)}" if devices else ""
                say(
                    f"({len(tasks) - len(pending)}/{len(tasks)}) {task.label}: started{where} "
                    f"(log: {task.log_path})"
                )
            time.sleep(poll_s)
            for entry, status in [(r, r.status()) for r in running]:
                if status is None:
                    continue
                running.remove(entry)
                if entry.worker is not None:
                    pool.idle.append(entry.worker)  # the next next_task drops a dead one
                pool.book(entry.devices, +1)
                statuses[id(entry.task)] = status
                worker = entry.worker
                if status != 0 and worker and worker.tasks_run == 1 and worker.first_log.is_file():
                    if worker.first_log != entry.task.log_path:  # started early: its start-up too
                        with entry.task.log_path.open("a") as log:
                            log.write(f"### its worker's start-up\n{worker.first_log.read_text()}")
                label, took = entry.task.label, f"{time.monotonic() - entry.start:.0f} s"
                say(
                    f"{label}: done in {took}"
                    if status == 0
                    else f"{label}: FAILED with exit status {status} after {took}; "
                    f"log: {entry.task.log_path}"
                )
            if not pending:  # no task is left for an idle worker
                pool.retire_idle()
    except BaseException:
        if running:
            labels = ", ".join(r.task.label for r in running)
            say(f"stopping {len(running)} running job(s): {labels}")
        processes = [r.process for r in running] + [w.process for w in pool.idle]
        for process in processes:
            _signal_group(process, signal.SIGINT)
        wait_or_kill(processes, grace_s)
        raise
    finally:
        pool.retire_idle()
        if waited_here:
            wait_or_kill([worker.process for worker in pool.retired], grace_s)
        if own_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return [statuses[id(task)] for task in tasks]
