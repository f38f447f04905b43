"""A comparison's jobs in processes of their own (:mod:`~solo_diet.compare.fanout` starts them).
One job, in a fresh process:

    python -m solo_diet.compare.worker <output_dir>/.spec-<pid>.yaml <job key>

A reusable worker (``parallel.reuse_workers``), running the jobs named on its standard input one
after another, each as in a fresh process (:mod:`~solo_diet.compare.served`,
:mod:`~solo_diet.compare.fresh`):

    python -m solo_diet.compare.worker --serve <output_dir>/.spec-<pid>.yaml <reply fd>

Exit status 0 when done, 130 when interrupted, 1 with a traceback otherwise.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from solo_diet.compare.fanout import PARENT_VARIABLE

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from solo_diet.compare.jobs import Job

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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


def worker_jobs(spec_file: str | Path) -> tuple[DictConfig, dict[str, Job], str]:
    """The comparison saved as ``spec_file``: spec, jobs by key, evaluation fingerprint."""
    import solo_diet
    from solo_diet.compare.fingerprints import evaluation_fingerprint
    from solo_diet.compare.jobs import parse_runs, plan_jobs
    from solo_diet.compare.spec import load_spec

    solo_diet.register()
    spec = load_spec(spec_file)
    jobs = {job.key: job for job in plan_jobs(spec, parse_runs(spec))}
    return spec, jobs, evaluation_fingerprint(spec)


def run_one_job(spec_file: str | Path, key: str) -> None:
    """The worker's part: run the job ``key`` of the comparison saved as ``spec_file``."""
    from solo_diet.compare.evaluate import SharedEvaluator
    from solo_diet.compare.job import run_job
    from solo_diet.config import ConfigError

    spec, jobs, eval_fingerprint = worker_jobs(spec_file)
    if key not in jobs:
        raise ConfigError(f"{spec_file} has no job {key!r}.")
    run_job(spec, jobs[key], SharedEvaluator(), eval_fingerprint)


def serve(spec_file: str, reply_fd: int) -> int:
    """Run the jobs named on stdin, one after another, each as in a fresh process."""
    import solo_diet.launch.linear  # noqa: F401 - every job's imports, paid before the first
    import solo_diet.launch.pretrain  # noqa: F401
    from solo_diet.compare.evaluate import SharedEvaluator
    from solo_diet.compare.fresh import FreshState, send_output_to
    from solo_diet.compare.job import run_job

    spec, jobs, eval_fingerprint = worker_jobs(spec_file)
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """A failed job ends the process with its traceback and status 1, as any Python error."""
    die_with_parent()
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
