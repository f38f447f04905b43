"""What one job may leave behind in a reusable worker, put back before the next."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import random
import signal
import sys
import warnings
from typing import Any, Iterator

import numpy as np
import torch

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
