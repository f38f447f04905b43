"""One comparison per output folder (``<output_dir>/.compare.lock``), one process per job
(``<job folder>/.job.lock``): the holder keeps an exclusive ``flock`` (released by the kernel
however its process ends) and writes its PID, host and start time into the file."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from solo_diet.config import ConfigError

LOCK_FILE = ".compare.lock"
JOB_LOCK_FILE = ".job.lock"


class OutputDirInUse(ConfigError):
    """Another comparison holds the output folder."""


def _holder(descriptor: int) -> dict:
    """What the lock file says of its holder (empty when nothing, or nothing readable)."""
    os.lseek(descriptor, 0, os.SEEK_SET)
    text = os.read(descriptor, 4096).decode(errors="replace")
    try:
        holder = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def _write_holder(descriptor: int) -> None:
    """Say in the lock file who holds it: this process, its host, when it took the lock."""
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": started}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(record).encode(), 0)
    os.fsync(descriptor)


def _named(holder: dict) -> str:
    if not holder:
        return "another comparison (it has not written its PID yet)"
    return (
        f"`solo-diet compare` PID {holder.get('pid')} on {holder.get('host')} (started "
        f"{holder.get('started', '?')})"
    )


@contextlib.contextmanager
def _lock_file(path: Path, create: bool = True) -> Iterator[tuple[int, str]]:
    """``path`` open, and its exclusive ``flock`` tried without waiting: ``taken``, ``held`` (by
    another process) or ``unsupported`` (no file locks here). Closing the file releases it."""
    descriptor = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o666)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        state = "taken"
    except OSError as err:
        state = "held" if isinstance(err, BlockingIOError) else "unsupported"
    try:
        yield descriptor, state
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def output_dir_lock(out: Path, say: Callable[[str], None] = print) -> Iterator[Path]:
    """Hold ``out``'s lock in the block; :class:`OutputDirInUse` when another comparison does."""
    path = out / LOCK_FILE
    with _lock_file(path) as (descriptor, state):
        if state == "unsupported":
            say(
                f"cannot lock {path} (no file locks here): a second comparison into {out} is not "
                "refused"
            )
            yield path
            return
        if state == "held":
            raise OutputDirInUse(
                f"`output_dir` {out} is in use by {_named(_holder(descriptor))}: wait for it to "
                "end, or pass another output_dir."
            )
        holder, host = _holder(descriptor), socket.gethostname()
        if holder and holder.get("host") != host:
            raise OutputDirInUse(
                f"`output_dir` {out} is locked by {_named(holder)}, another machine: wait for it "
                f"to end, or, if it no longer runs, delete {path}."
            )
        if holder and holder.get("pid") != os.getpid():
            say(
                f"taking over the lock {path} of {_named(holder)}, which no longer runs (killed "
                "or crashed)"
            )
        _write_holder(descriptor)
        try:
            yield path
        finally:
            os.ftruncate(descriptor, 0)  # an empty lock file is a free folder


@contextlib.contextmanager
def job_lock(run_dir: Path, label: str, say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold ``run_dir``'s job lock inside the block, waiting while another process holds it."""
    with _lock_file(run_dir / JOB_LOCK_FILE) as (descriptor, state):
        if state == "held":
            holder = _holder(descriptor)
            say(f"{label}: waiting for PID {holder.get('pid', '?')}, which still runs this job")
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        if state != "unsupported":  # without file locks the folder's lock is the only guard
            _write_holder(descriptor)
        yield


def stop_orphans(run_dirs: Sequence[Path], say: Callable[[str], None] = print) -> None:
    """Stop every process of this host holding one of these jobs' locks (a worker of a comparison
    that no longer runs, with its process group) and wait until it is gone."""
    for run_dir in run_dirs:
        path = run_dir / JOB_LOCK_FILE
        if not path.is_file():
            continue
        with _lock_file(path, create=False) as (descriptor, state):
            if state != "held":  # free, or no file locks
                continue
            holder = _holder(descriptor)
            pid = holder.get("pid")
            if holder.get("host") == socket.gethostname() and isinstance(pid, int):
                say(
                    f"stopping PID {pid}, a worker of a comparison that no longer runs, still "
                    f"running the job in {run_dir}"
                )
                _kill_with_group(pid)
            else:
                say(f"waiting for {_named(holder)}, which still runs the job in {run_dir}")
            fcntl.flock(descriptor, fcntl.LOCK_EX)  # until it (and what it forked) is gone


def _kill_with_group(pid: int) -> None:
    """SIGKILL to ``pid``, and to its process group when it leads one (a worker's)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
