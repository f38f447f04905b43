"""Running a comparison's jobs side by side, each in a process of its own GPUs
(docs/compare.md, "Many GPUs"): a task runs in its own process group with
``CUDA_VISIBLE_DEVICES`` set to its GPUs and ``OMP_NUM_THREADS`` to its share of the cores, or in
a reusable worker (:class:`~solo_diet.compare.worker.ServedWorker`); its output goes to its log,
the terminal gets one line per event; Ctrl-C or SIGTERM stops every task and worker."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from solo_diet.compare.worker import PARENT_VARIABLE, ServedWorker
from solo_diet.config import ConfigError


@dataclass(frozen=True)
class Task:
    """One command line; ``gpus`` is how many of the visible GPUs it needs (0: CPU only)."""

    label: str
    argv: tuple[str, ...]
    log_path: Path
    gpus: int = 0
    request: Optional[str] = None  # with run_tasks' serve_argv: run by a reusable worker instead


@dataclass(frozen=True)
class Outcome:
    """How a task ended: its exit status (negative: killed by that signal) and wall seconds."""

    task: Task
    returncode: int
    seconds: float
    devices: tuple[str, ...] = ()


@dataclass
class _Running:
    """A task in its own process, or in ``worker`` (``process`` is the worker's)."""

    task: Task
    process: subprocess.Popen
    devices: tuple[str, ...]
    worker: Optional[ServedWorker] = None
    start: float = field(default_factory=time.monotonic)

    def status(self) -> Optional[int]:
        """The task's exit status, None while it runs."""
        return self.process.poll() if self.worker is None else self.worker.task_status()


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


def _env(devices: tuple[str, ...], threads: str) -> dict:
    return dict(
        os.environ,
        CUDA_VISIBLE_DEVICES=",".join(devices),
        OMP_NUM_THREADS=threads,
        PYTHONUNBUFFERED="1",
        **{PARENT_VARIABLE: str(os.getpid())},  # the worker ends when this process does
    )


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


def _wait_or_kill(processes: Sequence[subprocess.Popen], grace_s: float) -> None:
    """Wait up to ``grace_s`` seconds for ``processes`` to end, then SIGKILL each one's process
    group (it, if still alive, and what it left behind)."""
    deadline = time.monotonic() + grace_s
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _stop(
    running: Sequence[_Running],
    idle: Sequence[ServedWorker],
    grace_s: float,
    say: Callable[[str], None],
) -> None:
    """SIGINT to every running task's and idle worker's process group, SIGKILL after ``grace_s``."""
    if running:
        say(f"stopping {len(running)} running job(s): {', '.join(r.task.label for r in running)}")
    processes = [r.process for r in running] + [w.process for w in idle]
    for process in processes:
        _signal_group(process, signal.SIGINT)
    _wait_or_kill(processes, grace_s)


class _Slots:
    """Which GPUs have room: each takes ``per_gpu`` tasks at once; a task's GPUs are distinct and
    the least busy ones, or those of an idle worker that has room."""

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

    def take_worker(self, count: int, idle: Sequence[ServedWorker]) -> Optional[ServedWorker]:
        """An idle worker on ``count`` GPUs that all have room (their slots taken), or None."""
        for worker in idle:
            if len(worker.devices) == count and all(self.free[g] > 0 for g in worker.devices):
                for gpu in worker.devices:
                    self.free[gpu] -= 1
                return worker
        return None

    def give_back(self, devices: Sequence[str]) -> None:
        for gpu in devices:
            self.free[gpu] += 1


class _Workers:
    """The reusable workers: idle ones wait for a task of their GPUs; at most ``limit`` processes
    live at once (an idle one is retired to make room)."""

    def __init__(self, serve_argv: Optional[Sequence[str]], limit: int, threads: str) -> None:
        self.argv, self.limit, self.threads = serve_argv, limit, threads
        self.idle: list[ServedWorker] = []
        self.retired: list[ServedWorker] = []

    def drop_dead(self) -> None:
        for worker in [w for w in self.idle if not w.alive()]:
            self.idle.remove(worker)
            self.retire(worker)

    def served(self, task: Task) -> bool:
        return self.argv is not None and task.request is not None

    def launch(
        self, task: Task, devices: tuple[str, ...], worker: Optional[ServedWorker], running: int
    ) -> _Running:
        """Start ``task``: in ``worker`` (an idle one), else in a new worker when it is served,
        else in a process of its own; its log's header says where."""
        task.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = _env(devices, self.threads)
        if worker is None:
            while self.idle and running + len(self.idle) >= self.limit:  # room for a process
                self.retire(self.idle.pop(0))
            if self.served(task):
                assert self.argv is not None
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
                process = subprocess.Popen(
                    list(task.argv),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
                return _Running(task, process, devices)
        worker.hand(task.log_path, str(task.request))
        return _Running(task, worker.process, devices, worker)

    def retire(self, worker: ServedWorker) -> None:
        worker.retire()
        self.retired.append(worker)

    def close(self, grace_s: float) -> None:
        for worker in self.idle:
            self.retire(worker)
        self.idle = []
        _wait_or_kill([worker.process for worker in self.retired], grace_s)


def _next_task(
    pending: Sequence[Task], slots: _Slots, workers: _Workers
) -> tuple[Optional[Task], tuple[str, ...], Optional[ServedWorker]]:
    """The first pending task that can start now: its GPUs, and the idle worker that takes it."""
    workers.drop_dead()
    for task in pending:
        if workers.served(task):
            worker = slots.take_worker(task.gpus, workers.idle)
            if worker is not None:
                workers.idle.remove(worker)
                return task, worker.devices, worker
        devices = slots.take(task.gpus)
        if devices is not None:
            return task, devices, None
    return None, (), None


def run_tasks(
    tasks: Sequence[Task],
    workers: int,
    gpus: Sequence[str],
    say: Callable[[str], None] = print,
    poll_s: float = 0.2,
    grace_s: float = 20.0,
    jobs_per_gpu: int = 1,
    serve_argv: Optional[Sequence[str]] = None,
) -> list[Outcome]:
    """Run ``tasks``, at most ``workers`` processes at a time, each on ``task.gpus`` distinct GPUs
    of ``gpus`` shared by at most ``jobs_per_gpu`` tasks, in order (a later one first when an
    earlier one waits for GPUs); with ``serve_argv`` (:class:`ServedWorker`) a task with
    a ``request`` goes to a reusable worker. Returns the outcomes in the order of ``tasks``."""
    if workers < 1 or jobs_per_gpu < 1:
        raise ValueError(f"workers and jobs_per_gpu must be >= 1, got {workers}, {jobs_per_gpu}")
    too_big = [t.label for t in tasks if t.gpus > len(gpus)]
    if too_big:
        raise ConfigError(f"{too_big} need more GPUs than the {len(gpus)} visible.")
    pending, running = list(tasks), []
    slots, outcomes = _Slots(gpus, jobs_per_gpu), {}
    # each task's OMP_NUM_THREADS: the caller's, else this process's cores shared out evenly
    share = len(os.sched_getaffinity(0)) // min(workers, max(1, len(tasks)))
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, share))
    pool = _Workers(serve_argv, workers, threads)
    with _sigterm_raises():
        try:
            while pending or running:
                while len(running) < workers:
                    task, devices, worker = _next_task(pending, slots, pool)
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
                        pool.idle.append(entry.worker)  # the next _next_task drops a dead one
                    slots.give_back(entry.devices)
                    outcome = Outcome(
                        entry.task, status, time.monotonic() - entry.start, entry.devices
                    )
                    outcomes[id(entry.task)] = outcome
                    say(_ended(outcome))
        except BaseException:
            _stop(running, pool.idle, grace_s, say)
            raise
        finally:
            pool.close(grace_s)
    return [outcomes[id(task)] for task in tasks]


def _ended(outcome: Outcome) -> str:
    label, seconds = outcome.task.label, f"{outcome.seconds:.0f} s"
    if outcome.returncode == 0:
        return f"{label}: done in {seconds}"
    return (
        f"{label}: FAILED with exit status {outcome.returncode} after {seconds}; "
        f"log: {outcome.task.log_path}"
    )
