"""The runs of a spec and the jobs of a comparison: one pretraining per run and seed, and one per
reference row. Each job has a folder of its own, ``<output_dir>/<job key>/`` (docs/compare.md,
"Workflow"), holding all it writes, so jobs run in any order, in one process or many.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.compare.budgets import RunBudget, check_run_budget, run_budget
from solo_diet.compare.record import progress, read_json
from solo_diet.compare.spec import (
    BUDGET_TARGETS,
    SEEDED_REFERENCES,
    SPEC_OWNED,
    checkpoint_interval,
    compose,
    data_overrides,
    quoted,
    validation_interval,
)
from solo_diet.config import ConfigError, check_run_name, unknown_method_hint

RUN_KEYS = ("name", "config_name", "config_path", "overrides", "budget")


@dataclass
class Run:
    """One entry of ``runs``: a pretraining config plus overrides."""

    name: str
    config_path: Path
    config_name: str
    overrides: list[str]
    budget: Optional[DictConfig] = None  # the run's own ``budget`` (budgets.py)


@dataclass
class Job:
    """One job: a run's pretraining for one seed and its evaluation, or a reference row (whose
    ``cfg`` is the first run's at its seed). ``name`` is the report's ``run`` column, ``seed`` the
    spec's seed (None without ``seeds`` and for a reference row that no seed changes)."""

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


def parse_runs(spec: DictConfig) -> list[Run]:
    """The spec's runs, with clear errors for missing keys, duplicates and budget overrides."""
    runs: list[Run] = []
    for position, entry in enumerate(spec.runs):
        if not isinstance(entry, DictConfig) or "name" not in entry or "config_name" not in entry:
            raise ConfigError(
                f"runs[{position}] must be a mapping with at least `name` and `config_name`."
            )
        unknown = sorted(set(entry) - set(RUN_KEYS))
        if unknown:
            raise ConfigError(
                f"runs[{position}] ({entry.name}): unknown keys {unknown}; allowed "
                f"{list(RUN_KEYS)}."
            )
        name = check_run_name(entry.name, f"runs[{position}]: run name", "Rename the run.")
        if name in {r.name for r in runs}:
            raise ConfigError(f"run name {name!r} must be unique: two runs have it.")
        if name in spec.reference_rows:
            raise ConfigError(
                f"run name {name!r} is the name of a reference row; rename the run or remove "
                f"{name!r} from `reference_rows`."
            )
        config_path = entry.get("config_path") or spec.config_path
        if config_path is None:
            raise ConfigError(
                f"run {name!r}: no `config_path` (set it on the run or at the top of the spec)."
            )
        overrides = [str(o) for o in entry.get("overrides") or []]
        check_overrides(f"run {name!r}", overrides, spec)
        check_run_budget(name, entry.get("budget"), spec.budget.max_epochs)
        runs.append(
            Run(name, Path(config_path), str(entry.config_name), overrides, entry.get("budget"))
        )
    check_overrides("`trainer`", [str(o) for o in spec.trainer], spec)
    check_overrides("`pretrain_overrides`", [str(o) for o in spec.pretrain_overrides], spec)
    return runs


def check_overrides(owner: str, overrides: Sequence[str], spec: DictConfig) -> None:
    """Refuse overrides of the keys the spec sets for every run (``SPEC_OWNED``, budget, seed)."""
    owned = SPEC_OWNED + (("seed",) if spec.seeds is not None else ())
    budget_keys = {target: key for key, target in BUDGET_TARGETS.items()}
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in budget_keys:
            raise ConfigError(
                f"conflicting budgets: {owner} sets `{override}` but the spec's "
                f"`budget.{budget_keys[key]}` ({spec.budget[budget_keys[key]]}) applies to every "
                "run. Remove the override or change the budget."
            )
        if key in owned:
            raise ConfigError(
                f"{owner} overrides `{key}`, which the comparison sets for every run; remove "
                f"`{override}`."
            )


def compose_run(spec: DictConfig, run: Run, run_dir: Path, seed: Optional[int]) -> DictConfig:
    """The run's pretraining cfg: its YAML + trainer + run overrides, then the spec's budget, data,
    seed and checkpointing (which nothing else may set)."""
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
        f"++checkpoint.frequency={checkpoint_interval(spec.budget)}",
        f"++check_val_every_n_epoch={validation_interval(spec.budget)}",
        "++auto_resume.enabled=False",
        "++wandb.enabled=False",
        "++enable_progress_bar=False",  # a line per epoch instead (EpochCostLogger)
    ] + ([f"++seed={seed}"] if seed is not None else [])
    shared = [str(o) for o in (*spec.trainer, *spec.pretrain_overrides)]
    overrides = shared + run.overrides + budget + data_overrides(spec) + forced
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
    budget = run_budget(spec, run.name, run.budget, cfg)
    if budget.epochs != spec.budget.max_epochs:  # its own epochs, checkpoints and validations
        own = OmegaConf.merge(spec.budget, {"max_epochs": budget.epochs})
        cfg.max_epochs = budget.epochs
        cfg.checkpoint.frequency = checkpoint_interval(own)
        cfg.check_val_every_n_epoch = validation_interval(own)
    return cfg


def run_budgets(jobs: Sequence[Job]) -> dict[str, RunBudget]:
    """Each run's budget (its first job's), in spec order, for the report."""
    return {job.name: job.budget for job in jobs if job.budget is not None}


def plan_jobs(spec: DictConfig, runs: Sequence[Run]) -> list[Job]:
    """Every job of the comparison, composed (so a bad config fails before any training): each run
    once per seed, then the reference rows (``random_init`` once per seed too: the untrained
    backbone's initialisation is the seed's; ``raw_pixels`` once, as no seed changes it)."""
    out = Path(spec.output_dir)
    seeds = list(spec.seeds) if spec.seeds is not None else [None]
    jobs = []
    for run in runs:
        for seed in seeds:
            key = f"runs/{run.name}" + (f"/seed_{seed}" if seed is not None else "")
            cfg = compose_run(spec, run, out / key, seed)
            budget = run_budget(spec, run.name, run.budget, cfg)
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
