"""A comparison's jobs in processes of their own, each given the plan the parent wrote once (the
spec and its jobs) and its job's key; exit status 0 when done, 130 when interrupted, 1 on error.

    python -m solo_diet.compare.run.worker <plan.pkl> <job key>
    python -m solo_diet.compare.run.worker --serve <plan.pkl> <reply fd>   (jobs named on stdin)
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import logging
import os
import pickle
import random
import signal
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import numpy as np
import torch

from solo_diet.compare.run.fanout import PARENT_VARIABLE
from solo_diet.host import quiet_run_noise

if TYPE_CHECKING:
    from solo_diet.compare.plan.jobs import Job
    from solo_diet.compare.spec.settings import Spec

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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


SIGNALS = (signal.SIGINT, signal.SIGTERM)
CUDNN_SWITCHES = ("enabled", "benchmark", "deterministic", "allow_tf32")


def _torch_switches() -> dict[str, Any]:
    cudnn = torch.backends.cudnn
    return {f"cudnn.{name}": getattr(cudnn, name) for name in CUDNN_SWITCHES} | {
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "deterministic": (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        "num_threads": torch.get_num_threads(),
        "default_dtype": torch.get_default_dtype(),
        "grad_enabled": torch.is_grad_enabled(),
    }


def _set_torch_switches(switches: dict[str, Any]) -> None:
    for name in CUDNN_SWITCHES:
        setattr(torch.backends.cudnn, name, switches[f"cudnn.{name}"])
    torch.backends.cuda.matmul.allow_tf32 = switches["matmul.allow_tf32"]
    torch.set_float32_matmul_precision(switches["float32_matmul_precision"])
    mode, warn_only = switches["deterministic"]
    torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    if torch.get_num_threads() != switches["num_threads"]:
        torch.set_num_threads(switches["num_threads"])
    torch.set_default_dtype(switches["default_dtype"])
    torch.set_grad_enabled(switches["grad_enabled"])


def _loggers() -> dict[str, logging.Logger]:
    named = logging.Logger.manager.loggerDict.items()
    found = {name: lg for name, lg in named if isinstance(lg, logging.Logger)}
    return found | {"": logging.getLogger()}


class FreshState:
    """The process as the worker had it before its first job."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.sys_path = list(sys.path)
        self.python_rng = random.getstate()
        self.numpy_rng = np.random.get_state()
        self.torch_rng = torch.get_rng_state()
        self.torch_seed = torch.initial_seed()  # where a fresh process's CUDA generators start
        self.switches = _torch_switches()
        self.signals = {signum: signal.getsignal(signum) for signum in SIGNALS}
        self.loggers = {
            name: (lg.level, list(lg.handlers), lg.propagate, lg.disabled)
            for name, lg in _loggers().items()
        }

    def restore(self) -> None:
        """Put back what the jobs so far may have changed."""
        os.environ.clear()
        os.environ.update(self.environ)
        os.chdir(self.cwd)
        sys.path[:] = self.sys_path
        random.setstate(self.python_rng)
        np.random.set_state(self.numpy_rng)
        torch.set_rng_state(self.torch_rng)
        if torch.cuda.is_initialized():
            torch.cuda.manual_seed_all(self.torch_seed)
        _set_torch_switches(self.switches)
        for signum, handler in self.signals.items():
            signal.signal(signum, handler)
        loggers = _loggers()
        for name, (level, handlers, propagate, disabled) in self.loggers.items():
            logger = loggers[name]
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate, logger.disabled = propagate, disabled
        if "hydra" in sys.modules:
            from hydra.core.global_hydra import GlobalHydra

            GlobalHydra.instance().clear()
        for name, module in list(sys.modules.items()):  # solo-diet's functools caches
            if name.startswith("solo_diet.") and module is not None:
                for value in vars(module).values():
                    if getattr(value, "__module__", None) == name and hasattr(value, "cache_clear"):
                        value.cache_clear()

    @contextlib.contextmanager
    def job(self) -> Iterator[None]:
        """Restore before the job; after it, the warning filters, and memory freed."""
        self.restore()
        try:
            with warnings.catch_warnings():  # also shows again the warnings shown "once"
                yield
        finally:
            free_memory()


def free_memory() -> None:
    """Collect what the job left unreferenced and give its CUDA cache back to the driver."""
    gc.collect()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        for device in range(torch.cuda.device_count()):
            torch.cuda.reset_peak_memory_stats(device)


def send_output_to(path: str) -> None:
    """Point this process's stdout and stderr file descriptors at the end of ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


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
