"""The fan-out's side of a reusable worker (:mod:`~solo_diet.compare.worker` ``--serve``).

The protocol: the worker's last argument is a pipe it writes to; each task is one JSON line on its
standard input, ``{"log": <log file>, "request": <the task's request>}``; the worker sends its
output to that log, runs the task and writes ``0`` and a newline to the pipe. A task that fails
ends the worker (as a task in its own process); the end of its standard input ends an idle one.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Optional, Sequence


class ServedWorker:
    """A reusable worker process on ``devices``, with its output in the first task's log."""

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
