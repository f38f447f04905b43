"""Folder locks: an exclusive ``flock`` on a lock file naming its holder. Torch-free."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import Callable, Iterator

from solo_diet.core.errors import ConfigError


class FolderInUse(ConfigError):
    """Another process holds the folder's lock."""


def holder_of(descriptor: int) -> dict:
    """What the lock file says of its holder (empty when nothing, or nothing readable)."""
    os.lseek(descriptor, 0, os.SEEK_SET)
    text = os.read(descriptor, 4096).decode(errors="replace")
    try:
        holder = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    return holder if isinstance(holder, dict) else {}


def write_holder(descriptor: int, command: str) -> None:
    """Write this process, host, command and start time into the lock file."""
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": started}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(record | {"command": command}).encode(), 0)
    os.fsync(descriptor)


def holder_named(holder: dict, command: str) -> str:
    """```solo-diet <command>` PID 4242 on node-3 (started ...)`` (the holder's own command)."""
    command = holder.get("command", command)
    if not holder:
        return f"another `solo-diet {command}` (it has not written its PID yet)"
    return (
        f"`solo-diet {command}` PID {holder.get('pid')} on {holder.get('host')} (started "
        f"{holder.get('started', '?')})"
    )


@contextlib.contextmanager
def lock_file(path: Path, create: bool = True) -> Iterator[tuple[int, str]]:
    """``path`` open and its ``flock`` tried: ``taken``, ``held`` or ``unsupported``."""
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
def folder_lock(
    path: Path, command: str, what: str, fix: str, say: Callable[[str], None] = print
) -> Iterator[Path]:
    """Hold the lock ``path`` in the block, or raise :class:`FolderInUse` naming its holder."""
    with lock_file(path) as (descriptor, state):
        if state == "unsupported":
            say(
                f"cannot lock {path} (no file locks here): a second `solo-diet {command}` into "
                f"{path.parent} is not refused"
            )
            yield path
            return
        if state == "held":
            holder = holder_named(holder_of(descriptor), command)
            raise FolderInUse(f"{what} is in use by {holder}: wait for it to end, or {fix}.")
        holder, host = holder_of(descriptor), socket.gethostname()
        if holder and holder.get("host") != host:
            raise FolderInUse(
                f"{what} is locked by {holder_named(holder, command)}, another machine: wait for "
                f"it to end, or, if it no longer runs, delete {path}."
            )
        if holder and holder.get("pid") != os.getpid():
            say(
                f"taking over the lock {path} of {holder_named(holder, command)}, which no "
                "longer runs (killed or crashed)"
            )
        write_holder(descriptor, command)
        try:
            yield path
        finally:
            os.ftruncate(descriptor, 0)  # an empty lock file is a free folder
