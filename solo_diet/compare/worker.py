"""A comparison's jobs in processes of their own (:mod:`~solo_diet.compare.fanout` starts them),
each given the comparison's plan (:func:`save_plan`: the spec and its jobs, planned once by the
parent) and the key of its job. One job, in a fresh process:

    python -m solo_diet.compare.worker <tmp>/solo-diet-plan-<pid>-XXXX/plan.pkl <job key>

A reusable worker (``parallel.reuse_workers``), running the jobs named on its standard input one
after another, each as in a fresh process (:class:`ServedWorker`, :mod:`~solo_diet.compare.fresh`):

    python -m solo_diet.compare.worker --serve <tmp>/solo-diet-plan-<pid>-XXXX/plan.pkl <reply fd>

Exit status 0 when done, 130 when interrupted, 1 with a traceback otherwise.
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
from typing import TYPE_CHECKING, Optional, Sequence

from solo_diet._host import quiet_run_noise

if TYPE_CHECKING:
    from solo_diet.compare.jobs import Job
    from solo_diet.compare.spec_checks import Spec

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The PID of the process a worker must not outlive (set by the fan-out, then by each worker for the
# DDP ranks it starts: :func:`die_with_parent`).
PARENT_VARIABLE = "SOLO_DIET_WORKER_PARENT"


def die_with_parent() -> None:
    """On Linux, have the kernel SIGKILL this process when the process that started it (named by
    ``SOLO_DIET_WORKER_PARENT``) ends, however it ends (a ``kill -9`` of ``solo-diet compare``):
    its jobs then resume in the next comparison, never beside it. A parent already gone ends this
    process at once. The processes this one starts (DDP ranks) are bound to it the same way."""
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


def load_plan(plan_file: str | Path) -> tuple[Spec, dict[str, Job], str]:
    """The plan :func:`save_plan` wrote: spec, jobs by key, evaluation fingerprint."""
    import solo_diet

    solo_diet.register()
    return pickle.loads(Path(plan_file).read_bytes())


def run_one_job(plan_file: str | Path, key: str) -> None:
    """The worker's part: run the job ``key`` of the plan ``plan_file``."""
    from solo_diet.compare.evaluate import SharedEvaluator
    from solo_diet.compare.job import run_job
    from solo_diet.config import ConfigError

    spec, jobs, eval_fingerprint = load_plan(plan_file)
    if key not in jobs:
        raise ConfigError(f"{plan_file} has no job {key!r}.")
    run_job(spec, jobs[key], SharedEvaluator(), eval_fingerprint)


def serve(plan_file: str, reply_fd: int) -> int:
    """Run the jobs named on stdin, one after another, each as in a fresh process."""
    import solo_diet.launch.linear  # noqa: F401 - every job's imports, paid before the first
    import solo_diet.launch.pretrain  # noqa: F401
    from solo_diet.compare.evaluate import SharedEvaluator
    from solo_diet.compare.fresh import FreshState, send_output_to
    from solo_diet.compare.job import run_job

    spec, jobs, eval_fingerprint = load_plan(plan_file)
    fresh = FreshState()
    with os.fdopen(reply_fd, "w") as replies:
        for line in sys.stdin:
            request = json.loads(line)
            send_output_to(request["log"])
            with fresh.job():
                # its own evaluation data, as in a fresh process: no GPU memory kept
                run_job(spec, jobs[request["request"]], SharedEvaluator(), eval_fingerprint)
            sys.stdout.flush()
            sys.stderr.flush()
            replies.write("0\n")
            replies.flush()
    return 0


class ServedWorker:
    """The fan-out's handle on a reusable worker process on ``devices`` (``--serve``), its output
    in the first task's log. Protocol: its last argument is a pipe it writes to; each task is a
    JSON line on its standard input, ``{"log": <log file>, "request": <the task's request>}``; the
    worker sends its output to that log, runs the task and writes ``0`` and a newline to the pipe.
    A task that fails ends the worker; the end of its standard input ends an idle one."""

    def __init__(
        self, argv: Sequence[str], devices: tuple[str, ...], env: dict, first_log: Path
    ) -> None:
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        with first_log.open("a") as log:  # where its start-up says what it says
            self.process = subprocess.Popen(
                [*argv, str(write_end)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=(write_end,),
                text=True,
            )
        os.close(write_end)
        self.devices = devices
        self.tasks_run = 0
        self._replies = read_end
        self._buffer = b""

    def hand(self, log_path: Path, request: str) -> None:
        """Give the worker its next task (a worker that died idle reports its exit status)."""
        assert self.process.stdin is not None
        line = json.dumps({"log": str(log_path), "request": request}) + "\n"
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write(line)
            self.process.stdin.flush()
        self.tasks_run += 1

    def task_status(self) -> Optional[int]:
        """How the task handed last ended: 0 (the worker waits for the next), the worker's exit
        status (negative: killed by that signal; 1 when it left without a word), or None while it
        runs."""
        with contextlib.suppress(BlockingIOError):
            self._buffer += os.read(self._replies, 64)
        if b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            return int(line)
        status = self.process.poll()
        if status is None:
            return None
        return status or 1

    def alive(self) -> bool:
        return self.process.poll() is None

    def retire(self) -> None:
        """End an idle worker: it exits when its standard input ends."""
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
        run_one_job(args[0], args[1])
    except KeyboardInterrupt as err:  # in a job, or a worker waiting for one
        print(f"interrupted: {err}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
