"""The typed comparison spec (:class:`Spec`) and the checks that build it from the spec's nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, ListConfig

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import FORMAT_KEY, check_run_name, closest_name, setting

REFERENCE_ROWS = ("random_init", "raw_pixels")
SEEDED_REFERENCES = ("random_init",)  # the untrained backbone's initialisation: one per seed
AUTOMATIC = "Or null (automatic)."
RUN_KEYS = ("name", "config_name", "config_path", "overrides", "budget")
RUN_BUDGET_KEYS = ("max_epochs", "samples")
BUDGET_TARGETS = {
    "max_epochs": "max_epochs",
    "batch_size": "optimizer.batch_size",
    "limit_train_batches": "limit_train_batches",
}
SPEC_OWNED = (  # the data, the checkpointing, the rest
    *("data.dataset", FORMAT_KEY, "data.train_path", "data.val_path"),
    *("checkpoint.dir", "checkpoint.enabled", "checkpoint.frequency", "check_val_every_n_epoch"),
    *("auto_resume.enabled", "wandb.enabled", "name", "max_steps"),
)
EXAMPLE = (
    "(e.g. `paper_budget: {epochs: 5000, steps: 977000, batch_size: 256}`: steps or samples are "
    "the paper's for those epochs)"
)


@dataclass(frozen=True)
class PaperBudget:
    """A claim's ``paper_budget``: the source's epochs and steps or samples for them."""

    epochs: int = setting(None, minimum=1, hint=EXAMPLE)
    than_epochs: Optional[int] = setting(None, minimum=1)
    batch_size: Optional[int] = setting(None, minimum=1)
    steps: Optional[int] = setting(None, minimum=1)
    samples: Optional[int] = setting(None, minimum=1)


@dataclass(frozen=True)
class Claim:
    """One of a spec's ``claims``: ``better`` runs against ``than`` runs or ``at_least``."""

    text: str
    metric: str
    better: tuple[str, ...]
    than: tuple[str, ...] = ()
    than_metric: Optional[str] = None
    at_least: Optional[float] = None
    epoch: Optional[int] = None
    paper_budget: Optional[PaperBudget] = None
    definition: str = ""
    ours: bool = False


@dataclass(frozen=True)
class BudgetSettings:
    """``budget``: one budget for every run (docs/compare.md, "Budgets")."""

    max_epochs: int = setting(None, minimum=1, hint="One budget for every run.")
    samples: Optional[int] = setting(None, minimum=1, hint="Samples (views counted), or null.")
    batch_size: int = setting(None, minimum=1, hint="One budget for every run.")
    limit_train_batches: Optional[float] = None
    checkpoint_every_n_epochs: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)
    val_every_n_epochs: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)


@dataclass(frozen=True)
class ParallelSettings:
    """``parallel``: how many jobs run at once, and in which processes."""

    workers: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)
    jobs_per_gpu: Optional[int] = setting(None, minimum=1, hint="Jobs sharing a GPU, or null.")
    mps: str = setting("auto", choices=("auto", "on", "off"))  # a private CUDA MPS daemon
    reuse_workers: bool = True  # true: workers run job after job; false: fresh ones


@dataclass(frozen=True)
class CurvesSettings:
    """``curves``: probes and kNN at this many evenly spaced epochs of each run's own budget."""

    points: int = setting(0, minimum=0, hint="E.g. curves.points=10; 0: no learning curves.")


@dataclass(frozen=True)
class EvaluationSettings:
    """``evaluation``: how each checkpoint is measured (docs/compare.md)."""

    batch_size: int = setting(256, minimum=1)
    knn_k: int = setting(20, minimum=1, hint="It is the neighbours kNN votes over.")
    knn_temperature: float = setting(0.07, within=(1e-12, math.inf))
    knn_distance: str = setting("cosine", choices=("cosine", "euclidean"))
    rankme_samples: int = setting(25600, minimum=2)  # a spectrum of one row has no rank
    lidar_samples: int = setting(1000, minimum=2, hint="LiDAR's class means need two.")
    lidar_views: int = setting(10, minimum=2, hint="LiDAR's class means need two.")
    lidar_augmentations: Optional[str] = None
    lidar_delta: float = setting(1e-4, within=(0.0, math.inf))
    max_rank_dim: int = setting(4096, minimum=1)
    sem_tau: Optional[float] = setting(None, within=(0.0, math.inf))
    rankme_every_n_epochs: int = setting(0, minimum=0)
    clustering: bool = True
    seed: int = setting(0, minimum=0)  # the probes' and the LiDAR views' seed


SECTIONS = {
    "budget": BudgetSettings,
    "parallel": ParallelSettings,
    "curves": CurvesSettings,
    "evaluation": EvaluationSettings,
}


@dataclass(frozen=True)
class DataSettings:
    """``data``, its paths resolved and its ``format`` chosen (``auto`` resolved)."""

    root: Optional[str]
    dataset: str
    train_path: Optional[str]
    val_path: Optional[str]
    format: str


@dataclass(frozen=True)
class LinearSettings:
    """``linear``: the offline probe's YAML and overrides."""

    config_path: str
    config_name: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Run:
    """One entry of ``runs``, with its own budget (``max_epochs`` or ``samples``) or none."""

    name: str
    config_path: Path
    config_name: str
    overrides: tuple[str, ...]
    max_epochs: Optional[int] = None
    samples: Optional[int] = None

    @property
    def own_budget(self) -> bool:
        return self.max_epochs is not None or self.samples is not None


@dataclass(frozen=True)
class Spec:
    """A checked comparison spec; ``resolved``: its YAML, for ``<output_dir>/spec.yaml``."""

    name: str
    output_dir: Path
    data: DataSettings
    budget: BudgetSettings
    seeds: Optional[tuple[int, ...]]
    reference_rows: tuple[str, ...]
    only: Optional[tuple[str, ...]]
    parallel: ParallelSettings
    trainer: tuple[str, ...]
    pretrain_overrides: tuple[str, ...]
    linear: LinearSettings
    evaluation: EvaluationSettings
    curves: CurvesSettings
    runs: tuple[Run, ...]
    claims: tuple[Claim, ...]
    resolved: str

    def chosen_jobs(self) -> int:
        """How many of the plan's jobs (``plan_jobs``) ``only`` chooses."""
        seeds = len(self.seeds) if self.seeds is not None else 1
        counts = {run.name: seeds for run in self.runs}
        counts |= {row: seeds if row in SEEDED_REFERENCES else 1 for row in self.reference_rows}
        return sum(n for name, n in counts.items() if self.only is None or name in self.only)


def check_only(only: Any, names: Sequence[str], where: str) -> Optional[tuple[str, ...]]:
    """``only``: null, or the names of some of the spec's runs and reference rows."""
    if only is None:
        return None
    if not isinstance(only, ListConfig) or len(only) == 0 or not set(only) <= set(names):
        unknown = [n for n in only if n not in names] if isinstance(only, ListConfig) else []
        hints = ", ".join(f"`{c}` for `{n}`" for n in unknown if (c := closest_name(n, names)))
        raise ConfigError(
            f"{where}: `only` must be null (every job) or a list of the spec's run and "
            f"reference-row names {list(names)}, got {only}"
            + (f"; did you mean {hints}?" if hints else ".")
        )
    return tuple(only)


def check_seeds(seeds: Any, rows: Any, where: str) -> Optional[tuple[int, ...]]:
    """``seeds`` (distinct non-negative integers, or null) and ``reference_rows``."""
    if seeds is not None and (
        not isinstance(seeds, ListConfig)
        or len(seeds) == 0
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(
            f"{where}: `seeds` must be a list of distinct non-negative integers (e.g. "
            f"seeds=[0,1,2]: every run once per seed), or null for each config's own seed; "
            f"got {seeds}."
        )
    if not isinstance(rows, ListConfig) or not set(rows) <= set(REFERENCE_ROWS):
        raise ConfigError(
            f"{where}: `reference_rows` must be a list of {list(REFERENCE_ROWS)} ([] turns "
            f"them off), got {rows}."
        )
    return tuple(seeds) if seeds is not None else None


def _own_budget(name: str, entry: Any, max_epochs: int) -> dict[str, int]:
    if entry is None:
        return {}
    if (
        not isinstance(entry, DictConfig)
        or not set(entry) <= set(RUN_BUDGET_KEYS)
        or len(entry) != 1
        or not all(type(v) is int and v > 0 for v in entry.values())  # not a bool
    ):
        raise ConfigError(
            f"run {name!r}: `budget` must be a mapping with one of {list(RUN_BUDGET_KEYS)} (a "
            f"positive integer), e.g. `budget: {{max_epochs: 1000}}`; got {entry}."
        )
    epochs = entry.get("max_epochs")
    if epochs is not None and epochs > max_epochs:
        raise ConfigError(
            f"run {name!r}: `budget.max_epochs` {epochs} is above the spec's `budget.max_epochs` "
            f"{max_epochs}, the most any run trains; raise the spec's."
        )
    return dict(entry)


def parse_runs(
    entries: Sequence[Any], spec: Any, budget: BudgetSettings, seeded: bool
) -> tuple[Run, ...]:
    """The typed ``runs`` of the merged ``spec`` node, refusing missing keys and duplicates."""
    runs: list[Run] = []
    for position, entry in enumerate(entries):
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
        overrides = tuple(str(o) for o in entry.get("overrides") or [])
        check_overrides(f"run {name!r}", overrides, budget, seeded)
        own = _own_budget(name, entry.get("budget"), budget.max_epochs)
        runs.append(Run(name, Path(config_path), str(entry.config_name), overrides, **own))
    for key in ("trainer", "pretrain_overrides"):
        check_overrides(f"`{key}`", [str(o) for o in spec[key]], budget, seeded)
    return tuple(runs)


def check_overrides(
    owner: str, overrides: Sequence[str], budget: BudgetSettings, seeded: bool
) -> None:
    """Refuse overrides of the keys the spec sets for every run (``SPEC_OWNED``, budget, seed)."""
    owned = SPEC_OWNED + (("seed",) if seeded else ())
    budget_keys = {target: key for key, target in BUDGET_TARGETS.items()}
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in budget_keys:
            raise ConfigError(
                f"conflicting budgets: {owner} sets `{override}` but the spec's "
                f"`budget.{budget_keys[key]}` ({getattr(budget, budget_keys[key])}) applies to "
                "every run. Remove the override or change the budget."
            )
        if key in owned:
            raise ConfigError(
                f"{owner} overrides `{key}`, which the comparison sets for every run; remove "
                f"`{override}`."
            )
