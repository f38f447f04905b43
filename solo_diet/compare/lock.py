"""One comparison per output folder: ``<output_dir>/.compare.lock``.

The running comparison holds an exclusive ``flock`` on the file, which the kernel releases when its
process ends however it ends, and writes its PID, host and start time into it. A second comparison
into the folder exits with status 2 and one line naming the holder. A lock file that names a
process of this host but is no longer held (a comparison killed with ``kill -9``) is taken over
with a line saying so. One naming another host is refused too: a lock of another machine's
process on a shared disk cannot be checked from here, so the line says to delete the file if that
comparison no longer runs. The comparison's own workers take no lock: they run under their
parent's. ``--report-only`` takes none either (its files are written whole, so a report written
beside a running comparison is harmless).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, Iterator

from solo_diet.config import ConfigError

LOCK_FILE = ".compare.lock"


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


def _named(holder: dict) -> str:
    if not holder:
        return "another comparison (it has not written its PID yet)"
    return (
        f"`solo-diet compare` PID {holder.get('pid')} on {holder.get('host')} (started "
        f"{holder.get('started', '?')})"
    )


@contextlib.contextmanager
def output_dir_lock(out: Path, say: Callable[[str], None] = print) -> Iterator[Path]:
    """Hold ``out``'s lock inside the block; raise :class:`OutputDirInUse` (one line: who holds
    it and what to do) when another comparison does."""
    path = out / LOCK_FILE
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputDirInUse(
                f"`output_dir` {out} is in use by {_named(_holder(descriptor))}: wait for it to "
                "end, or pass another output_dir."
            ) from None
        except OSError as err:  # a file system without locks
            say(f"cannot lock {path} ({err}): a second comparison into {out} is not refused")
            yield path
            return
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
        record = {
            "pid": os.getpid(),
            "host": host,
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, json.dumps(record).encode(), 0)
        os.fsync(descriptor)
        try:
            yield path
        finally:
            os.ftruncate(descriptor, 0)  # an empty lock file is a free folder
    finally:
        os.close(descriptor)  # releases the flock
