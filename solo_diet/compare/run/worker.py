"""A comparison's jobs in processes of their own, each given the plan the parent wrote once (the
spec and its jobs) and its job's key; exit status 0 when done, 130 when interrupted, 1 on error.

    python -m solo_diet.compare.run.worker <plan.pkl> <job key>
    python -m solo_diet.compare.run.worker --serve <plan.pkl> <reply fd>   (jobs named on stdin)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator, Optional, Sequence

from solo_diet.core.host import quiet_run_noise

if TYPE_CHECKING:
    from solo_diet.compare.plan.jobs import Job
    from solo_diet.compare.spec.settings import Spec

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# the PID of the process a worker must not outlive (the fan-out's, then the worker's for its ranks)
PARENT_VARIABLE = "SOLO_DIET_WORKER_PARENT"


def die_with_parent() -> None:
    """On Linux, have the kernel SIGKILL this process when its parent (``PARENT_VARIABLE``) ends,
    however it ends, so its job resumes in the next comparison, never beside it."""
    parent = os.environ.get(PARENT_VARIABLE, "")
    if not (parent.isdigit() and sys.platform.startswith("linux")):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    if os.getppid() != int(parent):  # it ended before the kernel was told
        os._exit(1)
    os.environ[PARENT_VARIABLE] = str(os.getpid())


def save_plan(plan_file: Path, spec: Spec, jobs: Sequence[Job], eval_fingerprint: str) -> None:
    """Write the plan the workers run: the spec, its jobs and its evaluation fingerprint."""
    plan_file.write_bytes(pickle.dumps((spec, {job.key: job for job in jobs}, eval_fingerprint)))


def _run_plan(plan_file: str, keys: Iterator[tuple[str, Optional[str]]], fresh: bool) -> None:
    """Run the plan's jobs ``keys`` names (each with the log its output goes to)."""
    import solo_diet
    from solo_diet.compare.evaluate.checkpoint import SharedEvaluator
    from solo_diet.compare.run.fresh import FreshState, send_output_to
    from solo_diet.compare.run.job import run_job
    from solo_diet.core.errors import ConfigError

    solo_diet.register()
    state, plan = FreshState() if fresh else None, None
    for key, log in keys:
        if plan is None:  # read at the first job: a served worker may start before it is written
            spec, jobs, eval_fingerprint = plan = pickle.loads(Path(plan_file).read_bytes())
        if key not in jobs:
            raise ConfigError(f"{plan_file} has no job {key!r}.")
        if log is not None:
            send_output_to(log)
        with state.job() if state else contextlib.nullcontext():
            # its own evaluation data, as in a fresh process: no GPU memory kept
            run_job(spec, jobs[key], SharedEvaluator(), eval_fingerprint)


def serve(plan_file: str, reply_fd: int) -> int:
    """Run the jobs named on stdin, one after another, each as in a fresh process."""
    import solo_diet.launch.linear  # noqa: F401 - every job's imports, paid before the first
    import solo_diet.launch.pretrain  # noqa: F401

    with os.fdopen(reply_fd, "w") as replies:

        def requests() -> Iterator[tuple[str, Optional[str]]]:
            for line in sys.stdin:
                request = json.loads(line)
                yield request["request"], request["log"]
                sys.stdout.flush()
                sys.stderr.flush()
                replies.write("0\n")
                replies.flush()

        _run_plan(plan_file, requests(), fresh=True)
    return 0


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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """A failed job ends the process with its traceback and status 1, as any Python error."""
    die_with_parent()
    quiet_run_noise()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) == 3 and args[0] == "--serve" and args[2].isdigit():
            return serve(args[1], int(args[2]))
        if len(args) != 2:
            print(__doc__, file=sys.stderr)
            return 2
        _run_plan(args[0], iter([(args[1], None)]), fresh=False)
    except KeyboardInterrupt as err:  # in a job, or a worker waiting for one
        print(f"interrupted: {err}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
