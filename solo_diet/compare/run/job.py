"""One job of a comparison: pretrained once (resumed if interrupted), then evaluated into
``<job folder>/result.json``; a reference row's checkpoint is written here instead. One
comparison per output folder (``.compare.lock``), one process per job (``.job.lock``)."""

from __future__ import annotations

import contextlib
import copy
import fcntl
import math
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from solo_diet.compare.evaluate import curves
from solo_diet.compare.evaluate.checkpoint import SharedEvaluator, evaluate_checkpoint
from solo_diet.compare.plan import jobs as plan
from solo_diet.compare.plan.budgets import validation_interval
from solo_diet.compare.plan.jobs import Job
from solo_diet.compare.run import record
from solo_diet.compare.run.record import progress, read_json, write_json
from solo_diet.compare.spec.settings import Spec
from solo_diet.core.errors import ConfigError
from solo_diet.core.lock import holder_named, holder_of, lock_file, write_holder
from solo_diet.launch.checkpointing import checkpoint_epoch
from solo_diet.launch.common import already_finished
from solo_diet.launch.launch_checks import TrainingSettings
from solo_diet.methods.checkpoint import checkpoint_problem

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


def _pretrain_callbacks(spec: Spec, job: Job) -> list:
    """Per-epoch costs and curves, the learning curves' snapshots and RankMe (validation epochs)."""
    from solo_diet.launch.callbacks import EpochCostLogger, RankMeMonitor

    callbacks: list = [EpochCostLogger(job.run_dir / record.EPOCHS_FILE, print_rows=True)]
    if spec.curves.points > 0:
        callbacks.append(curves.BackboneSnapshots(job.run_dir, curves.snapshot_epochs(spec, job)))
    every = spec.evaluation.rankme_every_n_epochs
    if every > 0:
        step = validation_interval(spec.budget, job.budget.epochs)  # the run's own
        every = step * math.ceil(every / step)
        callbacks.append(RankMeMonitor(every, spec.evaluation.rankme_samples))
    return callbacks


def pretrain(spec: Spec, job: Job) -> tuple[Path, bool]:
    """Pretrain once: ``(last checkpoint, trained now)``, resuming from the latest checkpoint."""
    from solo_diet.launch.pretrain import run_pretrain

    cfg, run_dir = job.cfg, job.run_dir
    training = TrainingSettings(max_epochs=job.budget.epochs)  # compare refuses max_steps
    state_path = run_dir / "state.json"
    state = read_json(state_path)
    pretrain_fingerprint = plan.training_fingerprint(cfg)
    if state and state["pretrain_fingerprint"] != pretrain_fingerprint:
        if state.get("checkpoint") or plan.latest_checkpoint(run_dir / "pretrain") is not None:
            raise ConfigError(
                f"{run_dir} holds {job.label} pretrained with another config, budget or data; use "
                "another `output_dir` or delete that folder."
            )
        progress(f"{job.label}: its attempt with another config left no checkpoint; starting over")
        state = {}
    finished = state.get("checkpoint")
    if finished and Path(finished).is_file():
        problem = checkpoint_problem(finished)
        if problem is None:
            return Path(finished), False
        progress(f"{job.label}: its last checkpoint {finished} does not load ({problem})")
    resume = plan.latest_checkpoint(run_dir / "pretrain")
    # Started over (no checkpoint left, say a folder copied from another machine), the job drops
    # the lost attempt's wall time (and EpochCostLogger its epochs); resumed, it keeps them.
    state = {
        "pretrain_fingerprint": pretrain_fingerprint,
        "pretrain_wall_s": state.get("pretrain_wall_s", 0.0) if resume is not None else 0.0,
    }
    write_json(state_path, state)
    if already_finished(resume, training):
        checkpoint = resume
    else:
        cfg = copy.deepcopy(cfg)  # run_pretrain fills it in; the job's cfg stays as composed
        if resume is not None:
            progress(f"{job.label}: resuming after epoch {checkpoint_epoch(resume)} from {resume}")
            cfg.resume_from_checkpoint = str(resume)
        start = time.time()
        last = run_pretrain(cfg, extra_callbacks=_pretrain_callbacks(spec, job))
        state["pretrain_wall_s"] += time.time() - start
        write_json(state_path, state)
        if last is None:
            raise RuntimeError(f"{job.label}: pretraining wrote no checkpoint.")
        checkpoint = Path(last)
        if not already_finished(checkpoint, training):  # stopped early without an interruption
            raise KeyboardInterrupt(f"{job.label}: pretraining stopped after {checkpoint.name}")
    state["checkpoint"] = str(checkpoint)
    write_json(state_path, state)
    return checkpoint, True


def result_standing(
    spec: Spec, job: Job, eval_fingerprint: str, with_curves: bool = True
) -> Optional[str]:
    """Why ``job``'s ``result.json`` stands with nothing to run, or None when the job must run
    (with ``with_curves``, also when learning-curve points are left to evaluate)."""
    previous = read_json(job.run_dir / "result.json")
    if job.reference is not None:
        wanted = plan.reference_fingerprint(spec, job, eval_fingerprint)
        return "already evaluated" if previous.get("fingerprint") == wanted else None
    state = read_json(job.run_dir / "state.json")
    finished = state.get("checkpoint")
    if not (
        finished
        and state.get("pretrain_fingerprint") == plan.training_fingerprint(job.cfg)
        and previous.get("checkpoint") == finished
        and previous.get("fingerprint") == eval_fingerprint
    ):
        return None
    if with_curves and curves.missing_points(spec, job, eval_fingerprint):
        return None
    if Path(finished).is_file():
        return "already evaluated"
    return "already evaluated (its checkpoint is gone; the result stands)"


def run_job(
    spec: Spec, job: Job, shared_eval: SharedEvaluator, eval_fingerprint: str
) -> dict[str, Any]:
    """Pretrain and evaluate one job, then its curve points, under its lock; its ``result.json``."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    # a process Lightning starts for a DDP rank other than 0 only trains; rank 0 holds the lock
    secondary = any(int(os.environ.get(k, "0") or 0) > 0 for k in ("LOCAL_RANK", "NODE_RANK"))
    with contextlib.nullcontext() if secondary else job_lock(job.run_dir, job.label, progress):
        return _run_job(spec, job, shared_eval, eval_fingerprint, secondary)


def _run_job(
    spec: Spec, job: Job, shared_eval: SharedEvaluator, eval_fingerprint: str, secondary: bool
) -> dict[str, Any]:
    standing = result_standing(spec, job, eval_fingerprint, with_curves=False)
    if standing:
        progress(f"{job.label}: {standing}")
        result = read_json(job.run_dir / "result.json")
        curves.evaluate_curve(spec, job, shared_eval, result)
        return result
    if job.reference is None:
        checkpoint, trained = pretrain(spec, job)
        if secondary:
            return {}
        if not trained:
            progress(f"{job.label}: pretraining already finished ({checkpoint.name})")
        started, wanted = time.time(), eval_fingerprint
    else:  # its checkpoint written here: the untrained backbone, or the raw pixels
        from solo_diet.launch.checkpointing import save_random_init, save_raw_pixels

        started, wanted = time.time(), plan.reference_fingerprint(spec, job, eval_fingerprint)
        checkpoint = job.run_dir / "reference.ckpt"
        if job.reference == "random_init":
            save_random_init(job.cfg, checkpoint)
        else:
            evaluator = shared_eval.get(spec, plan.compose_linear(spec, checkpoint, job.run_dir))
            save_raw_pixels(checkpoint, evaluator.image_shape, spec.data.dataset)
    result = evaluate_checkpoint(spec, job, checkpoint, shared_eval)
    result.update(run=job.name, seed=job.cfg_seed, job=job.key)
    # where and when it ran: the GPU's name, or CPU
    result["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    result["finished_utc"] = time.strftime(record.TIME_FORMAT, time.gmtime())
    if job.reference is None:
        result.update(record.pretrain_costs(job.run_dir), recipe=plan.recipe_fingerprint(job.cfg))
    else:
        result.update(method=job.reference)
    result.update(evaluation_wall_s=time.time() - started, fingerprint=wanted)
    write_json(job.run_dir / "result.json", result)
    progress(
        f"{job.label}: linear {result['linear_acc1']:.2f}%  logistic regression "
        f"{result['logreg_acc1']:.2f}%  kNN {result['knn_acc1']:.2f}%  "
        f"RankMe {result['rankme']:.1f}  LiDAR {result['lidar']:.1f}"
        + (f"  k-means NMI {result['kmeans_nmi']:.3f}" if "kmeans_nmi" in result else "")
    )
    curves.evaluate_curve(spec, job, shared_eval, result)
    return result
