"""The plan of a comparison: its jobs, one pretraining per run and seed, and one per reference
row, each composed with its budget once. Each job has a folder of its own, ``<output_dir>/<job
key>/`` (docs/compare.md, "Workflow"), holding all it writes, so jobs run in any order, in one
process or many.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.compare.budgets import RunBudget, run_budget
from solo_diet.compare.record import progress, read_json
from solo_diet.compare.spec import (
    SEEDED_REFERENCES,
    checkpoint_interval,
    compose,
    data_overrides,
    quoted,
    validation_interval,
)
from solo_diet.compare.spec_checks import BUDGET_TARGETS, Run, Spec
from solo_diet.config import ConfigError, unknown_method_hint


@dataclass(frozen=True)
class Job:
    """One job: a run's pretraining for one seed and its evaluation, or a reference row (whose
    ``cfg`` is the first run's at its seed). ``name`` is the report's ``run`` column, ``seed`` the
    spec's seed (None without ``seeds`` and for a reference row that no seed changes); ``cfg``
    is the composed config (solo-learn's, for its ``args.json``), ``budget`` the run's."""

    name: str
    key: str
    run_dir: Path
    cfg: DictConfig
    seed: Optional[int] = None
    reference: Optional[str] = None
    budget: Optional[RunBudget] = None

    @property
    def label(self) -> str:
        """How progress lines name the job."""
        kind = "reference" if self.reference is not None else "run"
        return f"{kind} {self.name!r}" + (f" seed {self.seed}" if self.seed is not None else "")

    @property
    def cfg_seed(self) -> Any:
        """The seed the job trains with; None for a reference row that no seed changes."""
        if self.reference is not None and self.reference not in SEEDED_REFERENCES:
            return None
        return OmegaConf.select(self.cfg, "seed")

    def gpus(self) -> int:
        """GPUs the job needs: 0 on CPU, the pretraining's device count (1 for a reference row)."""
        if str(OmegaConf.select(self.cfg, "accelerator", default="auto")) == "cpu":
            return 0
        devices = OmegaConf.select(self.cfg, "devices", default=1)
        if isinstance(devices, ListConfig):
            count = len(devices)
        else:  # "auto" or -1: every GPU the job is given, here one
            count = max(int(devices), 1) if str(devices).isdigit() else 1
        return min(count, 1) if self.reference is not None else count


def compose_run(
    spec: Spec, run: Run, run_dir: Path, seed: Optional[int]
) -> tuple[DictConfig, RunBudget]:
    """The run's pretraining cfg and budget: its YAML + trainer + run overrides, then the spec's
    data, seed and checkpointing, then the run's budget, computed once (nothing else may set
    them)."""
    from solo.methods import METHODS

    forced = [
        quoted("name", run.name),
        quoted("checkpoint.dir", run_dir / "pretrain"),
        "++checkpoint.enabled=True",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "++enable_progress_bar=False",  # a line per epoch instead (EpochCostLogger)
    ] + ([f"++seed={seed}"] if seed is not None else [])
    overrides = [*spec.trainer, *spec.pretrain_overrides, *run.overrides]
    overrides += data_overrides(spec.data) + forced
    cfg = compose(f"run {run.name!r}", run.config_path, run.config_name, overrides)
    if cfg.get("method") not in METHODS:
        hint = unknown_method_hint(cfg.get("method"), METHODS)
        raise ConfigError(f"run {run.name!r}: unknown method {cfg.get('method')!r}; {hint}")
    if OmegaConf.select(cfg, "max_steps") not in (None, -1):
        raise ConfigError(
            f"conflicting budgets: run {run.name!r} sets max_steps={cfg.max_steps}; the budget is "
            "epochs."
        )
    limit = OmegaConf.select(cfg, "limit_train_batches")
    if spec.budget.limit_train_batches is None and limit not in (None, 1.0):
        raise ConfigError(
            f"conflicting budgets: {run.config_name}.yaml of run {run.name!r} sets "
            f"limit_train_batches={limit}; set `budget.limit_train_batches` for every run instead."
        )
    budget = run_budget(spec, run, cfg)
    written = {target: getattr(spec.budget, key) for key, target in BUDGET_TARGETS.items()} | {
        "max_epochs": budget.epochs,  # its own epochs, checkpoints and validations
        "checkpoint.frequency": checkpoint_interval(spec.budget, budget.epochs),
        "check_val_every_n_epoch": validation_interval(spec.budget, budget.epochs),
    }
    for key, value in written.items():
        if value is not None:
            OmegaConf.update(cfg, key, value, force_add=True)
    return cfg, budget


def run_budgets(jobs: Sequence[Job]) -> dict[str, RunBudget]:
    """Each run's budget (its first job's), in spec order, for the report."""
    return {job.name: job.budget for job in jobs if job.budget is not None}


def plan_jobs(spec: Spec) -> list[Job]:
    """Every job of the comparison, composed (so a bad config fails before any training): each run
    once per seed, then the reference rows (``random_init`` once per seed too: the untrained
    backbone's initialisation is the seed's; ``raw_pixels`` once, as no seed changes it)."""
    out = spec.output_dir
    seeds = list(spec.seeds) if spec.seeds is not None else [None]
    jobs = []
    for run in spec.runs:
        for seed in seeds:
            key = f"runs/{run.name}" + (f"/seed_{seed}" if seed is not None else "")
            cfg, budget = compose_run(spec, run, out / key, seed)
            jobs.append(Job(run.name, key, out / key, cfg, seed, budget=budget))
    first_run = jobs[: len(seeds)]
    for row in spec.reference_rows:
        seeded = row in SEEDED_REFERENCES
        for job in first_run if seeded else first_run[:1]:
            row_seed = job.seed if seeded else None
            key = f"references/{row}" + (f"/seed_{row_seed}" if row_seed is not None else "")
            jobs.append(Job(row, key, out / key, job.cfg, row_seed, reference=row))
    return jobs


def recorded_pretrain_s(job: Job) -> Optional[float]:
    """The longest pretraining wall time that a ``result.json`` records for the job's run, at any
    seed (the job's own folder without ``seeds``); None when no job of the run finished."""
    folders = job.run_dir.parent.glob("seed_*") if job.seed is not None else [job.run_dir]
    times = [read_json(folder / "result.json").get("pretrain_wall_s") for folder in folders]
    return max((t for t in times if isinstance(t, (int, float))), default=None)


def longest_first(jobs: Sequence[Job]) -> list[Job]:
    """``jobs`` in the order that lets a fan-out end soonest: runs never measured first (spec
    order), then the others by :func:`recorded_pretrain_s`, longest first, reference rows last."""

    def rank(job: Job) -> tuple[int, float]:
        if job.reference is not None:
            return (2, 0.0)
        measured = recorded_pretrain_s(job)
        return (0, 0.0) if measured is None else (1, -measured)

    return sorted(jobs, key=rank)  # stable: spec order among equals


def latest_checkpoint(folder: Path) -> Optional[Path]:
    """The newest checkpoint under ``folder`` that loads (highest epoch, newest file on ties);
    each newer one that does not load is named in a progress line and skipped."""
    from solo_diet.launch.checkpointing import newest_loading

    return newest_loading(folder.glob("**/*.ckpt"), say=progress)
