"""The typed comparison spec (:class:`Spec`, what :func:`~solo_diet.compare.spec.load_spec`
returns) and the checks that build it: the ``budget``, ``parallel``, ``curves`` and
``evaluation`` sections (their defaults are ``SPEC_DEFAULTS``; a field without one is required),
``seeds``, ``reference_rows``, ``only`` and the runs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, ListConfig

from solo_diet.compare.paper_budget import Claim
from solo_diet.config import ConfigError, check_run_name, closest_name, parse_section, setting
from solo_diet.launch.settings import FORMAT_KEY

REFERENCE_ROWS = ("random_init", "raw_pixels")
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


@dataclass(frozen=True)
class BudgetSettings:
    """``budget``: one budget for every run (docs/compare.md, "Budgets")."""

    max_epochs: int = setting(None, minimum=1, hint="One budget for every run.")
    samples: Optional[int] = setting(
        None, minimum=1, hint="Forward-backward samples (views counted), or null to match epochs."
    )
    batch_size: int = setting(None, minimum=1, hint="One budget for every run.")
    limit_train_batches: Optional[float] = None
    checkpoint_every_n_epochs: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)
    val_every_n_epochs: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)


@dataclass(frozen=True)
class ParallelSettings:
    """``parallel``: how many jobs run at once, and in which processes."""

    workers: Optional[int] = setting(None, minimum=1, hint=AUTOMATIC)
    jobs_per_gpu: Optional[int] = setting(
        None,
        minimum=1,
        hint="It is how many jobs share one GPU at a time (null: chosen from the cores and GPUs).",
    )
    mps: str = setting("auto", choices=("auto", "on", "off"))  # a private CUDA MPS daemon
    reuse_workers: bool = True  # true: workers run job after job; false: fresh ones


@dataclass(frozen=True)
class CurvesSettings:
    """``curves``: linear probe and kNN at this many evenly spaced epochs of each run's own budget,
    the last being the final evaluation (docs/compare.md, "Learning curves")."""

    points: int = setting(
        0,
        minimum=0,
        hint="It is the number of epochs of the budget where each run's linear probe and kNN "
        "are measured (e.g. curves.points=10; 0: no learning curves).",
    )


@dataclass(frozen=True)
class EvaluationSettings:
    """``evaluation``: how each checkpoint is measured (docs/compare.md)."""

    batch_size: int = setting(256, minimum=1)
    knn_k: int = setting(20, minimum=1, hint="It is the neighbours kNN votes over.")
    knn_temperature: float = setting(0.07, within=(1e-12, math.inf))
    knn_distance: str = setting("cosine", choices=("cosine", "euclidean"))
    rankme_samples: int = setting(25600, minimum=1)
    lidar_samples: int = setting(1000, minimum=2, hint="LiDAR's class means need two.")
    lidar_views: int = setting(10, minimum=2, hint="LiDAR's class means need two.")
    lidar_augmentations: Optional[str] = None
    lidar_delta: float = setting(1e-4, within=(0.0, math.inf))
    max_rank_dim: int = setting(4096, minimum=1)
    sem_tau: Optional[float] = setting(None, within=(0.0, math.inf))
    rankme_every_n_epochs: int = setting(0, minimum=0)
    clustering: bool = True
    seed: int = 0


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
    """One entry of ``runs``: a pretraining config plus overrides, and its own budget (one of
    ``max_epochs`` and ``samples``, or neither: the spec's)."""

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
    """A checked comparison spec, every section typed; ``resolved`` is its YAML (paths resolved,
    overrides merged), written as ``<output_dir>/spec.yaml``."""

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


def parse_sections(spec: DictConfig) -> dict[str, Any]:
    """The typed sections (``SECTIONS``), each key checked by its field."""
    parsed = {
        section: parse_section(schema, spec, section, f"`{section}`", strict=False)
        for section, schema in SECTIONS.items()
    }
    limit = parsed["budget"].limit_train_batches
    if limit is not None and limit <= 0:
        raise ConfigError(
            f"`budget.limit_train_batches` must be a positive batch count or fraction, got {limit}."
        )
    return parsed


def check_only(spec: DictConfig, spec_path: str | Path) -> None:
    """``only``: null, or the names of some of the spec's runs and reference rows."""
    names = [str(run.get("name")) for run in spec.runs] + list(spec.reference_rows)
    only = spec.only
    if only is None:
        return
    if not isinstance(only, ListConfig) or len(only) == 0 or not set(only) <= set(names):
        unknown = [n for n in only if n not in names] if isinstance(only, ListConfig) else []
        close = [(n, closest_name(n, names)) for n in unknown]
        hints = ", ".join(f"`{c}` for `{n}`" for n, c in close if c)
        raise ConfigError(
            f"{spec_path}: `only` must be null (every job) or a list of the spec's run and "
            f"reference-row names {names}, got {only}"
            + (f"; did you mean {hints}?" if hints else ".")
        )


def check_seeds(spec: DictConfig, spec_path: str | Path) -> None:
    """``seeds`` and ``reference_rows``."""
    seeds = spec.seeds
    if seeds is not None and (
        not isinstance(seeds, ListConfig)
        or len(seeds) == 0
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(
            f"{spec_path}: `seeds` must be a list of distinct non-negative integers (e.g. "
            f"seeds=[0,1,2]: every run once per seed), or null for each config's own seed; "
            f"got {seeds}."
        )
    rows = spec.reference_rows
    if not isinstance(rows, ListConfig) or not set(rows) <= set(REFERENCE_ROWS):
        raise ConfigError(
            f"{spec_path}: `reference_rows` must be a list of {list(REFERENCE_ROWS)} ([] turns "
            f"them off), got {rows}."
        )


def _own_budget(name: str, entry: Any, max_epochs: int) -> dict[str, int]:
    """A run's own ``budget``: one of ``max_epochs`` (at most the spec's) or ``samples``."""
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


def parse_runs(spec: DictConfig, budget: BudgetSettings) -> tuple[Run, ...]:
    """The spec's runs, with clear errors for missing keys, duplicates and budget overrides."""
    runs: list[Run] = []
    seeded = spec.seeds is not None
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
