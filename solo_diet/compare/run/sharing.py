"""Where a comparison's jobs run (:func:`fleet_of`): how many share one GPU, a private CUDA MPS
daemon that lets their kernels run side by side, and workers started before the parent's own
imports (docs/compare.md, "Many GPUs"). Imports neither torch nor Lightning nor solo-learn."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional, Sequence

from solo_diet.compare.run import fanout
from solo_diet.core.errors import ConfigError

if TYPE_CHECKING:
    from solo_diet.compare.spec.settings import Spec

MPS_CONTROL = "nvidia-cuda-mps-control"
MPS_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")
# a job's host side (Python, the launches, the loader's threads) wants about this many cores: on
# a 16-core H200 four jobs with MPS did the 11-job comparison in half the time of two, and six
# no faster than four: each job then trained at 4/6 of the rate (benchmarks)
CORES_PER_SHARED_JOB = 4
MOST_JOBS_PER_GPU = {True: 4, False: 2}  # with MPS, without: without it kernels take turns
WORKER = (sys.executable, "-m", "solo_diet.compare.run.worker")
PLAN_PREFIX = "solo-diet-plan-"  # + the comparison's pid: its workers' plan (temporary folder)


@dataclass(frozen=True)
class Sharing:
    """What a comparison runs with: jobs per GPU, whether under MPS, and why (its first line)."""

    jobs_per_gpu: int
    mps: bool
    why: str


def mps_unavailable(gpus: Sequence[str]) -> str:
    """Why a private MPS daemon cannot serve ``gpus`` ('' when it can)."""
    if not gpus:
        return "no GPU"
    if shutil.which(MPS_CONTROL) is None:
        return f"no `{MPS_CONTROL}` on PATH"
    query = ["nvidia-smi", "--query-gpu=index,compute_mode", "--format=csv,noheader"]
    try:
        lines = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as error:
        return f"`nvidia-smi` could not tell the compute mode ({error})"
    modes = dict(line.split(", ", 1) for line in lines.stdout.strip().splitlines() if ", " in line)
    other = {gpu: modes.get(gpu, "unknown") for gpu in gpus if modes.get(gpu) != "Default"}
    return f"GPUs not in the Default compute mode: {other}" if other else ""


def choose_sharing(
    jobs_per_gpu: Optional[int], mps: str, gpus: int, cores: int, jobs: int, no_mps: str
) -> Sharing:
    """The :class:`Sharing` of ``jobs`` on ``gpus`` GPUs and ``cores`` cores: ``jobs_per_gpu``, or
    chosen from the cores; ``mps`` auto, on or off; ``no_mps``: :func:`mps_unavailable`'s answer."""
    if mps == "on" and no_mps:
        raise ConfigError(f"`parallel.mps: on` cannot be honoured: {no_mps}. Use auto or off.")
    if not gpus:
        return Sharing(1, False, "no GPU: one job at a time")
    can_mps = mps != "off" and not no_mps
    if jobs_per_gpu is None:
        by_cores = max(1, cores // (gpus * CORES_PER_SHARED_JOB))
        wanted = max(1, math.ceil(jobs / gpus))
        jobs_per_gpu = min(by_cores, wanted, MOST_JOBS_PER_GPU[can_mps])
        how = f"auto: {cores} cores, {gpus} GPU(s), {jobs} job(s)"
    else:
        how = "parallel.jobs_per_gpu"
    shared = int(jobs_per_gpu) > 1
    use_mps = can_mps and shared
    why = f" ({no_mps})" if shared and mps != "off" else ""  # only a failed MPS check stops it
    under = "under a private MPS daemon" if use_mps else f"without MPS{why}"
    return Sharing(int(jobs_per_gpu), use_mps, f"{jobs_per_gpu} job(s) per GPU ({how}), {under}")


@contextlib.contextmanager
def private_mps(active: bool) -> Iterator[None]:
    """Inside the block, processes started from here are clients of a private MPS daemon (in a
    temporary folder), stopped on the way out; one the environment already names is used."""
    if not active or os.environ.get(MPS_VARIABLES[0]):
        yield
        return
    folder = tempfile.mkdtemp(prefix="solo-diet-mps-")
    variables = dict(zip(MPS_VARIABLES, (f"{folder}/pipe", f"{folder}/log")))
    for path in variables.values():
        os.makedirs(path)
    env = dict(os.environ, **variables)
    subprocess.run([MPS_CONTROL, "-d"], env=env, check=True, timeout=60)
    os.environ.update(variables)
    try:
        yield
    finally:
        for name in MPS_VARIABLES:
            os.environ.pop(name, None)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([MPS_CONTROL], input="quit\n", text=True, env=env, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class Fleet:
    """A comparison's GPUs, their :class:`Sharing`, how many workers run at once and with how
    many threads each, the file the workers' plan goes to, the workers already started, and the
    retired ones, whose exits are waited for on the way out (after the report)."""

    gpus: tuple[str, ...]
    sharing: Sharing
    workers: int
    threads: str
    plan_file: Path
    started: tuple[fanout.ServedWorker, ...] = ()
    retired: list[fanout.ServedWorker] = field(default_factory=list)


@contextlib.contextmanager
def fleet_of(spec: Spec, start_workers: bool = False) -> Iterator[Fleet]:
    """The :class:`Fleet` of ``spec``'s chosen jobs, its MPS daemon running inside the block;
    ``start_workers``: a reusable worker a slot starts now, so that its imports (about 17 s on an
    H200 host) overlap the caller's. On the way out the retired workers are waited for (20 s at
    most) and the others killed."""
    parallel, gpus = spec.parallel, fanout.visible_gpus()
    no_mps = mps_unavailable(gpus) if parallel.mps != "off" else ""
    cores, chosen = len(os.sched_getaffinity(0)), spec.chosen_jobs()
    sharing = choose_sharing(parallel.jobs_per_gpu, parallel.mps, len(gpus), cores, chosen, no_mps)
    workers = parallel.workers or max(1, len(gpus) * sharing.jobs_per_gpu)
    threads = fanout.task_threads(cores, workers, chosen)
    prefix = f"{PLAN_PREFIX}{os.getpid()}-"
    with contextlib.ExitStack() as stack:
        temporary = tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True)
        folder = Path(stack.enter_context(temporary))
        plan_file = folder / "plan.pkl"  # in a folder only this user may write (mode 0700)
        stack.enter_context(private_mps(sharing.mps and workers > 1))  # jobs side by side
        started = []
        if start_workers and workers > 1 and parallel.reuse_workers:
            for slot in range(min(workers, chosen)):
                devices = (gpus[slot % len(gpus)],) if gpus else ()
                argv, log = (*WORKER, "--serve", str(plan_file)), folder / f"worker-{slot}.log"
                started.append(
                    fanout.ServedWorker(argv, devices, fanout.task_env(devices, threads), log)
                )
        fleet = Fleet(tuple(gpus), sharing, workers, threads, plan_file, tuple(started))
        try:
            yield fleet
        finally:  # a worker never handed a job (none was left for it) is killed, not waited for
            fanout.wait_or_kill([w.process for w in started if not w.tasks_run], 0.0)
            fanout.wait_or_kill([w.process for w in fleet.retired if w.tasks_run], grace_s=20.0)
