"""Running a comparison: one job per run, each in its own folder, pretrained and evaluated once.

A job's folder (``<output_dir>/runs/<job name>/``) holds everything about it: ``state.json`` (the
fingerprint of its pretraining cfg, the final checkpoint, the pretraining wall time), ``pretrain/``
(solo-learn's checkpoints), ``epochs.csv`` (per-epoch costs and curves), ``linear/`` and
``result.json`` (every metric, with the fingerprint of the evaluation settings). A finished job is
not repeated, an interrupted one resumes from its last epoch checkpoint, and a folder made by
another config is refused; so jobs can run in any order, and the report only reads their results.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from solo_diet.cli.compare._files import progress, read_json, write_json
from solo_diet.cli.compare.evaluate import compose_linear, evaluate_checkpoint, shared_evaluator
from solo_diet.cli.compare.report import write_report
from solo_diet.cli.compare.spec import (
    BUDGET_TARGETS,
    Run,
    compose,
    data_overrides,
    load_spec,
    parse_runs,
    quoted,
    shared_overrides,
)
from solo_diet.config import ConfigError


@dataclass
class Job:
    """One pretraining + evaluation: its name (the report's ``run`` column), spec entry, composed
    pretraining cfg and folder."""

    name: str
    run: Run
    cfg: DictConfig
    run_dir: Path


def fingerprint(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compose_run(spec: DictConfig, run: Run, run_dir: Path) -> DictConfig:
    """The run's pretraining cfg: its YAML + trainer + run overrides, then the spec's budget, data
    and checkpointing (which nothing else may set)."""
    from solo.methods import METHODS

    budget = [
        quoted(target, spec.budget[key])
        for key, target in BUDGET_TARGETS.items()
        if spec.budget[key] is not None
    ]
    forced = [
        quoted("name", run.name),
        quoted("checkpoint.dir", run_dir / "pretrain"),
        "++checkpoint.enabled=True",
        "++checkpoint.frequency=1",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
    ]
    shared = shared_overrides(spec) + [str(o) for o in spec.pretrain_overrides]
    overrides = shared + run.overrides + budget + data_overrides(spec) + forced
    cfg = compose(f"run {run.name!r}", run.config_path, run.config_name, overrides)
    if cfg.get("method") not in METHODS:
        raise ConfigError(
            f"run {run.name!r}: unknown method {cfg.get('method')!r}; registered methods: "
            f"{sorted(METHODS)}."
        )
    if OmegaConf.select(cfg, "max_steps") not in (None, -1):
        raise ConfigError(
            f"conflicting budgets: run {run.name!r} sets max_steps={cfg.max_steps}; the budget is "
            f"epochs."
        )
    limit = OmegaConf.select(cfg, "limit_train_batches")
    if spec.budget.limit_train_batches is None and limit not in (None, 1.0):
        raise ConfigError(
            f"conflicting budgets: {run.config_name}.yaml of run {run.name!r} sets "
            f"limit_train_batches="
            f"{limit}; set `budget.limit_train_batches` for every run instead."
        )
    return cfg


def plan_jobs(spec: DictConfig, runs: Sequence[Run]) -> list[Job]:
    """Every job of the comparison, composed (so a bad config fails before any training)."""
    out = Path(spec.output_dir)
    jobs = []
    for run in runs:
        run_dir = out / "runs" / run.name
        jobs.append(Job(run.name, run, compose_run(spec, run, run_dir), run_dir))
    return jobs


def checkpoint_epoch(path: Path) -> int:
    match = re.search(r"-ep=(\d+)\.ckpt$", path.name)
    return int(match.group(1)) if match else -1


def latest_checkpoint(folder: Path) -> Optional[Path]:
    """The checkpoint of the highest epoch under ``folder`` (newest file on ties)."""
    checkpoints = list(folder.glob("**/*.ckpt"))
    if not checkpoints:
        return None
    return max(checkpoints, key=lambda p: (checkpoint_epoch(p), p.stat().st_mtime))


def pretrain(spec: DictConfig, job: Job) -> tuple[Path, bool]:
    """Pretrain once: ``(last checkpoint, trained now)``. A finished job is reused, an interrupted
    one resumes from its latest checkpoint; a job folder made by another config is refused."""
    from solo_diet.callbacks import EpochCostLogger, RankMeMonitor
    from solo_diet.cli.pretrain import run_pretrain

    cfg, run_dir = job.cfg, job.run_dir
    state_path = run_dir / "state.json"
    state = read_json(state_path)
    pretrain_fingerprint = fingerprint(OmegaConf.to_container(cfg, resolve=True))
    if state and state["pretrain_fingerprint"] != pretrain_fingerprint:
        raise ConfigError(
            f"{run_dir} holds run {job.name!r} pretrained with another config or budget; use "
            f"another "
            "`output_dir` or delete that folder."
        )
    if state.get("checkpoint") and Path(state["checkpoint"]).is_file():
        return Path(state["checkpoint"]), False
    state = {
        "pretrain_fingerprint": pretrain_fingerprint,
        "pretrain_wall_s": state.get("pretrain_wall_s", 0.0),
    }
    write_json(state_path, state)
    resume = latest_checkpoint(run_dir / "pretrain")
    if resume is not None and checkpoint_epoch(resume) >= cfg.max_epochs - 1:
        checkpoint = resume
    else:
        if resume is not None:
            progress(
                f"run {job.name!r}: resuming after epoch {checkpoint_epoch(resume)} from {resume}"
            )
            cfg.resume_from_checkpoint = str(resume)
        callbacks: list = [EpochCostLogger(run_dir / "epochs.csv")]
        evaluation = spec.evaluation
        if evaluation.rankme_every_n_epochs > 0:
            callbacks.append(
                RankMeMonitor(evaluation.rankme_every_n_epochs, evaluation.rankme_samples)
            )
        start = time.time()
        last = run_pretrain(cfg, extra_callbacks=callbacks)
        state["pretrain_wall_s"] += time.time() - start
        if last is None:
            raise RuntimeError(f"run {job.name!r}: pretraining wrote no checkpoint.")
        checkpoint = Path(last)
    state["checkpoint"] = str(checkpoint)
    write_json(state_path, state)
    return checkpoint, True


def pretrain_costs(run_dir: Path) -> dict[str, float]:
    """Totals of the job's ``epochs.csv`` (epochs, train seconds, samples/s, peak GPU MiB) and the
    wall time of its pretraining calls."""
    from solo_diet.callbacks import read_epoch_rows

    path = run_dir / "epochs.csv"
    rows = read_epoch_rows(path) if path.is_file() else []
    train_s = sum(r["train_seconds"] for r in rows)
    peaks = [r["peak_gpu_mib"] for r in rows if not math.isnan(r["peak_gpu_mib"])]
    return {
        "epochs": len(rows),
        "train_s": train_s,
        "samples_per_s": sum(r["samples"] for r in rows) / train_s if train_s > 0 else math.nan,
        "peak_gpu_mib": max(peaks) if peaks else math.nan,
        "pretrain_wall_s": read_json(run_dir / "state.json").get("pretrain_wall_s"),
    }


def evaluation_fingerprint(spec: DictConfig) -> str:
    """Changes with any evaluation setting or the probe config (a job's result is then redone)."""
    settings = OmegaConf.to_container(spec.evaluation)
    return fingerprint(settings | {"linear": OmegaConf.to_container(spec.linear)})


def run_job(spec: DictConfig, job: Job, shared_eval, eval_fingerprint: str) -> dict[str, Any]:
    """Pretrain and evaluate one job (each step skipped when already done); returns its result."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint, trained = pretrain(spec, job)
    if not trained:
        progress(f"run {job.name!r}: pretraining already finished ({checkpoint.name})")
    result_path = job.run_dir / "result.json"
    previous = read_json(result_path)
    same = previous.get("fingerprint") == eval_fingerprint and previous.get("checkpoint") == str(
        checkpoint
    )
    if not trained and same:
        progress(f"run {job.name!r}: already evaluated")
        return previous
    result = evaluate_checkpoint(spec, job.name, checkpoint, job.run_dir, shared_eval)
    result.update(pretrain_costs(job.run_dir), fingerprint=eval_fingerprint)
    write_json(result_path, result)
    progress(
        f"run {job.name!r}: linear {result['linear_acc1']:.2f}%  kNN {result['knn_acc1']:.2f}%  "
        f"RankMe {result['rankme']:.1f}  LiDAR {result['lidar']:.1f}"
        + (f"  k-means NMI {result['kmeans_nmi']:.3f}" if "kmeans_nmi" in result else "")
    )
    return result


def run_compare(spec_path: str | Path, overrides: Sequence[str] = ()) -> Path:
    """Run (or finish) a comparison; returns the path of report.md."""
    import solo_diet

    solo_diet.register()
    spec = load_spec(spec_path, overrides)
    jobs = plan_jobs(spec, parse_runs(spec))
    out = Path(spec.output_dir)
    compose_linear(
        spec, out / "checkpoint-placeholder.ckpt", out
    )  # a bad probe config fails before training
    budget = spec.budget
    progress(
        f"{spec.name}: {len(jobs)} runs, {budget.max_epochs} epochs at batch {budget.batch_size} "
        f"-> {out}"
    )
    eval_fingerprint = evaluation_fingerprint(spec)
    shared_eval = shared_evaluator()
    results = []
    for position, job in enumerate(jobs, 1):
        progress(f"({position}/{len(jobs)}) run {job.name!r}: method {job.cfg.method}")
        results.append(run_job(spec, job, shared_eval, eval_fingerprint))
    report = write_report(spec, results, out)
    progress(f"report: {report}")
    return report
