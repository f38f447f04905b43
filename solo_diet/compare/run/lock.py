"""One comparison per output folder (``.compare.lock``), one process per job (``.job.lock``)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
from pathlib import Path
from typing import Callable, Iterator, Sequence

from solo_diet.core.lock import holder_named, holder_of, lock_file, write_holder

LOCK_FILE = ".compare.lock"
JOB_LOCK_FILE = ".job.lock"


@contextlib.contextmanager
def job_lock(run_dir: Path, label: str, say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold ``run_dir``'s job lock inside the block, waiting while another process holds it."""
    with lock_file(run_dir / JOB_LOCK_FILE) as (descriptor, state):
        if state == "held":
            holder = holder_of(descriptor)
            say(f"{label}: waiting for PID {holder.get('pid', '?')}, which still runs this job")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        if state != "unsupported":  # without file locks the folder's lock is the only guard
            write_holder(descriptor, "compare")
        yield


def stop_orphans(run_dirs: Sequence[Path], say: Callable[[str], None] = print) -> None:
    """Stop every process of this host holding one of these jobs' locks, and wait until gone."""
    for run_dir in run_dirs:
        path = run_dir / JOB_LOCK_FILE
        if not path.is_file():
            continue
        with lock_file(path, create=False) as (descriptor, state):
            if state != "held":  # free, or no file locks
                continue
            holder = holder_of(descriptor)
            pid = holder.get("pid")
            if holder.get("host") == socket.gethostname() and isinstance(pid, int):
                say(
                    f"stopping PID {pid}, a worker of a comparison that no longer runs, still "
                    f"running the job in {run_dir}"
                )
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    if os.getpgid(pid) == pid:  # a worker leads its process group
                        os.killpg(pid, signal.SIGKILL)
                    os.kill(pid, signal.SIGKILL)
            else:
                named = holder_named(holder, "compare")
                say(f"waiting for {named}, which still runs the job in {run_dir}")
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # until it (and what it forked) is gone
